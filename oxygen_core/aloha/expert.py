"""Scripted ALOHA experts: end-effector waypoints from the task geometry, run in the mocap
variant of the scene, recorded as the 14 joint targets that replay them in the joint-space
env.

The recipe is the ACT authors' (their record_sim_episodes.py): each arm's gripper link is
welded to a mocap body (gym_aloha/assets/bimanual_viperx_end_effector_*.xml) that follows
piecewise waypoints; the joint positions the arms reach become the joint-space targets,
each gripper's target being its commanded opening (a grasp stops the fingers short of the
command, and the command is what squeezes). What was measured on this scene shapes the rest:

- On today's MuJoCo the welds hold each mocap 0.1347 m ahead of its gripper link (along the
  link's x axis, 2 mm below it: the pose MuJoCo computes for the weld from the straight-arm
  reference configuration), between the finger pads, which reach 0.154 m. A mocap target
  is therefore where the pads close; `MocapScene.reset` puts the mocaps where the welds
  hold them (gym-aloha's reset puts them on the links, 0.135 m back).
- As shipped the welds are too soft to move the arms against their joint friction: the links
  stay centimetres off their mocaps. `MocapScene` stiffens the welds and frees the joints
  of its own copy of the scene, which only turns poses into joint paths.
- The joint-space servos lag a replayed path by 20-60 mrad, steadily: every arm joint
  carries dry friction (frictionloss 30-60 in vx300s_*.xml) against gains of 10-1600
  (kp in bimanual_viperx_*.xml). Replayed as recorded, the peg met the socket 1-2 cm off
  and insertion failed on 4 of 60 training seeds. `record` therefore steps the joint-space
  env alongside the mocap scene and adds to each arm target the integral of that env's
  tracking error; MuJoCo is deterministic, so replaying the recorded targets from the same
  seed repeats that run exactly.
- The first approach takes each wrist through its straight pose (wrist_angle 0), where
  forearm_roll and wrist_rotate turn about one axis and only their sum is fixed by the
  gripper's pose. The welds then spun them half a turn in opposite directions (up to
  38 rad/s, dev seeds 400000-400049), to the equivalent branch near +-pi. A weak spring
  on forearm_roll towards 0 (`ROLL_SPRING`, for the first `ROLL_SPRING_STEPS` only: held
  longer it bends the insertion's grasps) keeps them on the branch they start on.
- The recorded arm targets move at most `ARM_SPEED` per second (what remains above it
  was the wrists' last turns at the straight pose), and the recorded path is then
  `smoothed`: each gripper's target ramps at `GRIPPER_SPEED`, centred on each commanded
  change, and every column is smoothed by a zero-phase Gaussian, which cuts the corners where a
  stage starts, the roll spring lets go and a gripper ramp begins (up to 136 rad/s^2 on
  the arms and 10.5 rad/s on the grippers before). The result keeps within the bounds
  config/aloha.yaml gives a robot (arms 3 rad/s and 20 rad/s^2, grippers 5 rad/s and 50
  rad/s^2), so the gate passes the expert's chunks, and a policy that imitates them, as a
  robot's controller would. A causal acceleration limit instead lags the script and fails
  most insertions; a gripper ramp that starts at the commanded change lags the grasp
  (insertion 44-49 of 50 on dev). The demo's outcome is that of the smoothed targets,
  replayed from the same scene.

Every stage of a script plans from that joint-space env, the one the demonstration is for:
grasps go where the objects came to rest (they drop from gym-aloha's 5 cm spawn height),
and carried objects are placed through how they actually sit in the grippers, not through
the sampled poses or the mocap scene's copies of the objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import mujoco
import numpy as np
from dm_control.mujoco import Physics
from gym_aloha.constants import (
    DT,
    START_ARM_POSE,
    normalize_puppet_gripper_joint,
    normalize_puppet_gripper_position,
    unnormalize_puppet_gripper_joint,
    unnormalize_puppet_gripper_position,
)
from scipy.ndimage import gaussian_filter1d

from oxygen_core.aloha.env import (
    ARM_COLUMNS,
    ARM_QPOS,
    GRIPPER_SPAN,
    GRIPPERS,
    JOINT_NAMES,
    AlohaEnv,
    check_task,
    joint_state,
    object_poses,
    scene_path,
    substeps,
    target_ranges,
)

SIDES = ("left", "right")  # also the order of the mocap bodies and finger actuators
ARM_JOINT_NAMES = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
# Episode lengths the experts are written for: gym-aloha's limit for transfer-cube, ACT's
# episode length for insertion (the script's insertion succeeds by step 199).
EXPERT_STEPS = {"transfer_cube": 300, "insertion": 400}
START_GRIP = float(normalize_puppet_gripper_position(START_ARM_POSE[len(ARM_JOINT_NAMES)]))
WELD_SOLIMP = (0.9, 0.95, 0.001)  # MuJoCo's default; the XML's welds have 0.25 0.25 0.001
TRACKING_GAIN = 0.2  # the share of the joint-space env's tracking error added per step
ROLL_SPRING = 5.0  # N m / rad on each forearm_roll of the mocap scene, towards 0
ROLL_SPRING_STEPS = 45  # control steps: both tasks' first approach
ARM_SPEED = 2.9  # rad/s: the most an arm target moves per second
GRIPPER_SPEED = 4.9  # rad/s of a gripper joint's angle: the most its target moves per second
# The sigmas, in control steps, of the recorded path's smoothing (`smoothed`), chosen on dev
# 400000-400049: wider on the grippers (4) failed 6 insertions of 50.
ARM_SMOOTHING, GRIPPER_SMOOTHING = 4.5, 3.0
OPEN, CLOSED = 1.0, 0.0  # gripper commands, normalised as the joint-space targets

Pose = tuple[np.ndarray, np.ndarray]  # position (m), orientation (w, x, y, z), world frame
Command = tuple[np.ndarray, np.ndarray, float]  # a mocap pose and a gripper opening


@dataclasses.dataclass(frozen=True)
class Waypoint:
    """Where one arm's mocap is at control step `step`, and its gripper command."""

    step: int
    pos: np.ndarray  # m, world frame
    quat: np.ndarray  # (w, x, y, z), world frame
    grip: float  # normalised opening: 0 closed, 1 open


# ------------------------------------------------------------------ rotations and poses


def axis_quat(axis: tuple[float, float, float], degrees: float) -> np.ndarray:
    """The rotation of `degrees` about `axis` as a (w, x, y, z) quaternion."""
    quat = np.zeros(4)
    mujoco.mju_axisAngle2Quat(quat, np.asarray(axis, dtype=np.float64), np.radians(degrees))
    return quat


def compose(a: Pose, b: Pose) -> Pose:
    """Pose `b`, given in the frame of pose `a`, in a's parent frame."""
    pos, quat = np.zeros(3), np.zeros(4)
    mujoco.mju_mulPose(pos, quat, a[0], a[1], b[0], b[1])
    return pos, quat


def inverse(a: Pose) -> Pose:
    """The parent frame's pose in the frame of pose `a`."""
    pos, quat = np.zeros(3), np.zeros(4)
    mujoco.mju_negPose(pos, quat, a[0], a[1])
    return pos, quat


def slerp(a: np.ndarray, b: np.ndarray, fraction: float) -> np.ndarray:
    """The rotation `fraction` of the way from `a` to `b` along the shorter arc."""
    velocity = np.zeros(3)
    mujoco.mju_subQuat(velocity, b, a)
    out = a.copy()
    mujoco.mju_quatIntegrate(out, velocity, fraction)
    return out


def smoothstep(fraction: float) -> float:
    """Zero velocity at both ends of a segment, so the arms start and stop gently."""
    return fraction * fraction * (3.0 - 2.0 * fraction)


def command_at(path: list[Waypoint], step: int) -> Command:
    """The mocap pose and gripper command of `path` at `step` (held after its end)."""
    for before, after in zip(path, path[1:], strict=False):
        if before.step <= step < after.step:
            f = smoothstep((step - before.step) / (after.step - before.step))
            pos = before.pos + (after.pos - before.pos) * f
            grip = before.grip + (after.grip - before.grip) * f
            return pos, slerp(before.quat, after.quat, f), grip
    return path[-1].pos, path[-1].quat, path[-1].grip


# ------------------------------------------------------------------ the mocap scene


def gripper_frame(physics: Physics, side: str, weld: Pose) -> Pose:
    """The pose the `side` mocap has when its weld holds it, at the gripper link's current
    pose in `physics` (either scene: both have the same arms)."""
    link = physics.data.ptr.body(f"vx300s_{side}/gripper_link")
    return compose((link.xpos, link.xquat), weld)


class MocapScene:
    """A task's end-effector scene: arms driven through their mocaps, fingers through their
    position actuators, objects placed as the joint-space env places them."""

    def __init__(self, task: str) -> None:
        check_task(task)
        self.task = task
        self.physics = Physics.from_xml_path(str(scene_path(task, mocap=True)))
        self._substeps = substeps(self.physics)
        self.weld = self._weld_offsets()  # each mocap's pose in its gripper link's frame
        self._stiffen()
        self._steps = 0  # since the last reset: the roll spring holds for the first ones

    def reset(self, seed: int) -> None:
        """Arms at START_ARM_POSE, mocaps where the welds hold them, grippers at their start
        opening, objects at the seed's poses."""
        self.place(object_poses(self.task, seed))

    def place(self, objects: np.ndarray) -> None:
        """As `reset`, with the objects at `objects` (as `AlohaEnv.place`)."""
        physics = self.physics
        with physics.reset_context():
            physics.data.qpos[:ARM_QPOS] = START_ARM_POSE
            physics.data.qpos[ARM_QPOS:] = objects
        for index, side in enumerate(SIDES):
            held = gripper_frame(physics, side, self.weld[side])
            physics.data.mocap_pos[index], physics.data.mocap_quat[index] = held
        finger = START_ARM_POSE[len(ARM_JOINT_NAMES)]  # m
        physics.data.ctrl[:] = [finger, -finger, finger, -finger]
        self._steps = 0
        self._roll_spring(ROLL_SPRING)

    def mocap(self, side: str) -> Pose:
        """The `side` mocap's current pose."""
        index = SIDES.index(side)
        return self.physics.data.mocap_pos[index].copy(), self.physics.data.mocap_quat[index].copy()

    def step(self, commands: dict[str, Command]) -> None:
        """One 20 ms step with each side's mocap pose and gripper opening."""
        data = self.physics.data
        for index, side in enumerate(SIDES):
            pos, quat, grip = commands[side]
            data.mocap_pos[index], data.mocap_quat[index] = pos, quat
            finger = unnormalize_puppet_gripper_position(grip)
            data.ctrl[2 * index : 2 * index + 2] = finger, -finger
        self.physics.step(self._substeps)
        self._steps += 1
        if self._steps == ROLL_SPRING_STEPS:
            self._roll_spring(0.0)

    def _weld_offsets(self) -> dict[str, Pose]:
        """Each mocap's pose in its gripper link's frame in the reference configuration
        (qpos0, the arms straight), which is what MuJoCo makes the weld hold."""
        model = self.physics.model.ptr
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        offsets = {}
        for side in SIDES:
            link, body = data.body(f"vx300s_{side}/gripper_link"), model.body(f"mocap_{side}")
            offsets[side] = compose(inverse((link.xpos, link.xquat)), (body.pos, body.quat))
        return offsets

    def _stiffen(self) -> None:
        """Make the arms follow their mocaps to about a millimetre. As shipped the welds are
        soft (solimp 0.25) against arm joints with dry friction (frictionloss 30-60) and no
        actuators, and the links stay 2-6 cm and 10-30 degrees off their mocaps. This scene
        only produces joint paths; the joint-space env keeps its own friction."""
        model = self.physics.model.ptr
        model.eq_solimp[:, :3] = WELD_SOLIMP
        for side in SIDES:
            for name in ARM_JOINT_NAMES:
                model.dof_frictionloss[model.joint(f"vx300s_{side}/{name}").dofadr[0]] = 0.0

    def _roll_spring(self, stiffness: float) -> None:
        """Each forearm_roll pulled towards 0 with `stiffness` (module docstring)."""
        model = self.physics.model.ptr
        for side in SIDES:
            joint = model.joint(f"vx300s_{side}/forearm_roll")
            model.jnt_stiffness[joint.id] = stiffness
            model.qpos_spring[joint.qposadr[0]] = 0.0


# ------------------------------------------------------------------ the scripts

Paths = dict[str, list[Waypoint]]


@dataclasses.dataclass(frozen=True)
class View:
    """What a stage plans from: the objects and grippers of the joint-space env being
    recorded (the grippers in their mocaps' frames), and the mocap commands so far."""

    physics: Physics  # the joint-space env's
    weld: dict[str, Pose]  # MocapScene.weld
    commands: dict[str, Command]

    def object_pose(self, index: int) -> Pose:
        """Object `index`'s pose (the cube; the peg 0, the socket 1)."""
        qpos = self.physics.data.qpos[ARM_QPOS + 7 * index : ARM_QPOS + 7 * index + 7]
        return qpos[:3].copy(), qpos[3:].copy()

    def held(self, side: str, index: int) -> Pose:
        """Object `index`'s pose in the frame of the `side` gripper holding it."""
        gripper = gripper_frame(self.physics, side, self.weld[side])
        return compose(inverse(gripper), self.object_pose(index))

    def place(self, side: str, index: int, goal: Pose) -> Pose:
        """The `side` mocap pose that puts object `index`, held as it is now, at `goal`."""
        return compose(goal, inverse(self.held(side, index)))

    def carried(self, side: str, index: int) -> Pose:
        """Where object `index`, held as it is now, is once the `side` arm has reached its
        current command (while the arm is still on its way there)."""
        pos, quat, _ = self.commands[side]
        return compose((pos, quat), self.held(side, index))

    def hold(self, side: str, step: int, grip: float) -> Waypoint:
        """A waypoint keeping the `side` mocap where it is commanded now, gripper `grip`."""
        pos, quat, _ = self.commands[side]
        return Waypoint(step, pos, quat, grip)


# A stage plans some arms' next waypoints from the view when it starts.
Stage = Callable[[View], Paths]

PICK_PITCH = 60.0  # degrees nose-down for picking from the table (ACT's pick angle)
ABOVE = 0.08  # m above an object before descending onto it (ACT's approach height)
LEVEL = np.array([1.0, 0.0, 0.0, 0.0])  # an object's orientation as gym-aloha spawns it


def nose_down(side: str, degrees: float) -> np.ndarray:
    """A mocap orientation with the `side` gripper pointing at the other arm, pitched down
    by `degrees`. Both mocap frames are world-aligned at a level gripper (the right link's
    own frame is turned 180 degrees about z), so the pitch is about world y, of opposite
    sign for the two arms."""
    return axis_quat((0.0, 1.0, 0.0), degrees if side == "left" else -degrees)


# Transfer-cube (control steps): the right arm picks the cube and lifts it to the meeting
# point; the left arm, gripper turned to close vertically, takes it from the -x side. The
# task's success (left fingers on the lifted cube) comes at step 175.
CUBE_ABOVE, CUBE_DOWN, CUBE_CLOSED, CUBE_MET = 50, 75, 90, 135
LEFT_IN, LEFT_CLOSED, RIGHT_OPEN, APART = 165, 180, 195, 225
CUBE_MEET = np.array([0.0, 0.5, 0.2])  # m: mid-table, 20 cm up
LEFT_REACH = 0.03  # m: the left pads' centre this far on the -x side of the cube's centre
LEFT_VERTICAL = axis_quat((1.0, 0.0, 0.0), 90.0)  # fingers close along z


def cube_approach(view: View) -> Paths:
    """Right gripper above the cube; left gripper open, short of the meeting point."""
    cube = view.object_pose(0)[0]
    return {
        "right": [Waypoint(CUBE_ABOVE, cube + [0, 0, ABOVE], nose_down("right", PICK_PITCH), OPEN)],
        "left": [Waypoint(CUBE_MET - 20, CUBE_MEET - [0.15, 0, 0], LEFT_VERTICAL, OPEN)],
    }


def cube_pick(view: View) -> Paths:
    """Down to the cube's centre as it rests, close, lift to the meeting point."""
    cube, quat = view.object_pose(0)[0], nose_down("right", PICK_PITCH)
    return {
        "right": [
            Waypoint(CUBE_DOWN, cube, quat, OPEN),
            Waypoint(CUBE_CLOSED, cube, quat, CLOSED),
            Waypoint(CUBE_MET, CUBE_MEET, quat, CLOSED),
        ]
    }


def cube_handover(view: View) -> Paths:
    """The left gripper closes on the cube where it hangs; the right lets go; both part."""
    grab = view.carried("right", 0)[0] - [LEFT_REACH, 0, 0]
    right_pos, right_quat, _ = view.commands["right"]
    return {
        "left": [
            Waypoint(LEFT_IN, grab, LEFT_VERTICAL, OPEN),
            Waypoint(LEFT_CLOSED, grab, LEFT_VERTICAL, CLOSED),
            Waypoint(APART, grab - [0.1, 0, 0], LEFT_VERTICAL, CLOSED),
        ],
        "right": [
            view.hold("right", LEFT_CLOSED, CLOSED),
            view.hold("right", RIGHT_OPEN, OPEN),
            Waypoint(APART, right_pos + [0.1, 0, 0], right_quat, OPEN),
        ],
    }


# Insertion (control steps): each arm picks its object (right: the peg, left: the socket),
# carries it level to a meeting point, the peg lined up on the socket's axis 4 cm outside
# its mouth; then the right arm pushes the peg in along the socket's axis as the socket
# sits in the left gripper. The task's success (peg on the pin) comes at step 198-199.
PARTS_ABOVE, PARTS_DOWN, PARTS_CLOSED = 50, 75, 90
CARRY, LIFTED, MET, LINED_UP, PUSHED = 95, 122, 150, 175, 205
SOCKET_MEET = np.array([-0.05, 0.5, 0.2])  # m: the socket's centre at the meeting point
PEG_GRIP_HEIGHT = 0.01  # m above the peg's centre: the pads at its top edge
CARRY_LIFT = 0.1  # m above the straight line to the meeting point, halfway
# Peg centre to socket centre along the socket's axis (x). The socket is 12 cm long and the
# pin inside it 8 cm (bimanual_viperx_insertion.xml), the peg 12 cm: at 0.10 the peg's tip
# meets the pin. Lined up, the tip is 4 cm outside the mouth; pushed, 1.5 cm past the pin.
LINED_UP_DISTANCE, PUSHED_DISTANCE = 0.16, 0.085


def parts_approach(view: View) -> Paths:
    """Each gripper above its object."""
    return {
        side: [Waypoint(PARTS_ABOVE, pos + [0, 0, ABOVE], nose_down(side, PICK_PITCH), OPEN)]
        for side, pos in (("right", view.object_pose(0)[0]), ("left", view.object_pose(1)[0]))
    }


def parts_pick(view: View) -> Paths:
    """Down onto each object as it rests and close: the peg at its top edge, the socket
    around its side walls at its centre."""
    targets = {
        "right": view.object_pose(0)[0] + [0, 0, PEG_GRIP_HEIGHT],
        "left": view.object_pose(1)[0],
    }
    return {
        side: [
            Waypoint(PARTS_DOWN, pos, nose_down(side, PICK_PITCH), OPEN),
            Waypoint(PARTS_CLOSED, pos, nose_down(side, PICK_PITCH), CLOSED),
        ]
        for side, pos in targets.items()
    }


def parts_meet(view: View) -> Paths:
    """Carry both objects, level, up and to the meeting point, the peg on the socket's
    axis beyond the lined-up distance."""
    goals = {"left": (1, SOCKET_MEET), "right": (0, SOCKET_MEET + [LINED_UP_DISTANCE + 0.04, 0, 0])}
    paths = {}
    for side, (index, goal) in goals.items():
        middle = (view.object_pose(index)[0] + goal) / 2 + [0, 0, CARRY_LIFT]
        paths[side] = [
            Waypoint(LIFTED, *view.place(side, index, (middle, LEVEL)), CLOSED),
            Waypoint(MET, *view.place(side, index, (goal, LEVEL)), CLOSED),
        ]
    return paths


def peg_insert(view: View) -> Paths:
    """Line the peg up on the socket's axis as the socket sits in the left gripper (where
    the left arm is bringing it), then push it in along that axis."""
    socket_pos, socket_quat = view.carried("left", 1)
    axis = np.zeros(9)
    mujoco.mju_quat2Mat(axis, socket_quat)
    direction = axis.reshape(3, 3)[:, 0]
    return {
        "right": [
            Waypoint(
                step,
                *view.place("right", 0, (socket_pos + direction * distance, socket_quat)),
                CLOSED,
            )
            for step, distance in ((LINED_UP, LINED_UP_DISTANCE), (PUSHED, PUSHED_DISTANCE))
        ]
    }


SCRIPTS: dict[str, list[tuple[int, Stage]]] = {
    "transfer_cube": [
        (0, cube_approach),
        (CUBE_ABOVE - 10, cube_pick),
        (CUBE_MET + 5, cube_handover),
    ],
    "insertion": [
        (0, parts_approach),
        (PARTS_ABOVE - 10, parts_pick),
        (CARRY, parts_meet),
        (MET + 2, peg_insert),
    ],
}


def joint_path(scene: MocapScene, commands: dict[str, Command]) -> np.ndarray:
    """The 14 joint positions the mocap scene's arms are at, each gripper as its command."""
    joints = joint_state(scene.physics)
    joints[list(GRIPPERS)] = [commands[side][2] for side in SIDES]
    return joints


# ------------------------------------------------------------------ recording and replay


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How an episode of joint targets went in the joint-space env."""

    success: bool  # gym-aloha's success (reward 4) at some step
    success_step: int | None  # the first such step (1-based), None without success


@dataclasses.dataclass(frozen=True)
class Demo:
    """A scripted episode: the joint targets and how they went when recorded."""

    targets: np.ndarray  # steps x 14 (JOINT_NAMES)
    outcome: Outcome


def record(task: str, seed: int, steps: int | None = None) -> Demo:
    """The expert's episode for `seed`: the task's script run in the mocap scene, planned
    from the joint-space env it is recorded in; each step's joint path goes to that env with
    the integral of its arm tracking error added (TRACKING_GAIN per step), the grippers as
    commanded. `steps` defaults to EXPERT_STEPS[task]. A script's first stage, at step 0,
    plans both arms."""
    return record_scene(task, object_poses(task, seed), steps)


def record_scene(task: str, objects: np.ndarray, steps: int | None = None) -> Demo:
    """`record` with the objects at `objects` (as `AlohaEnv.place`) instead of a seed's."""
    steps = EXPERT_STEPS[task] if steps is None else steps
    scene, env = MocapScene(task), AlohaEnv(task, max_steps=steps)
    scene.place(objects)
    env.place(objects)
    commands = {side: (*scene.mocap(side), START_GRIP) for side in SIDES}
    paths: Paths = {}
    stages = dict(SCRIPTS[task])
    arms = ARM_COLUMNS
    correction, targets = np.zeros(len(JOINT_NAMES)), []
    # Inside the joints' ranges: the correction carries the wrist rolls past pi at times,
    # which MuJoCo clamps anyway (the same motion), but a robot's controller refuses.
    ranges = target_ranges(env.physics)
    previous, reach = env.joints(), ARM_SPEED * DT  # the most an arm target moves a step
    for step in range(steps):
        if step in stages:
            for side, path in stages[step](View(env.physics, scene.weld, commands)).items():
                paths[side] = [Waypoint(step, *commands[side]), *path]
        commands = {side: command_at(paths[side], step) for side in SIDES}
        scene.step(commands)
        path = joint_path(scene, commands)
        target = np.clip(path + correction, ranges[:, 0], ranges[:, 1])
        target[arms] = previous[arms] + np.clip(target[arms] - previous[arms], -reach, reach)
        targets.append(target)
        previous = target
        env.step(target)
        correction[arms] += TRACKING_GAIN * (path - env.joints())[arms]
    smooth = smoothed(np.array(targets))
    return Demo(smooth, _replay_scene(task, objects, smooth))


def smoothed(targets: np.ndarray) -> np.ndarray:
    """The recorded path within the rate bounds config/aloha.yaml gives a robot: each
    gripper's target ramps at GRIPPER_SPEED (its joint's angle), as much before each
    commanded change as after it (the mean of the rate limit run forwards and backwards:
    no lag on the grasp), and every column is smoothed by a zero-phase Gaussian (arms
    ARM_SMOOTHING, grippers GRIPPER_SMOOTHING), which cuts the corners where a stage
    starts, the roll spring lets go and a ramp begins without lagging the script. A convex
    blend of targets in range stays in range."""
    out = targets.copy()
    grippers = list(GRIPPERS)
    ramp = targets[:, grippers]
    ramp = (_rate_limited(ramp) + _rate_limited(ramp[::-1])[::-1]) / 2
    ramp = gaussian_filter1d(ramp, GRIPPER_SMOOTHING, axis=0, mode="nearest")
    # As the controllers' units give them back (a gripper's joint angle and back, which
    # moves a value by 1e-16 once, then not): the sim runs these very targets, and an
    # insertion can turn on a contact that small.
    out[:, grippers] = normalize_puppet_gripper_joint(unnormalize_puppet_gripper_joint(ramp))
    arms = ARM_COLUMNS
    out[:, arms] = gaussian_filter1d(targets[:, arms], ARM_SMOOTHING, axis=0, mode="nearest")
    return out


def _rate_limited(grips: np.ndarray) -> np.ndarray:
    """Gripper openings (steps x 2, normalised) moving at most GRIPPER_SPEED of the joint."""
    step = GRIPPER_SPEED * DT / GRIPPER_SPAN
    out = grips.copy()
    for k in range(1, len(out)):
        out[k] = out[k - 1] + np.clip(grips[k] - out[k - 1], -step, step)
    return out


def expert_joint_targets(task: str, seed: int, steps: int | None = None) -> np.ndarray:
    """The expert's 14 joint targets for `seed`, one row per step (steps x 14)."""
    return record(task, seed, steps).targets


def replay(task: str, seed: int, targets: np.ndarray) -> Outcome:
    """Run `targets` (steps x 14) in the joint-space env from `seed`'s reset."""
    return _replay_scene(task, object_poses(task, seed), targets)


def _replay_scene(task: str, objects: np.ndarray, targets: np.ndarray) -> Outcome:
    """`replay` with the objects at `objects` (as `AlohaEnv.place`)."""
    env = AlohaEnv(task, max_steps=len(targets))
    env.place(objects)
    for row in targets:
        env.step(row)
    return Outcome(env.success_step is not None, env.success_step)
