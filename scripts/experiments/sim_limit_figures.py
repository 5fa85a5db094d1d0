"""The largest acceleration and start jump the sim arm is commanded: the figures behind
config/sim.yaml's and config/sim_demo.yaml's joint_limits block.

    python scripts/experiments/sim_limit_figures.py --expert-episodes 12 --policy-episodes 2

Measured with the node's convention (oxygen_core.safety.gate): a chunk's row i is reached
(i + 1) control periods after the measured state s, the first step's velocity is
(row 0 - s) / dt, the acceleration is the difference of consecutive step velocities over
dt, and the start jump is |row 0 - s|. The scripted expert's commanded targets are read
as chunks of `--horizon` rows from each step's state; the shipped policy's chunks
(data/policy/sim_demo, in process through oxygen_core.train.rollout) as it sends them.
Prints one JSON object: per source, the largest figure per joint. An experiment harness,
not part of the package: it runs from the checkout's venv.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from oxygen_core.sim.expert import Expert
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ
from oxygen_core.sim.tasks import make_task
from oxygen_core.train import rollout
from oxygen_ros.pipeline import make_pipeline
from oxygen_ros.tools.configure import load_settings

FAMILIES = ("pick", "put", "push")
DT = 1.0 / DEFAULT_CONTROL_HZ


def chunk_figures(state: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per joint: the largest |velocity|, |acceleration| and the start jump of one chunk."""
    path = np.vstack([state, rows])
    velocity = np.diff(path, axis=0) / DT
    accel = np.abs(np.diff(velocity, axis=0)).max(axis=0) / DT if len(rows) > 1 else 0 * state
    return np.abs(velocity).max(axis=0), accel, np.abs(rows[0] - state)


def expert_chunks(seeds: int, horizon: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(state, next `horizon` commanded targets) at every step of every episode."""
    chunks = []
    for family in FAMILIES:
        for seed in range(seeds):
            task = make_task(family, seed)
            world = task.new_world()
            expert = Expert(task, world)
            states, targets = [], []
            for _ in range(int(round(task.time_limit * DEFAULT_CONTROL_HZ))):
                states.append(world.joints.copy())
                targets.append(expert.act(world, DT).targets)
                world.step(targets[-1], DT)
                if task.succeeded(world):
                    break
            targets_array = np.array(targets)
            for i, state in enumerate(states[: len(states) - horizon]):
                chunks.append((state, targets_array[i : i + horizon]))
    return chunks


def policy_chunks(seeds: int, params: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(observed state, the chunk the engine returned) for every frame of a few episodes."""
    settings, _ = load_settings(params)
    engine = make_pipeline(settings).engine
    chunks = []
    act = engine.act

    def recording_act(obs, *args, **kwargs):
        action = act(obs, *args, **kwargs)
        chunks.append((np.asarray(obs.state, np.float64), np.asarray(action.actions)))
        return action

    engine.act = recording_act
    renderer = Renderer(128, 128)
    execute = settings.node.execute_horizon
    for family in FAMILIES:
        for seed in range(seeds):
            rollout.run_episode(engine, family, 1000 + seed, execute, renderer)
    return chunks


def largest(chunks: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, object]:
    """The largest figure per joint over `chunks`, and how many there were."""
    figures = [chunk_figures(state, rows) for state, rows in chunks]
    return {
        "chunks": len(chunks),
        "velocity": np.max([f[0] for f in figures], axis=0).round(3).tolist(),
        "acceleration": np.max([f[1] for f in figures], axis=0).round(3).tolist(),
        "jump": np.max([f[2] for f in figures], axis=0).round(4).tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expert-episodes", type=int, default=12)
    parser.add_argument("--policy-episodes", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--params", type=Path, default=Path("config/sim_demo.yaml"))
    args = parser.parse_args()
    result = {"expert": largest(expert_chunks(args.expert_episodes, args.horizon))}
    print(json.dumps(result), flush=True)
    if args.policy_episodes:
        result["policy"] = largest(policy_chunks(args.policy_episodes, args.params))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
