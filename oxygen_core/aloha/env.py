"""One gym-aloha task as the robot a policy drives: the bimanual ViperX scene stepped with
14 absolute joint targets at 50 Hz, seeded object poses, the benchmark's own reward and
step limit, and the scene's cameras rendered headless on request.

The env drives gym-aloha's dm_control physics directly instead of its gymnasium wrapper:
the wrapper renders three 640 x 480 cameras on every step (gym_aloha/tasks/sim.py,
`get_observation`) and seeds through the module global `BOX_POSE`. Here one step is
gym-aloha's own control path, `task.before_step` (grippers unnormalised to finger
positions) then 10 physics substeps of MuJoCo's default 2 ms timestep (gym_aloha/constants.py
DT = 0.02 s), and the reward is the task's own `get_reward` (contacts between the fingers,
the objects and the table; 4, the task's `max_reward`, is success, and gym-aloha's wrapper
ends the episode there).

Seeds: `reset(seed)` places the objects with gym-aloha's own samplers (gym_aloha/utils.py
`sample_box_pose`, `sample_insertion_pose`), which draw from `np.random.RandomState(seed)`:
the same seed gives the same poses as `AlohaTransferCube-v0` / `AlohaInsertion-v0`'s
`reset(seed=seed)`, on every run, without touching numpy's global RNG.

Joint states and targets are 14 numbers, JOINTS (gym_aloha/constants.py): each arm's waist,
shoulder, elbow, forearm_roll, wrist_angle, wrist_rotate in rad, then its gripper as
gym-aloha's normalised finger opening, (left finger slide position in m - 0.01844) /
(0.05800 - 0.01844) (PUPPET_GRIPPER_POSITION_CLOSE / _OPEN): 0 closed, 1 open. The finger
actuators' ctrlrange (0.021-0.057 m) bounds what a gripper target can reach to about
0.065-0.975. Targets are not clipped to the wrapper's declared action space Box(-1, 1),
which is wrong for joint targets (the elbow starts at 1.16 rad); MuJoCo clamps each
actuator to its ctrlrange.

The top camera is narrowed to the workspace (TOP_FOVY): the scene's 78 degrees show the
whole table and room around it, where the 4 cm cube is 2 px wide in the 64 x 48 image a
CPU policy takes and every seed's cube lies within one 8 px patch. At 40 degrees, the
same view centred on the table (the image a crop of the 78 degree one would give), the
cube is 4 px wide, the seeds' cube positions span about two patches each way, and every
seed's objects and the arms' approach stay in view.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from dm_control.mujoco import Physics
from gym_aloha.constants import (
    ASSETS_DIR,
    DT,
    JOINTS,
    PUPPET_GRIPPER_JOINT_CLOSE,
    PUPPET_GRIPPER_JOINT_OPEN,
    START_ARM_POSE,
)
from gym_aloha.tasks.sim import InsertionTask, TransferCubeTask
from gym_aloha.utils import sample_box_pose, sample_insertion_pose

from oxygen_core.mujoco_view import offscreen_renderer

TASKS = ("transfer_cube", "insertion")
JOINT_NAMES = tuple(JOINTS)
GRIPPERS = (6, 13)  # the grippers' places in JOINT_NAMES; the rest are arm joints (rad)
ARM_COLUMNS = [i for i in range(len(JOINT_NAMES)) if i not in GRIPPERS]
GRIPPER_SPAN = PUPPET_GRIPPER_JOINT_OPEN - PUPPET_GRIPPER_JOINT_CLOSE  # rad per unit opening
# The cameras scene.xml, vx300s_left.xml and vx300s_right.xml define (gym-aloha's
# observations use "top"; ACT's sim datasets use "top" and "angle").
CAMERAS = (
    "top",
    "angle",
    "front_close",
    "left_pillar",
    "right_pillar",
    "left_wrist",
    "right_wrist",
)
EPISODE_STEPS = 300  # max_episode_steps of both tasks in gym_aloha/__init__.py
SUCCESS_REWARD = 4  # TransferCubeTask / InsertionTask max_reward
TOP_FOVY = 40.0  # degrees, the top camera's vertical field of view (the scene's: 78)
ARM_QPOS = 16  # qpos[:16]: each arm's 6 joints and its two finger slides (START_ARM_POSE)

_XML = {"transfer_cube": "transfer_cube.xml", "insertion": "insertion.xml"}
_TASK = {"transfer_cube": TransferCubeTask, "insertion": InsertionTask}


def check_task(task: str) -> None:
    """Raise a one-line ValueError for a task this package does not know."""
    if task not in TASKS:
        raise ValueError(f"unknown ALOHA task {task!r}; choose from {TASKS}")


def scene_path(task: str, mocap: bool = False) -> Path:
    """gym-aloha's scene XML for `task`: joint-space, or the end-effector (mocap) variant."""
    check_task(task)
    prefix = "bimanual_viperx_end_effector_" if mocap else "bimanual_viperx_"
    return ASSETS_DIR / (prefix + _XML[task])


def object_poses(task: str, seed: int) -> np.ndarray:
    """The objects' free-joint qpos (x, y, z, qw, qx, qy, qz per object; the peg, then the
    socket for insertion) gym-aloha places at reset for `seed`."""
    check_task(task)
    if task == "transfer_cube":
        return sample_box_pose(seed)
    return np.concatenate(sample_insertion_pose(seed))


def substeps(physics: Physics) -> int:
    """Physics steps per control step: gym-aloha's DT (0.02 s) over the scene's timestep
    (MuJoCo's default 2 ms: 10)."""
    return round(DT / physics.timestep())


def joint_state(physics: Physics) -> np.ndarray:
    """The 14 JOINT_NAMES values of `physics` (the task's `get_qpos`: rad, grippers
    normalised)."""
    return TransferCubeTask.get_qpos(physics)


def target_ranges(physics: Physics) -> np.ndarray:
    """[14, 2] low and high of JOINT_NAMES targets: each arm joint's range in the scene
    (vx300s_*.xml, rad; its position actuator's ctrlrange is the same, so MuJoCo clamps a
    target to it), each gripper's normalised opening 0..1."""
    rows = []
    for index, name in enumerate(JOINT_NAMES):
        if index in GRIPPERS:
            rows.append((0.0, 1.0))
            continue
        side, joint = name.split("_arm_")
        rows.append(physics.model.ptr.joint(f"vx300s_{side}/{joint}").range)
    return np.array(rows, np.float64)


@dataclasses.dataclass(frozen=True)
class Step:
    """What a reset or a step leaves."""

    joints: np.ndarray  # JOINT_NAMES: arm joints in rad, grippers normalised (0 closed)
    reward: int  # the task's get_reward after the step (0 at reset)
    success: bool  # the reward has reached SUCCESS_REWARD at some step of the episode
    steps: int  # steps since the reset


class AlohaEnv:
    """One task's joint-space scene; `reset(seed)` starts an episode of at most
    `max_steps` steps."""

    def __init__(self, task: str, max_steps: int = EPISODE_STEPS) -> None:
        check_task(task)
        self.task = task
        self.max_steps = max_steps
        self.physics = Physics.from_xml_path(str(scene_path(task)))
        model = self.physics.model.ptr
        model.cam_fovy[model.camera("top").id] = TOP_FOVY
        self._task = _TASK[task]()
        self._substeps = substeps(self.physics)
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self.steps = -1  # no episode yet
        self.success_step: int | None = None  # the first step whose reward was success

    def reset(self, seed: int) -> Step:
        """Start the episode of `seed`: both arms at START_ARM_POSE (held there by their
        position actuators) and the objects where gym-aloha places them for the seed."""
        return self.place(object_poses(self.task, seed))

    def place(self, objects: np.ndarray) -> Step:
        """Start an episode as `reset` does, with the objects at `objects` (free-joint qpos,
        as `object_poses` gives them): a scene a seed draws, or one none does (the blind
        baseline's, oxygen_core.aloha.episode)."""
        physics = self.physics
        with physics.reset_context():
            physics.data.qpos[:ARM_QPOS] = START_ARM_POSE
            physics.data.ctrl[:] = START_ARM_POSE
            physics.data.qpos[ARM_QPOS:] = objects
        self.steps, self.success_step = 0, None
        return Step(self.joints(), 0, False, 0)

    def step(self, targets: Any) -> Step:
        """One 20 ms control step towards the 14 absolute joint `targets` (JOINT_NAMES)."""
        if self.steps < 0:
            raise RuntimeError("reset the env before stepping it")
        if self.steps >= self.max_steps:
            raise RuntimeError(f"the episode limit of {self.max_steps} steps is reached: reset")
        self._task.before_step(checked_targets(targets), self.physics)
        self.physics.step(self._substeps)
        self.steps += 1
        reward = int(self._task.get_reward(self.physics))
        if reward == SUCCESS_REWARD and self.success_step is None:
            self.success_step = self.steps
        return Step(self.joints(), reward, self.success_step is not None, self.steps)

    def joints(self) -> np.ndarray:
        """The 14 joint states (JOINT_NAMES)."""
        return joint_state(self.physics)

    def objects(self) -> np.ndarray:
        """The objects' current free-joint qpos (as `object_poses`)."""
        return self.physics.data.qpos[ARM_QPOS:].copy()

    def render(self, camera: str = "top", size: int | tuple[int, int] = 224) -> np.ndarray:
        """`camera` (one of CAMERAS) as uint8 height x width x 3; `size` is the side of a
        square image or (height, width)."""
        if camera not in CAMERAS:
            raise ValueError(f"unknown camera {camera!r}; choose from {CAMERAS}")
        renderer = self._renderer(*((size, size) if isinstance(size, int) else size))
        renderer.update_scene(self.physics.data.ptr, camera=camera)
        return renderer.render()

    def close(self) -> None:
        """Free the renderers' GL contexts now (not in a destructor at interpreter exit)."""
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()

    def _renderer(self, height: int, width: int) -> mujoco.Renderer:
        """The renderer of this size, made once."""
        if (height, width) not in self._renderers:
            renderer = offscreen_renderer(self.physics.model.ptr, height, width)
            self._renderers[height, width] = renderer
        return self._renderers[height, width]


def checked_targets(targets: Any) -> np.ndarray:
    """`targets` as 14 finite float64 values, or a one-line ValueError (nothing malformed
    reaches MuJoCo)."""
    try:
        values = np.asarray(targets, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"joint targets are not numbers: {error}") from None
    if values.shape != (len(JOINT_NAMES),):
        raise ValueError(f"joint targets have shape {values.shape}; expected (14,)")
    if not np.isfinite(values).all():
        raise ValueError("joint targets hold NaN or inf")
    return values
