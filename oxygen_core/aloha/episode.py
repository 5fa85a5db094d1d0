"""ALOHA as a world the sim runs (oxygen_core.worlds): episodes of a gym-aloha task at a
seed, both arms and both grippers driven through their four trajectory controllers, one
env step per 20 ms tick (50 Hz, gym_aloha/constants.py DT).

The robot is the one config/aloha.yaml drives: a joint_trajectory_controller per arm and
per gripper (config/ros2_control/aloha_controllers.yaml), each here a `TrajectoryExecutor`
under "jtc" updated once a tick (`JtcParams(0.02)`; the real ones update at 500 Hz) and
starting a trajectory from its last command (`interpolate_from_desired_state`,
`FROM_DESIRED`). A command is a `Trajectory` that names one controller's joints, which that
controller takes as it would the message on its topic, or every joint, split over the four
with one stamp and one set of times as the node splits a chunk
(oxygen_core.controller.split): the sim-run policies send theirs so, since the sim's loop
carries one message per command. Any other joint set is refused (`Refused` "joint_names")
and changes nothing. Each tick, every controller's command for its joints
makes up the 14 targets of one `AlohaEnv.step`.

Units are those of a real ALOHA as the node's aloha robot preset and config/aloha.yaml take
them (oxygen_core/robot_io.py; openpi's examples/aloha_real), so the node drives the sim as
it drives the robot:

- the state (`STATE_NAMES`, the params' joint_names): each arm's six joints in rad and its
  left finger's slide in m, as the Interbotix driver reports them; the preset's
  gripper_state_range (0.01844-0.05800 m, gym-aloha's PUPPET_GRIPPER_POSITION_CLOSE/_OPEN)
  turns the finger into gym-aloha's 0..1 opening. Velocities in rad/s and m/s. The sim's
  finger is that slide joint itself.
- the commands (`ACTION_NAMES`, the params' action_names, the controllers' joints): the
  arm joints and each gripper joint's angle, in rad, the angle being the runtime's 0..1
  spread over gym-aloha's PUPPET_GRIPPER_JOINT_CLOSE/_OPEN (-0.6213-1.4910 rad), the
  preset's gripper_command_range. The scene has no gripper joint: its fingers take
  gym-aloha's normalised opening, so a gripper command reaches the env as
  `normalize_puppet_gripper_joint(angle)`, the 0..1 that ACT's real robot turns into that
  angle and its sim into a finger position (the same 0..1 in both datasets). The gripper
  controllers measure the inverse of that map of the fingers' opening.
- what the sim publishes on /joint_states (`PUBLISHED_NAMES`): what the two arms' drivers
  publish, relayed into one topic with the arm's prefix (config/aloha.yaml): the state's
  joints and each gripper joint's measured angle, which the node needs of every joint it
  commands (its chunk gate and the trajectory's start).

The sim-run policies (`SIM_POLICIES`): `expert` sends the scripted expert's targets
recorded for the seed (oxygen_core.aloha.expert), one row a tick as a one-point trajectory
due at its stamp, as the tabletop's expert goes through its executor, shown on the expert
topic; `blind` sends the same for a scene no seed draws, every object at the centre of
gym-aloha's sampling ranges, whatever this seed's objects are (what knowing the task but
not seeing it scores); `hold` sends the start pose and `random` a random pose, each every
second as a one-point trajectory due a second after its stamp. Episodes end at the task's
success (reward 4) or at `expert.EXPERT_STEPS` steps.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import zlib
from collections.abc import Callable

import numpy as np
from dm_control.mujoco import Physics
from gym_aloha.constants import (
    DT,
    PUPPET_GRIPPER_JOINT_CLOSE,
    PUPPET_GRIPPER_JOINT_OPEN,
    normalize_puppet_gripper_joint,
    unnormalize_puppet_gripper_joint,
)
from gym_aloha.tasks.sim import TransferCubeTask

from oxygen_core.aloha.env import (
    ARM_COLUMNS,
    GRIPPER_SPAN,
    GRIPPERS,
    TASKS,
    AlohaEnv,
    check_task,
    joint_state,
    target_ranges,
)
from oxygen_core.aloha.expert import (
    ARM_JOINT_NAMES,
    EXPERT_STEPS,
    SIDES,
    expert_joint_targets,
    record_scene,
)
from oxygen_core.clock import NS_PER_S
from oxygen_core.controller.jtc import JtcParams
from oxygen_core.controller.shaping import Shaped
from oxygen_core.controller.split import ControllerJoints, split
from oxygen_core.sim.executor import Trajectory, TrajectoryExecutor
from oxygen_core.train.records import Dart, DartNoise
from oxygen_core.worlds import EXTERNAL, Lines, Refused, SimActs, Tally

PERIOD_NS = round(DT * NS_PER_S)  # 20 ms: one env step, one controller update
# The controllers' interpolate_from_desired_state (config/ros2_control/aloha_controllers.yaml,
# and the node's parameter of that name in config/aloha.yaml): a gripper squeezing the cube
# lags its command by up to its range, and from the measured state every trajectory would
# start by letting go.
FROM_DESIRED = True
CAMERAS = ("top", "left_wrist", "right_wrist")  # the aloha preset's image slots, in order
SIM_POLICIES = ("expert", "hold", "random", "blind")
STATE_NAMES = tuple(f"{s}_{j}" for s in SIDES for j in (*ARM_JOINT_NAMES, "left_finger"))
ACTION_NAMES = tuple(f"{s}_{j}" for s in SIDES for j in (*ARM_JOINT_NAMES, "gripper"))
PUBLISHED_NAMES = (*STATE_NAMES, *(f"{s}_gripper" for s in SIDES))
# config/aloha.yaml's controller_names and controllers.<name>.{topic,joints}, in its order.
CONTROLLERS = tuple(
    ControllerJoints(f"{side}_{part}", f"/{side}_{part}_controller/joint_trajectory", joints)
    for side in SIDES
    for part, joints in (
        ("arm", tuple(f"{side}_{j}" for j in ARM_JOINT_NAMES)),
        ("gripper", (f"{side}_gripper",)),
    )
)
PARTS = split(ACTION_NAMES, CONTROLLERS)  # each controller's columns of the 14 targets
# The published state's places in the arms' qpos (each arm's joints and its left finger).
_STATE_QPOS = [*range(7), *range(8, 15)]
_GRIPPERS = list(GRIPPERS)

INSTRUCTIONS = {  # ACT's simulated tasks as its paper describes them (Zhao et al. 2023)
    "transfer_cube": "pick up the red cube with the right arm and hand it over to the left arm",
    "insertion": "pick up the socket with the left arm and the peg with the right arm, then "
    "insert the peg into the socket in mid-air",
}
# Each of the task's reward levels (gym_aloha/tasks/sim.py get_reward: finger, object and
# table contacts): the phase narrated from the first tick it is reached, and the memory
# line of that tick.
PHASES = {
    "transfer_cube": (
        ("reaching for the cube", None),
        ("grasping the cube", "the right gripper touched the cube"),
        ("carrying the cube to the left arm", "lifted the cube"),
        ("handing the cube over", "the left gripper touched the cube"),
        ("holding the cube in the left gripper", "handed the cube over"),
    ),
    "insertion": (
        ("reaching for the socket and the peg", None),
        ("grasping the socket and the peg", "both grippers touched their parts"),
        ("bringing the peg to the socket", "lifted the socket and the peg"),
        ("inserting the peg", "the peg touched the socket"),
        ("holding the peg in the socket", "inserted the peg"),
    ),
}
# The centre of gym-aloha's sampling ranges (gym_aloha/utils.py sample_box_pose,
# sample_insertion_pose: x, y, z and a level quaternion per object; peg, then socket).
CENTRE_POSES = {
    "transfer_cube": np.array([0.1, 0.5, 0.05, 1.0, 0.0, 0.0, 0.0]),
    "insertion": np.array([0.15, 0.5, 0.05, 1, 0, 0, 0, -0.15, 0.5, 0.05, 1, 0, 0, 0], float),
}
TARGET_EVERY = 50  # ticks between hold's and random's targets: one second
RANDOM_SPREAD = 0.25  # random: an arm joint within this share of its range of its start


# ------------------------------------------------------------------ units


def to_controller(targets: np.ndarray) -> np.ndarray:
    """Env targets or joints (gym-aloha's, ... x 14) in the controllers' units: each
    gripper's opening as its joint's angle (module docstring)."""
    out = np.array(targets, np.float64)
    out[..., _GRIPPERS] = unnormalize_puppet_gripper_joint(out[..., _GRIPPERS])
    return out


def to_env(targets: np.ndarray) -> np.ndarray:
    """The controllers' 14 targets as the env takes them: `to_controller` undone."""
    out = np.array(targets, np.float64)
    out[..., _GRIPPERS] = normalize_puppet_gripper_joint(out[..., _GRIPPERS])
    return out


def measured(physics: Physics) -> tuple[np.ndarray, np.ndarray]:
    """The controllers' state: positions and velocities of ACTION_NAMES (rad, rad/s)."""
    velocities = TransferCubeTask.get_qvel(physics)  # grippers: opening per second
    velocities[_GRIPPERS] *= GRIPPER_SPAN
    return to_controller(joint_state(physics)), velocities


def position_limits(physics: Physics) -> np.ndarray:
    """[14, 2] ranges of ACTION_NAMES: the arm joints' (`target_ranges`, rad) and each
    gripper's closed to open angle."""
    ranges = target_ranges(physics)
    ranges[list(GRIPPERS)] = (PUPPET_GRIPPER_JOINT_CLOSE, PUPPET_GRIPPER_JOINT_OPEN)
    return ranges


# ------------------------------------------------------------------ commands


def route(command: Trajectory) -> list[tuple[str, Trajectory]] | Refused:
    """The controllers `command` goes to and each one's trajectory (module docstring)."""
    names = tuple(command.joint_names)
    for controller in CONTROLLERS:
        if set(names) == set(controller.joints):
            return [(controller.name, command)]
    if len(set(names)) != len(names) or set(names) != set(ACTION_NAMES):
        owned = {c.name: list(c.joints) for c in CONTROLLERS}
        return Refused(
            "joint_names", f"joint names {list(names)} are not one controller's {owned} nor all"
        )
    fields = {f: getattr(command, f) for f in ("positions", "velocities", "accelerations")}
    try:
        arrays = {f: None if v is None else np.asarray(v, np.float64) for f, v in fields.items()}
    except (TypeError, ValueError):
        return Refused("points", "the points do not all have one number per joint")
    wrong = [f for f, a in arrays.items() if a is not None and a.shape[1:] != (len(names),)]
    if wrong:
        return Refused("points", f"the points' {wrong[0]} do not have {len(names)} values each")
    return [
        (p.controller.name, _columns(command, p.controller.joints, p.columns, arrays))
        for p in split(names, CONTROLLERS)
    ]


def _columns(
    command: Trajectory,
    joints: tuple[str, ...],
    columns: tuple[int, ...],
    arrays: dict[str, np.ndarray | None],
) -> Trajectory:
    """One controller's share of a trajectory of every joint."""
    cut = {f: None if a is None else a[:, list(columns)] for f, a in arrays.items()}
    return dataclasses.replace(command, joint_names=joints, **cut)


# ------------------------------------------------------------------ sim-run policies

Policy = Callable[[int, int], SimActs | None]  # (step, t_ns) -> what to send at that tick


@dataclasses.dataclass(frozen=True)
class Replay:
    """Recorded targets (controller units), row k at tick k as a one-point trajectory due
    at its stamp: the controllers run each row as it comes. `shown`: on the expert topic.
    `noise` (DART, training data): the controllers run each row plus this tick's burst on
    the arm joints, kept inside `limits`, while the expert topic shows the clean row."""

    rows: np.ndarray
    shown: bool
    noise: DartNoise | None = None
    limits: np.ndarray | None = None  # [14, 2] position ranges: the perturbed row's bounds

    def __call__(self, step: int, t_ns: int) -> SimActs:
        row = self.rows[min(step, len(self.rows) - 1)]
        shown = Shaped(t_ns, np.zeros(1), row[None, :], None)
        if self.noise is None:
            return SimActs(shown, shown=shown if self.shown else None)
        perturbed = row.copy()
        perturbed[ARM_COLUMNS] += self.noise.offset()
        perturbed = np.clip(perturbed, self.limits[:, 0], self.limits[:, 1])
        return SimActs(Shaped(t_ns, np.zeros(1), perturbed[None, :], None), shown=shown)


@dataclasses.dataclass(frozen=True)
class EverySecond:
    """Every TARGET_EVERY ticks a one-point trajectory to `draw()`, due one second after its
    stamp: the controllers move there in a straight line from where the joints are."""

    draw: Callable[[], np.ndarray]

    def __call__(self, step: int, t_ns: int) -> SimActs | None:
        if step % TARGET_EVERY:
            return None
        seconds = np.array([TARGET_EVERY * PERIOD_NS / NS_PER_S])
        return SimActs(Shaped(t_ns, seconds, self.draw()[None, :], None))


def random_draw(
    task: str, seed: int, start: np.ndarray, limits: np.ndarray
) -> Callable[[], np.ndarray]:
    """random's targets: each arm joint uniform within RANDOM_SPREAD of its range of its
    start value (clipped to the range), each gripper uniform from closed to open; a stream
    of the task and seed (as Meta-World's random baseline), whatever ran before."""
    rng = np.random.default_rng(zlib.crc32(f"random/{task}/{seed}".encode()))
    reach = RANDOM_SPREAD * (limits[:, 1] - limits[:, 0])
    low = np.maximum(limits[:, 0], start - reach)
    high = np.minimum(limits[:, 1], start + reach)
    low[_GRIPPERS], high[_GRIPPERS] = limits[_GRIPPERS].T
    return lambda: rng.uniform(low, high)


@functools.cache
def blind_targets(task: str) -> np.ndarray:
    """The expert's targets recorded for CENTRE_POSES (env units; once per task)."""
    targets = record_scene(task, CENTRE_POSES[task]).targets
    targets.flags.writeable = False
    return targets


def noise_rng(task: str, seed: int) -> np.random.Generator:
    """The DART stream of one episode: its own per task and seed, whatever ran before."""
    return np.random.default_rng([seed, TASKS.index(task)])


def sim_policy(
    policy: str,
    task: str,
    seed: int,
    start: np.ndarray,
    limits: np.ndarray,
    noise: Dart | None = None,
) -> Policy | None:
    """The sim-run `policy` for an episode starting at `start` (None: external); `noise`
    perturbs the expert's run (DART), nothing else."""
    if noise is not None and policy != "expert":
        raise ValueError(f"noise perturbs the expert's targets, not policy {policy!r}")
    if policy == EXTERNAL:
        return None
    if policy == "expert":
        rows = to_controller(expert_joint_targets(task, seed))
        if noise is None:
            return Replay(rows, shown=True)
        bursts = DartNoise(noise, noise_rng(task, seed), len(ARM_COLUMNS))
        return Replay(rows, shown=True, noise=bursts, limits=limits)
    if policy == "blind":
        return Replay(to_controller(blind_targets(task)), shown=False)
    if policy == "hold":
        return EverySecond(start.copy)
    if policy == "random":
        return EverySecond(random_draw(task, seed, start, limits))
    raise ValueError(f"policy {policy!r} is not one of {(EXTERNAL, *SIM_POLICIES)}")


# ------------------------------------------------------------------ the world


@dataclasses.dataclass(frozen=True)
class AlohaOutcome:
    """A finished ALOHA episode (published as JSON by the sim's binding)."""

    index: int
    episodes: int
    task: str
    seed: int
    instruction: str
    policy: str
    success: bool
    success_step: int | None  # the first step at reward 4 (1-based); None: none
    reward: int  # the highest reward level reached (0-4, PHASES)
    steps: int
    max_steps: int  # expert.EXPERT_STEPS: gym-aloha's 300 (transfer_cube), ACT's 400
    start_ns: int
    end_ns: int
    duration_s: float
    wall_s: float
    reset_wall_s: float  # of wall_s: the env's reset and the sim-run policy's preparation
    accepted: int
    rejected: dict[str, int]
    limits: dict[str, dict[str, int]]  # per controller: LimitViolations.as_dict()
    late_takeovers: dict[str, int]  # per controller: TrajectoryExecutor.late_takeovers
    renders: int
    render_wall_s: float
    lockstep_timeouts: int
    narration: tuple[str, ...]
    memory: tuple[str, ...]


class Aloha:
    """gym-aloha's two tasks: one env per task, built on first use and reused across its
    episodes (on the loop's thread, which owns its GL context)."""

    name = "aloha"
    period_ns = PERIOD_NS
    cameras = CAMERAS
    sim_policies = SIM_POLICIES
    episode_names = TASKS

    def __init__(self, camera_size: int = 224, noise: Dart | None = None) -> None:
        """camera_size: the images' width; their height is 3/4 of it, gym-aloha's 640 x 480.
        noise: DART bursts on the expert's arm targets (training data)."""
        if not 16 <= camera_size <= 1024:
            raise ValueError(f"camera_size must be in [16, 1024], got {camera_size}")
        self.camera_shape = (camera_size * 3 // 4, camera_size)
        self.noise = noise
        self._envs: dict[str, AlohaEnv] = {}

    def env(self, task: str) -> AlohaEnv:
        check_task(task)
        if task not in self._envs:
            self._envs[task] = AlohaEnv(task, max_steps=EXPERT_STEPS[task])
        return self._envs[task]

    def episode(self, name: str, seed: int, policy: str, t_ns: int) -> AlohaEpisode:
        return AlohaEpisode(self.env(name), seed, policy, self.camera_shape, self.noise)

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs.clear()


class AlohaEpisode:
    """One episode: the task's env reset to the seed, the four controllers holding the
    start pose, the sim-run policy."""

    def __init__(
        self,
        env: AlohaEnv,
        seed: int,
        policy: str,
        camera_shape: tuple[int, int],
        noise: Dart | None = None,
    ) -> None:
        begin = time.monotonic()
        self.env, self.task, self.seed, self.camera_shape = env, env.task, seed, camera_shape
        self.instruction = INSTRUCTIONS[env.task]
        self._last = env.reset(seed)
        start = to_controller(self._last.joints)
        limits = position_limits(env.physics)
        self.executors = {
            p.controller.name: TrajectoryExecutor(
                start[list(p.columns)],
                p.controller.joints,
                (limits[list(p.columns)], np.full(len(p.columns), np.inf)),
                controller="jtc",
                jtc=JtcParams(PERIOD_NS / NS_PER_S, interpolate_from_desired_state=FROM_DESIRED),
            )
            for p in PARTS
        }
        self._policy = sim_policy(policy, env.task, seed, start, limits, noise)
        self.reward = 0  # the highest level reached
        self._lines = Lines(PHASES[env.task][0][0])
        self.reset_wall_s = time.monotonic() - begin  # the expert's recording, ~2 s

    @property
    def steps(self) -> int:
        return self.env.steps

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """STATE_NAMES' positions and velocities (rad, m)."""
        data = self.env.physics.data
        return data.qpos[_STATE_QPOS].copy(), data.qvel[_STATE_QPOS].copy()

    def published(self) -> tuple[np.ndarray, np.ndarray]:
        """PUBLISHED_NAMES' positions and velocities: the state, then the grippers' angles
        as their controllers measure them (rad, rad/s)."""
        (positions, velocities), (angles, rates) = self.state(), measured(self.env.physics)
        return (
            np.concatenate([positions, angles[_GRIPPERS]]),
            np.concatenate([velocities, rates[_GRIPPERS]]),
        )

    def render(self, camera: str) -> np.ndarray:
        return self.env.render(camera, self.camera_shape)

    def sim_acts(self, step: int, t_ns: int) -> SimActs | None:
        return None if self._policy is None else self._policy(step, t_ns)

    def accept(self, command: Trajectory, now_ns: int) -> Refused | None:
        """Each controller named takes its share or refuses it, as four would (the first
        refusal is returned, naming its controller)."""
        routed = route(command)
        if isinstance(routed, Refused):
            return routed
        for name, trajectory in routed:
            refused = self.executors[name].replace(trajectory, now=now_ns / NS_PER_S)
            if refused is not None:
                return Refused(refused.kind, f"{name}: {refused.reason}")
        return None

    def lines(self) -> Lines:
        return self._lines

    def over(self) -> bool:
        return self._last.success or self.env.steps >= self.env.max_steps

    def step(self, t_ns: int) -> None:
        positions, velocities = measured(self.env.physics)
        targets = np.empty(len(ACTION_NAMES))
        for p in PARTS:
            columns = list(p.columns)
            executor = self.executors[p.controller.name]
            targets[columns] = executor.command(
                t_ns / NS_PER_S, positions[columns], velocities[columns]
            )
        self._last = self.env.step(to_env(targets))
        reached = self._last.reward > self.reward
        self.reward = max(self.reward, self._last.reward)
        narration, memory = PHASES[self.task][self.reward]
        self._lines = Lines(narration, memory if reached else None)

    def outcome(self, tally: Tally) -> AlohaOutcome:
        return AlohaOutcome(
            index=tally.index,
            episodes=tally.episodes,
            task=self.task,
            seed=self.seed,
            instruction=self.instruction,
            policy=tally.policy,
            success=self._last.success,
            success_step=self.env.success_step,
            reward=self.reward,
            steps=self.env.steps,
            max_steps=self.env.max_steps,
            start_ns=tally.start_ns,
            end_ns=tally.end_ns,
            duration_s=(tally.end_ns - tally.start_ns) / NS_PER_S,
            wall_s=tally.wall_s,
            reset_wall_s=self.reset_wall_s,
            accepted=tally.accepted,
            rejected=tally.rejected,
            limits={n: e.violations.as_dict() for n, e in self.executors.items()},
            late_takeovers={n: e.late_takeovers for n, e in self.executors.items()},
            renders=tally.renders,
            render_wall_s=tally.render_wall_s,
            lockstep_timeouts=tally.lockstep_timeouts,
            narration=tally.narration,
            memory=tally.memory,
        )
