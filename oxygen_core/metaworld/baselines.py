"""Meta-World's image-free baselines: what a policy would score without seeing the scene.

A trained policy's success only means something next to what needs no camera at all.
Each baseline maps the observation to the benchmark's 4-number action, and the sim runs
it through the same chunk path as the node's chunks (`oxygen-sim --world metaworld -p policy:=`):

- `hold`: no delta, the gripper effort as it was (`MetaWorldEnv.hold`): doing nothing.
- `random`: a uniform action in [-1, 1]^4, redrawn every second (80 steps) from a stream
  of the task and seed, so the arm wanders instead of jittering in place.
- `blind`: the task's scripted policy with the scene replaced by its average. It reads the
  hand (position, finger opening) as the policy's state does, but for the object and the
  goal it reads their mean placement over the 50 tasks Meta-World samples for the
  task at `REFERENCE_SEED` (a training seed), never this episode's. That is the best an
  arm that knows the task and the workspace but has no camera can do with the experts'
  skill: what a policy scores above it, it gets from the image.

Meta-World's 39-number observation (v3) is the current frame [hand xyz, finger opening,
object fields (14: two objects' position and quaternion)], the previous frame's 18, and
the goal's xyz; `SCENE` are the object and goal slices the blind expert overwrites.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import metaworld
import numpy as np

from oxygen_core.metaworld.env import ACTION_NAMES, Expert, MetaWorldEnv, Observation

BASELINES = ("hold", "random", "blind")
RANDOM_HOLD_STEPS = 80  # a random action lasts 1 s at the env's 80 Hz
REFERENCE_SEED = 0  # the blind expert's scene average: a training seed's sampled tasks
SCENE = (slice(4, 18), slice(22, 36), slice(36, 39))  # objects now and before, goal

Actor = Callable[[Observation], np.ndarray]


class RandomActor:
    """A uniform action in [-1, 1]^4, redrawn every RANDOM_HOLD_STEPS steps."""

    def __init__(self, task: str, seed: int) -> None:
        key = zlib.crc32(f"random/{task}/{seed}".encode())
        self._rng = np.random.default_rng(key)
        self._action = np.zeros(len(ACTION_NAMES))

    def __call__(self, obs: Observation) -> np.ndarray:
        if obs.steps % RANDOM_HOLD_STEPS == 0:
            self._action = self._rng.uniform(-1.0, 1.0, len(ACTION_NAMES))
        return self._action


class BlindExpert:
    """The scripted policy reading the hand and the task's average scene (module doc)."""

    def __init__(self, task: str) -> None:
        self._expert = Expert(task)
        self._scene = average_scene(task)

    def __call__(self, obs: Observation) -> np.ndarray:
        return self._expert.target(blind_observation(obs, self._scene))


def blind_observation(obs: Observation, scene: np.ndarray) -> Observation:
    """`obs` with its object and goal fields (SCENE) taken from the 39-number `scene`."""
    raw = np.array(obs.raw)
    for part in SCENE:
        raw[part] = scene[part]
    return Observation(
        image=None, state=obs.state, joints=obs.joints, tcp=obs.tcp,
        success=obs.success, steps=obs.steps, raw=raw,
    )  # fmt: skip


@functools.cache
def average_scene(task: str) -> np.ndarray:
    """The mean first observation over the tasks MT1 samples at REFERENCE_SEED (a
    throwaway env of its own: the episode's env is not reset by it)."""
    env = metaworld.env_dict.ALL_V3_ENVIRONMENTS[task]()
    try:
        firsts = []
        for sampled in metaworld.MT1(task, seed=REFERENCE_SEED).train_tasks:
            env.set_task(sampled)
            firsts.append(env.reset()[0])
        return np.mean(firsts, axis=0)
    finally:
        env.close()


def baseline_actor(name: str, task: str, seed: int, env: MetaWorldEnv) -> Actor:
    """The baseline `name` (BASELINES) for one episode of `task` at `seed` in `env`."""
    if name == "hold":
        return lambda obs: env.hold()
    if name == "random":
        return RandomActor(task, seed)
    if name == "blind":
        return BlindExpert(task)
    raise ValueError(f"unknown baseline {name!r}; choose from {BASELINES}")
