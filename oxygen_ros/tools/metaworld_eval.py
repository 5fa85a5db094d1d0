"""`oxygen-eval node --world metaworld`: the oxygen node in closed loop on Meta-World's MT10.

    oxygen-eval node --world metaworld [--params config/metaworld.yaml]
                          [--policy model|expert|hold|random|blind]
                          [--tasks drawer-open-v3,push-v3] [--episodes 2]
                          [--first-seed 400000] [--rtf 0.5] [--camera-size 224]
                          [--set NAME=VALUE ...] [--delay-steps D] [--echo] [--out DIR]

The run is tools.task_eval's; this module says what Meta-World is to it: the sim node
`oxygen-sim --world metaworld`, its 80 Hz step, one corner2 camera, the params that drive
it (its 4-number state and actions), and what its sim counts of the chunks it gets (steps
held for want of a chunk row, actions clipped to [-1, 1], malformed actions held, chunks
accepted and rejected by reason). Seeds are Meta-World's own task sampling
(`MT1(task, seed)`). With `--policy hold|random|blind` the sim sends an image-free
baseline's actions (oxygen_core.metaworld.baselines).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oxygen_core.metaworld.env import ACTION_NAMES, STATE_NAMES
from oxygen_core.metaworld.episode import CONTROL_PERIOD_NS, MetaWorld
from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_ros import topics
from oxygen_ros.params import Settings, commanded_names
from oxygen_ros.tools.closed_loop import World
from oxygen_ros.tools.configure import TopicNames
from oxygen_ros.tools.sim.metaworld import TOPICS, outcome_line
from oxygen_ros.tools.task_eval import TaskWorld, main_for

ROOT = Path(__file__).resolve().parents[2]  # oxygen_ros/tools/metaworld_eval.py
METAWORLD_PARAMS = ROOT / "config" / "metaworld.yaml"
_MAX_STEPS = 500  # every MT10 task's step limit


def is_metaworld_params(settings: Settings) -> bool:
    """Whether a params file is written for Meta-World's robot: its state is the sim's
    (the one thing no other robot's params have); METAWORLD.check says what else is wrong."""
    return tuple(settings.node.joint_names) == STATE_NAMES


def check_params(settings: Settings, names: TopicNames) -> None:
    """Meta-World's state, its 4 actions, one camera; one-line ValueError otherwise."""
    node = settings.node
    if not is_metaworld_params(settings):
        raise ValueError(
            f"joint_names must be the sim's state {list(STATE_NAMES)}: {node.joint_names}"
        )
    if commanded_names(node, settings.robot) != ACTION_NAMES:
        raise ValueError(
            f"action_names must be the sim's {list(ACTION_NAMES)}: {node.action_names}"
        )
    if len(names.cameras) != 1:
        raise ValueError(
            f"the sim has one camera (corner2); camera_topics lists {list(names.cameras)}"
        )


def topic_parameters(names: TopicNames) -> dict[str, Any]:
    """The sim's topics: the node's camera, state and action chunk."""
    return {
        "camera_topic": names.cameras[0],
        "state_topic": names.joint_state,
        "action_topic": names.output(topics.ACTION_CHUNK),
    }


METAWORLD = TaskWorld(
    world=World(
        name=MetaWorld.name,
        topics={t.key: t.topic for t in TOPICS},
        outcome=lambda msg: json.loads(msg.data),  # MetaWorldEpisode.outcome's JSON
        success=lambda outcome: outcome["success"],
        line=outcome_line,
        index=lambda outcome: outcome["index"],
    ),
    title="Meta-World",
    sim_topics=TOPICS,
    params=METAWORLD_PARAMS,
    tasks=MT10_TASKS,
    sim_policies=MetaWorld.sim_policies,
    period_ns=CONTROL_PERIOD_NS,
    max_steps=_MAX_STEPS,
    cameras="corner2 camera",
    check_params=check_params,
    topic_parameters=topic_parameters,
    episode_keys=("max_path_length",),
    counts=("held_steps", "actions_clipped", "actions_malformed", "chunks_accepted"),
    rejected="chunks_rejected",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-eval node --world metaworld`."""
    return main_for(METAWORLD, __doc__.split("\n\n")[0].strip(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
