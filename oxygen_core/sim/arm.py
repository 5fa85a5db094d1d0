"""The simulated arm: six revolute joints and a parallel gripper, kinematics only.

Its links and formulas are `oxygen_core.kinematics` (the joint layout is described there),
which the inference path's grip space shares; this module adds what the simulator needs:
the fingers, joint limits, the checked single-pose inverse and the servo model. The
gripper's opening 0 closed .. 1 open is `MAX_GAP` metres between the fingertips.

Every commanded position goes through `limit_step`: clamped to the joint's position range,
then moved towards at no more than the joint's velocity limit for one control period. That
is the whole servo model (ideal tracking within the limits), which is what a kinematic
evaluation of a policy needs and no more.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from oxygen_core.kinematics import chain, planar_top_down, top_down_from_planar

JOINT_NAMES = ("joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper")
ARM_DOF = 6
GRIPPER = JOINT_NAMES.index("gripper")  # its command: the opening, 0 closed .. 1 open
NUM_JOINTS = len(JOINT_NAMES)

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


def forward(q: np.ndarray) -> ArmPose:
    """Joint positions (7,) -> link points and the tool frame."""
    shoulder, elbow, wrist, grip, r_tool = chain(q)
    gap = float(np.clip(q[6], 0.0, 1.0)) * MAX_GAP
    return ArmPose(shoulder, elbow, wrist, grip, r_tool, gap)


class Unreachable(ValueError):
    """A top-down grasp pose the arm cannot reach within its joint limits."""


def inverse_top_down(
    point: np.ndarray, yaw: float, gripper: float, roll_near: float = 0.0
) -> np.ndarray:
    """Joint positions (7,) that put the grip point at `point` with the tool pointing down.

    yaw: the world direction (rad) the fingers should close along. The fingers are symmetric,
    so yaw and yaw + pi give the same grasp: joint_6 is the solution nearest `roll_near`
    (pass the current joint_6 to keep a moving target continuous instead of wrapping).
    Raises Unreachable outside the workspace or the joint limits.
    """
    planar = planar_top_down(point)
    base, cos_elbow = float(planar[0]), float(planar[-1])
    if not -1.0 <= cos_elbow <= 1.0:
        raise Unreachable(f"point {np.round(point, 4).tolist()} is out of the arm's reach")
    # The fingers close along world angle base + pi/2 - joint_6 (tool y after the flip).
    roll = base + np.pi / 2 - yaw
    roll += np.pi * np.round((roll_near - roll) / np.pi)
    if abs(roll) > POSITION_LIMITS[5, 1]:  # the nearest turn is past the stop: take the other
        roll -= np.pi * np.sign(roll)
    q = top_down_from_planar(planar, np.float64(roll), np.float64(gripper))
    low, high = POSITION_LIMITS[:, 0], POSITION_LIMITS[:, 1]
    if np.any(q < low - 1e-9) or np.any(q > high + 1e-9):
        bad = [JOINT_NAMES[i] for i in np.flatnonzero((q < low - 1e-9) | (q > high + 1e-9))]
        raise Unreachable(f"point {np.round(point, 4).tolist()} needs {bad} outside limits")
    return q


def limit_step(current: np.ndarray, target: np.ndarray, dt: float) -> np.ndarray:
    """One control period of the servos: clamp the target to the position limits, then move
    towards it by at most each joint's velocity limit times dt."""
    goal = np.clip(target, POSITION_LIMITS[:, 0], POSITION_LIMITS[:, 1])
    max_move = VELOCITY_LIMITS * dt
    return current + np.clip(goal - current, -max_move, max_move)


HOME_POINT = np.array([0.30, 0.0, 0.25])
HOME = inverse_top_down(HOME_POINT, yaw=np.pi / 2, gripper=1.0)
