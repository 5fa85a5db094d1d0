"""Recovery data: the policy drives the arm and the expert labels where it went (DAgger).

A policy trained on expert episodes has seen the expert's states, and DART's bursts
(`records.Dart`) a few centimetres around them. Its own errors take the arm elsewhere:
the gripper closing beside the wrong object, the arm drifting above the table, states no
expert episode visits and from which it never learned the way back. DAgger (Ross, Gordon
and Bagnell 2011) records the states the policy visits and labels each with what the
expert would do there.

Here the policy closes the loop exactly as `rollout.run_episode` runs it (the engine,
the trajectory controller, no link delay), and an `ExpertLabels` shadow runs the
scripted expert alongside, every control step, on the world the policy made (the
expert's phase machine reads the world: it waits for the arm, retries a failed grasp).
At each frame the record's chunk is the H commands the expert would give if it took
over now: a copy of the expert and of the world run H steps ahead on the expert's own
commands, the copy taking over from the arm as it is (`Expert.take_over`): the shadow's
setpoint runs on along its segment while the policy's arm is elsewhere, and labels from
it would jump there. The shadow's phases advance only when the world shows them done (the
arm at the goal, the object held). The language targets are the
expert's narration and its latest memory line, the grounding rows those of the scene as
it is, as in expert episodes. Every episode is kept, failed or not: its states are the point.

    oxygen-train-dagger --checkpoint data/policy/sim_demo --seeds 100 --out out/dagger.npz
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import numpy as np
from tqdm import tqdm

from oxygen_core.config import ModelConfig
from oxygen_core.engine.engine import Engine, make_engine
from oxygen_core.engine.types import EngineConfig
from oxygen_core.observation import Observation
from oxygen_core.policy import load_policy
from oxygen_core.sim import arm
from oxygen_core.sim.expert import Expert
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ
from oxygen_core.sim.tasks import FAMILIES, Task
from oxygen_core.sim.world import World
from oxygen_core.train import dataset as D
from oxygen_core.train import locate, rollout
from oxygen_core.train.records import Record


class ExpertLabels:
    """A `rollout.Shadow`: the expert beside the policy, and a record per frame.

    The shadow expert itself never takes over (its phases advance when the world shows
    them done); each frame's chunk comes from a copy that does. Frames with no chunk
    (`expert_chunk` None) are not recorded, and once the shadow itself cannot go on (the
    policy moved an object out of its reach) the episode records no more frames."""

    def __init__(self, episode: str, horizon: int, control_hz: float = DEFAULT_CONTROL_HZ):
        self.episode, self.horizon, self.dt = episode, horizon, 1.0 / control_hz
        self.records: list[Record] = []
        self.lost = False
        self._expert: Expert | None = None
        self._memory = ""
        self._ask: np.random.Generator | None = None

    def __call__(self, task: Task, world: World, obs: Observation | None) -> None:
        if self.lost:
            return
        if self._expert is None:
            self._expert = Expert(task, world)
            self._ask = np.random.default_rng([task.seed, 11])
        # Before the shadow acts: the copies start where it stands.
        chunk = None if obs is None else expert_chunk(self._expert, world, self.horizon, self.dt)
        try:
            step = self._expert.act(world, self.dt)
        except arm.Unreachable:
            self.lost = True
            return
        self._memory = step.memory or self._memory
        if chunk is not None:
            rows = locate.rows(task, world, self._ask)
            self.records.append(
                Record(self.episode, obs, chunk, step.narration, self._memory, rows)
            )


def expert_chunk(expert: Expert, world: World, horizon: int, dt: float) -> np.ndarray | None:
    """float32 [horizon, 7]: the commands `expert` would give taking over from the arm as
    it is (`Expert.take_over`), run on copies, so neither the expert nor the world moves.
    None where the way from the arm leaves top-down reach: the only label left there
    would be a jump back to the shadow's setpoint, a move no chunk can make."""
    ahead, sim = copy.deepcopy((expert, world))
    ahead.take_over(sim)
    rows = []
    try:
        for _ in range(horizon):
            rows.append(ahead.act(sim, dt).targets)
            sim.step(rows[-1], dt)
    except arm.Unreachable:
        return None
    return np.asarray(rows, np.float32)


def policy_episode(
    engine: Engine, family: str, seed: int, execute: int, renderer: Renderer
) -> tuple[list[Record], bool]:
    """The labelled frames of one closed-loop episode of `engine`'s policy, and whether
    the policy succeeded."""
    labels = ExpertLabels(f"dagger/{family}/{seed}", engine.policy.config.action_horizon)
    outcome = rollout.run_episode(engine, family, seed, execute, renderer, shadow=labels)
    return labels.records, outcome.success


def collect(
    engine: Engine,
    config: ModelConfig,
    families: list[str],
    seeds: range,
    execute: int,
    camera_size: int,
) -> tuple[D.Episodes, dict[str, list[bool]]]:
    """Every family on every seed -> Episodes (in seed order) and the policy's successes."""
    renderer = Renderer(camera_size, camera_size)
    parts, wins = [], {f: [] for f in families}
    bar = tqdm(total=len(seeds) * len(families), desc="dagger", unit="ep")
    for seed in seeds:
        for family in families:
            records, success = policy_episode(engine, family, seed, execute, renderer)
            if records:
                parts.append(D.collect(records, config))
            wins[family].append(success)
            bar.update(1)
    bar.close()
    return D.concat(parts), wins


def main(argv: list[str] | None = None) -> None:
    from oxygen_core.train.cli import CONFIG_FILE, TOKENIZER_FILE  # cli imports this module

    args = _parser().parse_args(argv)
    ckpt = Path(args.checkpoint)
    meta = json.loads((ckpt / CONFIG_FILE).read_text())
    policy = load_policy(meta["preset"], meta["robot"], ckpt, ckpt / TOKENIZER_FILE)
    engine = make_engine(
        policy,
        EngineConfig(streams=(), seed=args.seed),  # actions only: no language phase
    )
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    data, wins = collect(
        engine, policy.config, args.families, seeds, args.execute, meta["camera_size"]
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    data.save(Path(args.out))
    rates = {f: f"{sum(w)}/{len(w)}" for f, w in wins.items()}
    print(json.dumps({"frames": len(data), "policy_success": rates, "out": args.out}))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oxygen-train-dagger",
        description="frames of a trained policy in closed loop, labelled by the expert",
    )
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True, help="episodes .npz (oxygen-train --add-episodes)")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--seeds", type=int, default=100, help="seeds per family")
    p.add_argument(
        "--first-seed", type=int, default=0, help="training seeds (evaluation's start at 100000)"
    )
    p.add_argument("--execute", type=int, default=2, help="chunk rows run per frame")
    p.add_argument("--seed", type=int, default=0, help="the engine's noise seed")
    return p


if __name__ == "__main__":
    main()
