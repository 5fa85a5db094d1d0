"""One Meta-World MT10 task as the robot the policy drives: seeded reset, checked actions,
the corner2 camera and the observation the policy reads, without ROS or gymnasium wrappers.

Seeds: `reset(seed)` builds Meta-World's own task sampling for the task, `MT1(task,
seed=seed)`, and sets its first task (the goal and object placement it sampled), so a seed
gives the same episode on every machine. MT1 is used rather than `MT10(seed)` because it
samples the one task needed (about 1 s) instead of all ten (about 7 s); its observations
include the goal, as the MT benchmarks' do, which the scripted policies read.

Actions are the Sawyer's 4 numbers [dx, dy, dz, gripper] in [-1, 1] (end-effector delta,
1 cm per unit per step; gripper effort, -1 open, +1 closed). Finite values outside [-1, 1]
are clipped, as Meta-World itself clips them, and counted (`ActionCounts.clipped`): the
scripted policies send gains far above 1 on purpose. An action of the wrong shape or with
NaN or inf is malformed: it is counted and the arm holds instead (zero delta, the last
gripper effort), so it never reaches MuJoCo.

The observation matches LeRobot's Meta-World env (lerobot/envs/metaworld.py, obs_type
pixels_agent_pos): the image is the corner2 camera with the camera moved to LeRobot's
position (0.75, 0.075, 0.7) and flipped in both axes (MuJoCo renders it upside down), and
the state `agent_pos` is Meta-World's observation[:4], the hand body's position (MuJoCo's
data.body("hand").xpos) and the fingers' opening, |right claw - left claw| / 0.1 clipped
to [0, 1]. Rendering turns shadows and multisampling off (about 40 ms instead of 210 ms
at 128 px on this CPU).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# Before metaworld, which imports mujoco: it sets MUJOCO_GL=egl for headless rendering.
from oxygen_core.mujoco_view import offscreen_renderer  # isort: skip

import metaworld  # noqa: E402
import metaworld.policies  # noqa: E402

from oxygen_core.metaworld.tasks import MT10_TASKS  # noqa: E402

ACTION_NAMES = ("dx", "dy", "dz", "gripper")
STATE_NAMES = ("ee_x", "ee_y", "ee_z", "gripper")
ARM_JOINTS = tuple(f"right_j{i}" for i in range(7))
FINGER_JOINTS = ("r_close", "l_close")
SAWYER_JOINTS = ARM_JOINTS + FINGER_JOINTS
CAMERA = "corner2"
CAMERA_POSITION = (0.75, 0.075, 0.7)  # LeRobot's corner2 position
OPEN = -1.0  # the gripper effort reset leaves (Meta-World's reset opens the hand)


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the policy (and the scripted expert) reads after a reset or a step."""

    image: np.ndarray | None  # corner2, uint8 H x W x 3, upright; None when not rendered
    state: np.ndarray  # STATE_NAMES: hand position (m) and gripper opening (0..1)
    joints: np.ndarray  # SAWYER_JOINTS positions from MuJoCo's qpos (rad; fingers in m)
    tcp: np.ndarray  # Meta-World's tcp_center, between the fingertips (its rewards use it)
    success: bool  # the benchmark's own info["success"] after the last step
    steps: int  # steps since the reset
    raw: np.ndarray  # Meta-World's 39-number observation: the scripted policy's input


@dataclasses.dataclass
class ActionCounts:
    """Actions stepped since the reset, and those clipped or held as malformed."""

    steps: int = 0
    clipped: int = 0
    malformed: int = 0


class MetaWorldEnv:
    """One MT10 task's MuJoCo env with its corner2 renderer; `reset(seed)` starts an episode."""

    def __init__(self, task: str, camera_size: int = 224) -> None:
        if task not in MT10_TASKS:
            raise ValueError(f"unknown task {task!r}; choose from {MT10_TASKS}")
        self.task = task
        self._env: Any = metaworld.env_dict.ALL_V3_ENVIRONMENTS[task]()
        model = self._env.model
        model.cam_pos[model.camera(CAMERA).id] = CAMERA_POSITION
        self._renderer = offscreen_renderer(model, camera_size, camera_size)
        self._qpos = np.array([model.joint(name).qposadr[0] for name in SAWYER_JOINTS])
        self.counts = ActionCounts()
        self._raw: np.ndarray | None = None
        self._success = False
        self._gripper = OPEN

    @property
    def max_path_length(self) -> int:
        """The benchmark's step limit per episode."""
        return int(self._env.max_path_length)

    @property
    def control_period_s(self) -> float:
        """Sim seconds per step (MuJoCo's timestep x frame skip: 12.5 ms, 80 Hz)."""
        return float(self._env.dt)

    @property
    def data(self) -> Any:
        """MuJoCo's MjData, for tests and diagnostics."""
        return self._env.data

    def reset(self, seed: int, render: bool = True) -> Observation:
        """Start the episode of `seed` (Meta-World's MT1 task sampling, its first task)."""
        self._env.set_task(metaworld.MT1(self.task, seed=seed).train_tasks[0])
        self._raw, _ = self._env.reset()
        self._success, self._gripper = False, OPEN
        self.counts = ActionCounts()
        return self.observe(render)

    def step(self, action: Any, render: bool = True) -> Observation:
        """One control step of `action` (clipped; held when malformed)."""
        if self._raw is None:
            raise RuntimeError("reset the env before stepping it")
        if self._env.curr_path_length >= self.max_path_length:
            raise RuntimeError(f"the step limit {self.max_path_length} is reached: reset")
        command = self._checked(action)
        self._gripper = float(command[3])
        self._raw, _, _, _, info = self._env.step(command.astype(np.float32))
        self._success = bool(info["success"])
        self.counts.steps += 1
        return self.observe(render)

    def hold(self) -> np.ndarray:
        """The action that keeps the arm where it is: no delta, the last gripper effort."""
        return np.array([0.0, 0.0, 0.0, self._gripper])

    def observe(self, render: bool = True) -> Observation:
        """The current observation (the image only when `render`)."""
        if self._raw is None:
            raise RuntimeError("reset the env before observing it")
        return Observation(
            image=self.render() if render else None,
            state=np.array(self._raw[:4]),
            joints=np.array(self._env.data.qpos[self._qpos]),
            tcp=np.array(self._env.tcp_center),
            success=self._success,
            steps=int(self._env.curr_path_length),
            raw=np.array(self._raw),
        )

    def render(self) -> np.ndarray:
        """The corner2 camera, uint8 H x W x 3, upright."""
        self._renderer.update_scene(self._env.data, camera=CAMERA)
        return np.ascontiguousarray(self._renderer.render()[::-1, ::-1])

    def close(self) -> None:
        """Free the renderer's GL context now (not in a destructor at interpreter exit)."""
        self._renderer.close()
        self._env.close()

    def _checked(self, action: Any) -> np.ndarray:
        """`action` clipped to [-1, 1], or the hold action when it is malformed."""
        try:
            values = np.asarray(action, dtype=np.float64)
        except (TypeError, ValueError):
            values = np.full(1, np.nan)
        if values.shape != (len(ACTION_NAMES),) or not np.isfinite(values).all():
            self.counts.malformed += 1
            return self.hold()
        clipped = np.clip(values, -1.0, 1.0)
        self.counts.clipped += int((clipped != values).any())
        return clipped


class Expert:
    """The task's scripted policy (metaworld.policies): an action from the raw observation."""

    def __init__(self, task: str) -> None:
        self._policy = metaworld.policies.ENV_POLICY_MAP[task]()

    def act(self, obs: Observation) -> np.ndarray:
        """The scripted action for `obs`, float32 as the policy gives it (not clipped)."""
        return np.asarray(self._policy.get_action(obs.raw), dtype=np.float32)

    def target(self, obs: Observation) -> np.ndarray:
        """The scripted action clipped to [-1, 1]: what a chunk carries. The env clips it
        anyway, but the gains reach 11 on purpose and would otherwise set norm stats."""
        return np.clip(self.act(obs), -1.0, 1.0)
