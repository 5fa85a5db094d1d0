"""Recovery data: the policy drives the arm, then the expert takes over from where it is.

A policy trained on expert episodes has seen the expert's states, and DART's bursts
(`records.Dart`) a few centimetres around them. Its own errors take the arm elsewhere:
the gripper closing beside the wrong object, the wrist tilted off top-down, the arm
drifting above the table, states no expert episode visits and from which it never
learned the way back. Here the trained policy closes the loop as `rollout.run_episode`
runs it (the engine, the trajectory controller) for a random part of the episode, and
the scripted expert then takes over from the world the policy left, its script from the
start (move above the target, descend, grasp, ...): the records are that take-over
episode, the expert's commands from the policy's states back to success, kept only when
it succeeds (as `records.expert_episode`, which runs it).

This is DAgger's aim (Ross, Gordon and Bagnell 2011: train on the states the policy
visits) with the expert's own trajectories for labels, not its action at each visited
state: the scripted expert is a phase machine, not a state-feedback policy. Asked what to
do at every frame of the policy's own path, its phases lag the policy's (it waits for
the arm to reach each goal within millimetres before the next), so those labels keep the
gripper open wherever the policy went early; a policy fine-tuned on them stopped closing
its gripper (pick 0/50: docs/experiments/training.md).

    oxygen-train dagger --checkpoint data/policy/sim_demo --episodes 100 --out out/recover.npz
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from oxygen_core.config import ModelConfig
from oxygen_core.engine.engine import Engine, make_engine
from oxygen_core.engine.types import EngineConfig
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ
from oxygen_core.sim.seeds import check_not_evaluation
from oxygen_core.sim.tasks import FAMILIES, make_task
from oxygen_core.train import dataset as D
from oxygen_core.train import rollout
from oxygen_core.train.checkpoints import trained_policy
from oxygen_core.train.records import Record, expert_episode


def handover_step(family: str, seed: int, control_hz: float = DEFAULT_CONTROL_HZ) -> int:
    """The control step at which the expert takes over: uniform over the first half of
    the task's time limit, from the seed (the policy's early and late mistakes alike)."""
    steps = int(round(make_task(family, seed).time_limit * control_hz))
    rng = np.random.default_rng([seed, 17])
    return int(rng.integers(1, steps // 2 + 1))


def recovery_episode(
    engine: Engine, family: str, seed: int, execute: int, renderer: Renderer, camera_size: int
) -> list[Record]:
    """The expert's records from where `engine`'s policy left the arm after
    `handover_step` steps; [] when the expert then fails."""
    world = make_task(family, seed).new_world()
    handover = handover_step(family, seed)
    rollout.run_episode(engine, family, seed, execute, renderer, max_steps=handover, world=world)
    horizon = engine.policy.config.action_horizon
    name = f"recover/{family}/{seed}"
    return expert_episode(family, seed, horizon, camera_size, world=world, name=name)


def collect(
    engine: Engine,
    config: ModelConfig,
    families: list[str],
    seeds: range,
    execute: int,
    camera_size: int,
) -> tuple[D.Episodes, dict[str, list[bool]]]:
    """Every family on every seed -> Episodes of the expert's successful take-overs (in
    seed order), and per family whether each take-over succeeded."""
    renderer = Renderer(camera_size, camera_size)
    parts, recovered = [], {f: [] for f in families}
    bar = tqdm(total=len(seeds) * len(families), desc="recovery", unit="ep")
    for seed in seeds:
        for family in families:
            records = recovery_episode(engine, family, seed, execute, renderer, camera_size)
            if records:
                parts.append(D.collect(records, config))
            recovered[family].append(bool(records))
            bar.update(1)
    bar.close()
    return D.concat(parts), recovered


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    try:
        check_not_evaluation(seeds, "recovery seeds")
    except ValueError as error:
        parser.error(str(error))
    policy, meta = trained_policy(Path(args.checkpoint))
    engine = make_engine(policy, EngineConfig(streams=(), seed=args.seed))  # actions only
    camera = meta["camera_size"]
    data, recovered = collect(engine, policy.config, args.families, seeds, args.execute, camera)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    data.save(Path(args.out))
    rates = {f: f"{sum(r)}/{len(r)}" for f, r in recovered.items()}
    print(json.dumps({"steps": len(data), "expert_recovered": rates, "out": args.out}))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oxygen-train dagger",
        description="expert episodes taking over from where a trained policy left the arm",
    )
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True, help="episodes .npz (oxygen-train --add-episodes)")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--episodes", type=int, default=100, help="seeds per family")
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="training seeds: never the dev or test seeds (oxygen_core.sim.seeds)",
    )
    p.add_argument("--execute", type=int, default=2, help="chunk rows run per frame")
    p.add_argument("--seed", type=int, default=0, help="the engine's noise seed")
    return p


if __name__ == "__main__":
    main()
