"""Meta-World as a world the sim runs (oxygen_core.worlds): episodes of an MT10 task at a
seed, one env step per tick (12.5 ms, 80 Hz).

A command is a `Chunk` of action rows: the latest-received chunk whose stamp has come
supersedes the ones before it and runs row k at its stamp + k periods (rows already past
are skipped); when no chunk runs (none yet, or its rows used up) the step holds (zero
delta, the last gripper effort). The expert's action for a tick goes out as a one-row
chunk; with `noise` (DART, for training data) the chunk run is that action plus the
episode's noise bursts, clipped as the env clips, while the one shown on the expert's
topic stays clean (the training target). A baseline (hold, random, blind:
oxygen_core.metaworld.baselines) sends one row a tick for the observation. Episodes end
at the benchmark's success flag or its step limit.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.metaworld.baselines import BASELINES, Actor, baseline_actor
from oxygen_core.metaworld.env import ACTION_NAMES, CAMERA, Expert, MetaWorldEnv, Observation
from oxygen_core.metaworld.tasks import MT10_TASKS, Narrator, instruction
from oxygen_core.train.records import Dart, DartNoise
from oxygen_core.worlds import Lines, Refused, SimActs, Tally

CONTROL_PERIOD_NS = 12_500_000  # the env's step: MuJoCo's 2.5 ms x frame skip 5 (80 Hz)


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A command: row k applies from start_ns + k control periods."""

    start_ns: int
    rows: np.ndarray  # H x 4


class ChunkRunner:
    """The chunks a robot's controller runs: the latest-received chunk whose stamp has come
    supersedes the ones before it; none running (none yet, or its rows used up) is a hold."""

    def __init__(self) -> None:
        self._chunks: list[Chunk] = []

    def add(self, chunk: Chunk) -> None:
        self._chunks.append(chunk)

    def row_at(self, t_ns: int) -> np.ndarray | None:
        """The action for sim time t (None: hold)."""
        started = [i for i, c in enumerate(self._chunks) if c.start_ns <= t_ns]
        if not started:
            return None
        del self._chunks[: started[-1]]  # superseded from their successor's stamp on
        chunk = self._chunks[0]
        k = (t_ns - chunk.start_ns) // CONTROL_PERIOD_NS
        return chunk.rows[k] if k < len(chunk.rows) else None


def noise_rng(task: str, seed: int) -> np.random.Generator:
    """The noise stream of one episode: its own per task and seed, whatever ran before."""
    return np.random.default_rng([seed, MT10_TASKS.index(task)])


class MetaWorld:
    """Meta-World's MT10 tasks: one env per task, built on first use and reused across its
    episodes (on the loop's thread, which owns its GL context)."""

    name = "metaworld"
    period_ns = CONTROL_PERIOD_NS
    cameras = (CAMERA,)
    sim_policies = ("expert", *BASELINES)
    episode_names = MT10_TASKS

    def __init__(self, camera_size: int = 224, noise: Dart | None = None) -> None:
        if not 16 <= camera_size <= 1024:
            raise ValueError(f"camera_size must be in [16, 1024], got {camera_size}")
        self.camera_size, self.noise = camera_size, noise
        self._envs: dict[str, MetaWorldEnv] = {}

    def env(self, task: str) -> MetaWorldEnv:
        if task not in self._envs:
            self._envs[task] = MetaWorldEnv(task, self.camera_size)
        return self._envs[task]

    def episode(self, name: str, seed: int, policy: str, t_ns: int) -> MetaWorldEpisode:
        if self.noise is not None and policy != "expert":
            raise ValueError(f"noise perturbs the expert's actions, not policy {policy!r}")
        return MetaWorldEpisode(self.env(name), name, seed, policy, self.noise)

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()


class MetaWorldEpisode:
    """One Meta-World episode: the task's env reset to the seed, its runner and narrator."""

    def __init__(
        self, env: MetaWorldEnv, task: str, seed: int, policy: str, noise: Dart | None
    ) -> None:
        begin = time.monotonic()
        self.env, self.task, self.seed = env, task, seed
        self.obs: Observation = env.reset(seed, render=False)
        self.reset_wall_s = time.monotonic() - begin  # Meta-World's task sampling, ~1 s
        self.instruction = instruction(task)
        self._narrator = Narrator(task)
        self._expert = Expert(task) if policy == "expert" else None
        self._baseline: Actor | None = None
        if policy in BASELINES:
            self._baseline = baseline_actor(policy, task, seed, env)
        self._noise = DartNoise(noise, noise_rng(task, seed), len(ACTION_NAMES))
        self._runner = ChunkRunner()
        self.held = 0  # steps with no chunk row to run

    @property
    def steps(self) -> int:
        return self.obs.steps

    def render(self, camera: str) -> np.ndarray:
        return self.env.render()

    def sim_acts(self, step: int, t_ns: int) -> SimActs | None:
        """The expert's clean action is shown (a target in the action space, not the
        scripted gains); the env runs it plus this tick's noise offset (zero without)."""
        if self._expert is not None:
            action = self._expert.target(self.obs)
            executed = np.clip(action + self._noise.offset(), -1.0, 1.0)
            return SimActs(Chunk(t_ns, executed[None, :]), shown=Chunk(t_ns, action[None, :]))
        if self._baseline is not None:
            return SimActs(Chunk(t_ns, self._baseline(self.obs)[None, :]))
        return None

    def accept(self, command: Chunk, now_ns: int) -> Refused | None:
        self._runner.add(command)
        return None

    def lines(self) -> Lines:
        line = self._narrator.update(self.obs)
        return Lines(line.narration, line.memory)

    def over(self) -> bool:
        return self.obs.success or self.obs.steps >= self.env.max_path_length

    def step(self, t_ns: int) -> None:
        row = self._runner.row_at(t_ns)
        self.held += row is None
        self.obs = self.env.step(self.env.hold() if row is None else row, render=False)

    def outcome(self, tally: Tally) -> dict[str, Any]:
        """The JSON object published on /metaworld/episode."""
        counts = self.env.counts
        return {
            "index": tally.index,
            "episodes": tally.episodes,
            "task": self.task,
            "seed": self.seed,
            "instruction": self.instruction,
            "policy": tally.policy,
            "success": self.obs.success,
            "steps": self.obs.steps,
            "max_path_length": self.env.max_path_length,
            "start_ns": tally.start_ns,
            "end_ns": tally.end_ns,
            "duration_s": (tally.end_ns - tally.start_ns) / NS_PER_S,
            "wall_s": tally.wall_s,
            "reset_wall_s": self.reset_wall_s,
            "chunks_accepted": tally.accepted,
            "chunks_rejected": tally.rejected,
            "held_steps": self.held,
            "actions_clipped": counts.clipped,
            "actions_malformed": counts.malformed,
            "renders": tally.renders,
            "render_wall_s": tally.render_wall_s,
            "lockstep_timeouts": tally.lockstep_timeouts,
            "narration": list(tally.narration),
            "memory": list(tally.memory),
        }
