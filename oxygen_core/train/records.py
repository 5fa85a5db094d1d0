"""Training records: what the robot saw and what the expert did, one per control step.

A `Record` is the unit every data source yields: the observation as the node receives
it (camera images by model slot at the camera's resolution, the joint state, the
instruction), the action chunk target (the next H joint positions the expert commanded,
absolute, the first one being this step's command), and the language targets (the
expert's narration line now, and the latest memory line it has written, empty before the
first sub-goal), and the grounding rows of `locate` where the source knows the scene (the
sim does, a bag does not). A source is any iterable of records (`dataset.collect` takes
one): the expert's episodes and still scenes here, and in `dagger` the expert taking over
from where the policy drove the arm; recorded robot episodes would be one more source,
without grounding rows.

`expert_episode` is the sim source. It runs the scripted expert and, for DART-style data,
perturbs the *executed* command with short random bursts while the recorded targets stay
the expert's clean commands. A policy trained only on the expert's own path has never seen
the states its own small errors lead to; the bursts put the arm there and label the way
back. Episodes the expert fails under noise are dropped (they would teach failure).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from oxygen_core.config import IMAGE_SLOTS
from oxygen_core.observation import Observation
from oxygen_core.sim import arm
from oxygen_core.sim.expert import Expert
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ
from oxygen_core.sim.tasks import FAMILIES, Task, make_task
from oxygen_core.sim.world import World
from oxygen_core.train import locate

# The sim's cameras in model slot order (the node's camera_topics order).
CAMERA_SLOTS = {"base": IMAGE_SLOTS[0], "wrist": IMAGE_SLOTS[1]}


@dataclasses.dataclass(frozen=True)
class Record:
    """One control step of one episode."""

    episode: str  # "<family>/<seed>": records of one episode share it (splits keep it whole)
    obs: Observation
    actions: np.ndarray  # float32 [H, 7]: the commands of this step and the next H - 1
    narration: str
    memory: str
    grounding: tuple[tuple[str, str], ...] = ()  # (prompt, answer) rows of `locate`


@dataclasses.dataclass(frozen=True)
class Dart:
    """Bursts of noise on the executed command's first `columns` values: the arm's, not
    the gripper's (a dropped object is a failed episode, not a recovery lesson).

    rate: chance per step that a burst starts; steps: (min, max) burst length; sigma: std
    of the burst's constant offset, in the command's units (rad for the sim arm's joints).
    """

    rate: float = 0.04
    steps: tuple[int, int] = (3, 8)
    sigma: float = 0.06
    columns: int = arm.ARM_DOF


# Meta-World's expert in its recordings: dx, dy, dz in action units, not the gripper.
METAWORLD_DART = Dart(rate=0.04, steps=(4, 12), sigma=0.5, columns=3)
# ALOHA's expert in its recordings: the twelve arm joints' targets in rad (the caller puts
# the 12 values in the arms' columns), bursts of 0.16-0.4 s at 50 Hz, about one a second.
# Sigma 0.02 rad, the size of a small policy's row error: on training seeds 0-9 of both
# tasks the expert then succeeds 16 of 20 times (clean and 0.01: 19, 0.03: 14).
ALOHA_DART = Dart(rate=0.02, steps=(8, 20), sigma=0.02, columns=12)


class DartNoise:
    """One episode's bursts, drawn from its own generator: `offset()` once per executed
    step is what is added to the command then (zeros between bursts, and always without
    a `dart`), so the same generator gives the same bursts in any world."""

    def __init__(self, dart: Dart | None, rng: np.random.Generator, width: int) -> None:
        self._dart, self._rng = dart, rng
        self._offset, self._left = np.zeros(width), 0

    def offset(self) -> np.ndarray:
        """This step's offset [width]."""
        dart = self._dart
        if dart is None:
            return self._offset
        if self._left > 0:
            self._left -= 1
        elif self._rng.random() >= dart.rate:
            self._offset = np.zeros_like(self._offset)
        else:
            self._offset = np.zeros_like(self._offset)
            self._offset[: dart.columns] = self._rng.normal(0.0, dart.sigma, dart.columns)
            self._left = int(self._rng.integers(dart.steps[0], dart.steps[1] + 1)) - 1
        return self._offset


def expert_episode(
    family: str,
    seed: int,
    horizon: int,
    camera_size: int = 128,
    control_hz: float = DEFAULT_CONTROL_HZ,
    dart: Dart | None = None,
    world: World | None = None,
    name: str | None = None,
) -> list[Record]:
    """The records of one expert episode, or [] when the expert did not succeed.

    world: where the expert starts, instead of the task's initial scene (a world another
    controller left: `oxygen_core.train.dagger`); an arm the expert cannot plan from
    (out of top-down reach) is a failed episode. name: the records' episode name."""
    task = make_task(family, seed)
    world = task.new_world() if world is None else world
    try:
        return _expert_run(task, world, horizon, camera_size, control_hz, dart, name)
    except arm.Unreachable:
        return []


def _expert_run(
    task: Task,
    world: World,
    horizon: int,
    camera_size: int,
    control_hz: float,
    dart: Dart | None,
    name: str | None,
) -> list[Record]:
    seed = task.seed
    expert = Expert(task, world)
    renderer = Renderer(camera_size, camera_size)
    noise = DartNoise(dart, np.random.default_rng([seed, 7]), arm.NUM_JOINTS)
    ask = np.random.default_rng([seed, 11])  # its own stream: DART's draws stay as they were
    dt = 1.0 / control_hz
    seen: list[tuple[Observation, str, str, tuple]] = []
    commands: list[np.ndarray] = []
    memory = ""
    for _ in range(int(round(task.time_limit * control_hz))):
        images = {slot: renderer.render(world, cam) for cam, slot in CAMERA_SLOTS.items()}
        obs = Observation(images, world.joints.astype(np.float32), task.instruction)
        step = expert.act(world, dt)
        memory = step.memory or memory
        seen.append((obs, step.narration, memory, locate.rows(task, world, ask)))
        commands.append(step.targets)
        verdict = task.verdict(world)
        if verdict is not None:
            break
        world.step(step.targets + noise.offset(), dt)
    else:
        return []
    if not verdict:
        return []
    episode = name or f"{task.family}/{seed}"
    return _records(episode, seen, np.asarray(commands, np.float32), horizon)


def _records(
    episode: str,
    seen: list[tuple[Observation, str, str, tuple]],
    commands: np.ndarray,
    horizon: int,
) -> list[Record]:
    """Chunk targets: commands t .. t+H-1, the last command repeated past the end (the
    robot holds there)."""
    last = len(commands) - 1
    return [
        Record(episode, obs, commands[np.minimum(np.arange(t, t + horizon), last)], *texts)
        for t, (obs, *texts) in enumerate(seen)
    ]


def scene_records(
    family: str, seed: int, horizon: int, camera_size: int, poses: int = 2
) -> list[Record]:
    """Still scenes for the grounding stage: the seeded task's objects where they start,
    the arm at `poses` random top-down poses above the workspace (as it is while it
    reaches), both cameras, and the grounding rows; no expert, so no actions (zeros) and
    no language targets. Rendering a scene costs milliseconds, so the stage can see many
    more scenes than the expert has episodes."""
    task = make_task(family, seed)
    rng = np.random.default_rng([seed, FAMILIES.index(family), 13])
    renderer = Renderer(camera_size, camera_size)
    records = []
    while len(records) < poses:
        point = np.array(
            [rng.uniform(0.25, 0.55), rng.uniform(-0.25, 0.25), rng.uniform(0.08, 0.3)]
        )
        try:
            joints = arm.inverse_top_down(point, yaw=rng.uniform(0, np.pi), gripper=1.0)
        except arm.Unreachable:
            continue
        world = World(list(task.objects), joints)
        images = {slot: renderer.render(world, cam) for cam, slot in CAMERA_SLOTS.items()}
        obs = Observation(images, world.joints.astype(np.float32), task.instruction)
        still = np.zeros((horizon, arm.NUM_JOINTS), np.float32)
        grounding = locate.rows(task, world, rng)
        records.append(Record(f"scene/{family}/{seed}", obs, still, "", "", grounding))
    return records
