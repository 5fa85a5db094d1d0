"""`oxygen-eval node --world aloha`: the oxygen node in closed loop on gym-aloha's ALOHA.

    oxygen-eval node --world aloha [--params config/aloha_sim.yaml]
                          [--policy model|expert|hold|random|blind]
                          [--tasks transfer_cube,insertion] [--episodes 2]
                          [--first-seed 400000] [--rtf 0.5] [--camera-size 224]
                          [--set NAME=VALUE ...] [--delay-steps D] [--echo] [--out DIR]

The run is tools.task_eval's; this module says what ALOHA is to it: the sim node
`oxygen-sim --world aloha` (oxygen_core.aloha.episode), its 50 Hz step, the top and
wrist cameras, the params that drive it (the 14 state joints and 14 commands in the
Interbotix drivers' units, split over the two arms' and two grippers' controllers as
config/aloha.yaml wires a real ALOHA), and what its sim counts of the trajectories it gets
(accepted, and rejected by reason). An episode ends at success (reward 4) or at the step
limit stated with every figure: gym-aloha's 300 for transfer_cube, ACT's 400 for
insertion (oxygen_core.aloha.expert.EXPERT_STEPS).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oxygen_core.aloha.env import TASKS
from oxygen_core.aloha.episode import (
    ACTION_NAMES,
    CAMERAS,
    CONTROLLERS,
    PERIOD_NS,
    SIM_POLICIES,
    STATE_NAMES,
    AlohaOutcome,
)
from oxygen_core.aloha.expert import EXPERT_STEPS
from oxygen_ros import topics
from oxygen_ros.params import Settings, commanded_names
from oxygen_ros.tools.closed_loop import World
from oxygen_ros.tools.configure import TopicNames
from oxygen_ros.tools.sim.aloha import BINDING, TOPICS
from oxygen_ros.tools.task_eval import TaskWorld, main_for

ROOT = Path(__file__).resolve().parents[2]  # oxygen_ros/tools/aloha_eval.py
ALOHA_SIM_PARAMS = ROOT / "config" / "aloha_sim.yaml"


def check_params(settings: Settings, names: TopicNames) -> None:
    """ALOHA's 14 state joints and commands, three cameras, and trajectories split over the
    sim's four controllers (each message is run by the controller whose joints it names);
    one-line ValueError otherwise."""
    node = settings.node
    if tuple(node.joint_names) != STATE_NAMES:
        raise ValueError(f"joint_names must be the sim's state {list(STATE_NAMES)}")
    if commanded_names(node, settings.robot) != ACTION_NAMES:
        raise ValueError(f"action_names must be the sim's commands {list(ACTION_NAMES)}")
    if len(names.cameras) != len(CAMERAS):
        raise ValueError(f"camera_topics must list the sim's {', '.join(CAMERAS)} cameras")
    wanted = sorted(c.joints for c in CONTROLLERS)
    if not node.joint_trajectory or sorted(c.joints for c in node.controllers) != wanted:
        raise ValueError(
            "the trajectories must be split over the sim's controllers (joint_trajectory on, "
            f"controllers' joints {[list(j) for j in wanted]})"
        )


def topic_parameters(names: TopicNames) -> dict[str, Any]:
    """The sim's topics: the node's cameras (in the preset's slot order), joint state and
    per-controller trajectories."""
    cameras = {
        f"{camera}_camera_topic": t for camera, t in zip(CAMERAS, names.cameras, strict=True)
    }
    trajectories = list(names.per_stream(topics.JOINT_TRAJECTORY).values())
    return cameras | {"joint_state_topic": names.joint_state, "controller_topics": trajectories}


ALOHA = TaskWorld(
    world=World(
        name=BINDING.name,
        topics={t.key: t.topic for t in TOPICS},
        outcome=lambda msg: json.loads(msg.data),  # AlohaOutcome as JSON
        success=lambda outcome: outcome["success"],
        line=lambda outcome: BINDING.outcome_line(AlohaOutcome(**outcome)),
        index=lambda outcome: outcome["index"],
    ),
    title="ALOHA",
    sim_topics=TOPICS,
    params=ALOHA_SIM_PARAMS,
    tasks=TASKS,
    sim_policies=SIM_POLICIES,
    period_ns=PERIOD_NS,
    max_steps=max(EXPERT_STEPS.values()),
    cameras="top and wrist cameras",
    check_params=check_params,
    topic_parameters=topic_parameters,
    episode_keys=("max_steps", "reward", "success_step", "limits", "late_takeovers"),
    counts=("accepted",),
    rejected="rejected",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-eval node --world aloha`."""
    return main_for(ALOHA, __doc__.split("\n\n")[0].strip(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
