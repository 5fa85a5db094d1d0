"""The simulated arm: six revolute joints and a parallel gripper, kinematics only.

The structure is the usual 6-DoF layout with a spherical-ish wrist, chosen because top-down
grasps then have a closed-form inverse:

    joint_1  base yaw        about world z, at the base
    joint_2  shoulder pitch  0 = upper arm vertical, positive leans it forward
    joint_3  elbow pitch     relative to the upper arm
    joint_4  forearm roll    about the forearm axis (0 keeps the arm planar)
    joint_5  wrist pitch     relative to the forearm
    joint_6  tool roll       about the tool axis: the yaw of a top-down grasp
    gripper  opening         0 closed .. 1 open (`MAX_GAP` metres between the fingertips)

With joint_4 = 0 the first five joints act in one vertical plane, so a grasp point p with the
tool pointing straight down is a two-link planar problem for the wrist point (p raised by the
tool length) plus joint_5 = pi - joint_2 - joint_3 to keep the tool vertical. World frame:
x forward from the base, y to the robot's left, z up, table top at z = 0, metres.

Every commanded position goes through `limit_step`: clamped to the joint's position range,
then moved towards at no more than the joint's velocity limit for one control period. That
is the whole servo model (ideal tracking within the limits), which is what a kinematic
evaluation of a policy needs and no more.
"""

from __future__ import annotations

import dataclasses

import numpy as np

JOINT_NAMES = ("joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper")
ARM_DOF = 6
GRIPPER = JOINT_NAMES.index("gripper")  # its command: the opening, 0 closed .. 1 open
NUM_JOINTS = len(JOINT_NAMES)

BASE_HEIGHT = 0.12  # shoulder axis above the table (m)
UPPER_ARM = 0.35
FOREARM = 0.35
TOOL_LENGTH = 0.13  # wrist pitch axis to the grip point between the fingertips
FINGER_LENGTH = 0.05  # the fingers end at the grip point and reach this far up towards the palm
MAX_GAP = 0.08  # fingertip gap when fully open (m)

POSITION_LIMITS = np.array(
    [
        [-2.8, 2.8],
        [-0.8, 1.9],
        [-0.3, 2.8],
        [-2.8, 2.8],
        [-1.5, 2.6],
        [-2.8, 2.8],
        [0.0, 1.0],
    ]
)
VELOCITY_LIMITS = np.array([1.2, 1.2, 1.5, 2.0, 2.0, 2.5, 2.0])  # rad/s; gripper: fraction/s


def _rot_z(angle: np.ndarray) -> np.ndarray:
    """Rotations about z, [..., 3, 3] for angles [...]."""
    c, s = np.cos(angle), np.sin(angle)
    r = np.zeros((*np.shape(angle), 3, 3))
    r[..., 0, 0], r[..., 0, 1], r[..., 1, 0], r[..., 1, 1], r[..., 2, 2] = c, -s, s, c, 1.0
    return r


def _rot_y(angle: np.ndarray) -> np.ndarray:
    """Rotations about y, [..., 3, 3] for angles [...]."""
    c, s = np.cos(angle), np.sin(angle)
    r = np.zeros((*np.shape(angle), 3, 3))
    r[..., 0, 0], r[..., 0, 2], r[..., 2, 0], r[..., 2, 2], r[..., 1, 1] = c, s, -s, c, 1.0
    return r


@dataclasses.dataclass(frozen=True)
class ArmPose:
    """Forward kinematics of one joint vector: the points the renderer and the world need."""

    shoulder: np.ndarray  # (3,)
    elbow: np.ndarray
    wrist: np.ndarray
    grip: np.ndarray  # the grip point between the fingertips
    tool_rotation: np.ndarray  # (3, 3) world <- tool; tool z points from the wrist to the grip
    gap: float  # fingertip gap (m)

    @property
    def finger_axis(self) -> np.ndarray:
        """The direction the fingers close along (tool y), in world coordinates."""
        return self.tool_rotation[:, 1]


def _chain(q: np.ndarray) -> tuple[np.ndarray, ...]:
    """Joint positions [..., 7] -> shoulder (3,), elbow, wrist, grip [..., 3] and world <-
    tool [..., 3, 3]."""
    q = np.asarray(q, np.float64)
    shoulder = np.array([0.0, 0.0, BASE_HEIGHT])
    r_upper = _rot_z(q[..., 0]) @ _rot_y(q[..., 1])
    elbow = shoulder + r_upper[..., :, 2] * UPPER_ARM
    r_fore = r_upper @ _rot_y(q[..., 2]) @ _rot_z(q[..., 3])
    wrist = elbow + r_fore[..., :, 2] * FOREARM
    r_tool = r_fore @ _rot_y(q[..., 4]) @ _rot_z(q[..., 5])
    grip = wrist + r_tool[..., :, 2] * TOOL_LENGTH
    return shoulder, elbow, wrist, grip, r_tool


def forward(q: np.ndarray) -> ArmPose:
    """Joint positions (7,) -> link points and the tool frame."""
    shoulder, elbow, wrist, grip, r_tool = _chain(q)
    gap = float(np.clip(q[6], 0.0, 1.0)) * MAX_GAP
    return ArmPose(shoulder, elbow, wrist, grip, r_tool, gap)


def grip_points(q: np.ndarray) -> np.ndarray:
    """Joint positions [..., 7] -> grip points [..., 3]: `forward` over a batch."""
    return _chain(q)[3]


class Unreachable(ValueError):
    """A top-down grasp pose the arm cannot reach within its joint limits."""


def _planar(point: np.ndarray) -> tuple[np.ndarray, ...]:
    """Grip points [..., 3] -> base, shoulder, elbow, wrist pitch [...] of the elbow-up
    top-down arm, and cos(elbow) before clipping (outside [-1, 1]: out of reach; the joints
    are then those of the nearest stretched or folded arm)."""
    x, y, z = (np.asarray(point, np.float64)[..., i] for i in range(3))
    base = np.arctan2(y, x)
    dr, dz = np.hypot(x, y), z + TOOL_LENGTH - BASE_HEIGHT  # wrist point from the shoulder
    cos_elbow = (dr * dr + dz * dz - UPPER_ARM**2 - FOREARM**2) / (2 * UPPER_ARM * FOREARM)
    elbow = np.arccos(np.clip(cos_elbow, -1.0, 1.0))  # elbow up: the forearm bends forward
    shoulder = np.arctan2(dr, dz) - np.arctan2(
        FOREARM * np.sin(elbow), UPPER_ARM + FOREARM * np.cos(elbow)
    )
    return base, shoulder, elbow, np.pi - shoulder - elbow, cos_elbow


def inverse_top_down(
    point: np.ndarray, yaw: float, gripper: float, roll_near: float = 0.0
) -> np.ndarray:
    """Joint positions (7,) that put the grip point at `point` with the tool pointing down.

    yaw: the world direction (rad) the fingers should close along. The fingers are symmetric,
    so yaw and yaw + pi give the same grasp: joint_6 is the solution nearest `roll_near`
    (pass the current joint_6 to keep a moving target continuous instead of wrapping).
    Raises Unreachable outside the workspace or the joint limits.
    """
    planar = _planar(point)
    base, cos_elbow = float(planar[0]), float(planar[-1])
    if not -1.0 <= cos_elbow <= 1.0:
        raise Unreachable(f"point {np.round(point, 4).tolist()} is out of the arm's reach")
    # The fingers close along world angle base + pi/2 - joint_6 (tool y after the flip).
    roll = base + np.pi / 2 - yaw
    roll += np.pi * np.round((roll_near - roll) / np.pi)
    if abs(roll) > POSITION_LIMITS[5, 1]:  # the nearest turn is past the stop: take the other
        roll -= np.pi * np.sign(roll)
    q = _top_down(planar, np.float64(roll), np.float64(gripper))
    low, high = POSITION_LIMITS[:, 0], POSITION_LIMITS[:, 1]
    if np.any(q < low - 1e-9) or np.any(q > high + 1e-9):
        bad = [JOINT_NAMES[i] for i in np.flatnonzero((q < low - 1e-9) | (q > high + 1e-9))]
        raise Unreachable(f"point {np.round(point, 4).tolist()} needs {bad} outside limits")
    return q


def top_down_joints(point: np.ndarray, roll: np.ndarray, gripper: np.ndarray) -> np.ndarray:
    """Joint commands [..., 7] for grip points [..., 3], tool roll (joint_6) and opening
    [...]: `inverse_top_down` over a batch that never raises, for a policy's commands. Out of
    reach the arm stretches or folds toward the point; joint limits are the servos' to
    clamp (`limit_step`)."""
    return _top_down(_planar(point), roll, gripper)


def _top_down(planar: tuple[np.ndarray, ...], roll: np.ndarray, gripper: np.ndarray) -> np.ndarray:
    """The joints [..., 7] of `_planar`'s arm with joint_4 at 0, the tool roll and opening."""
    base, shoulder, elbow, wrist, _ = planar
    return np.stack([base, shoulder, elbow, np.zeros_like(base), wrist, roll, gripper], -1)


def limit_step(current: np.ndarray, target: np.ndarray, dt: float) -> np.ndarray:
    """One control period of the servos: clamp the target to the position limits, then move
    towards it by at most each joint's velocity limit times dt."""
    goal = np.clip(target, POSITION_LIMITS[:, 0], POSITION_LIMITS[:, 1])
    max_move = VELOCITY_LIMITS * dt
    return current + np.clip(goal - current, -max_move, max_move)


HOME_POINT = np.array([0.30, 0.0, 0.25])
HOME = inverse_top_down(HOME_POINT, yaw=np.pi / 2, gripper=1.0)
