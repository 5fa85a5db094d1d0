"""The tabletop arm's geometry and kinematics: what its "grip" action space is made of.

The simulated arm (`oxygen_core.sim.arm`) and the inference path's grip space
(`oxygen_core.robot_io`) share these lengths and formulas, so a policy's grip-point
commands become the same joints on the robot and in the simulator; this module imports
nothing of the simulator. The structure is the usual 6-DoF layout with a spherical-ish
wrist, chosen because top-down grasps then have a closed-form inverse:

    joint_1  base yaw        about world z, at the base
    joint_2  shoulder pitch  0 = upper arm vertical, positive leans it forward
    joint_3  elbow pitch     relative to the upper arm
    joint_4  forearm roll    about the forearm axis (0 keeps the arm planar)
    joint_5  wrist pitch     relative to the forearm
    joint_6  tool roll       about the tool axis: the yaw of a top-down grasp
    gripper  opening         0 closed .. 1 open

With joint_4 = 0 the first five joints act in one vertical plane, so a grasp point p with the
tool pointing straight down is a two-link planar problem for the wrist point (p raised by the
tool length) plus joint_5 = pi - joint_2 - joint_3 to keep the tool vertical. World frame:
x forward from the base, y to the robot's left, z up, table top at z = 0, metres.
"""

from __future__ import annotations

import numpy as np

BASE_HEIGHT = 0.12  # shoulder axis above the table (m)
UPPER_ARM = 0.35
FOREARM = 0.35
TOOL_LENGTH = 0.13  # wrist pitch axis to the grip point between the fingertips


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


def chain(q: np.ndarray) -> tuple[np.ndarray, ...]:
    """Joint positions [..., 7] -> shoulder (3,), elbow, wrist, grip [..., 3] and world <-
    tool [..., 3, 3]; tool z points from the wrist to the grip point."""
    q = np.asarray(q, np.float64)
    shoulder = np.array([0.0, 0.0, BASE_HEIGHT])
    r_upper = _rot_z(q[..., 0]) @ _rot_y(q[..., 1])
    elbow = shoulder + r_upper[..., :, 2] * UPPER_ARM
    r_fore = r_upper @ _rot_y(q[..., 2]) @ _rot_z(q[..., 3])
    wrist = elbow + r_fore[..., :, 2] * FOREARM
    r_tool = r_fore @ _rot_y(q[..., 4]) @ _rot_z(q[..., 5])
    grip = wrist + r_tool[..., :, 2] * TOOL_LENGTH
    return shoulder, elbow, wrist, grip, r_tool


def grip_points(q: np.ndarray) -> np.ndarray:
    """Joint positions [..., 7] -> grip points [..., 3]."""
    return chain(q)[3]


def planar_top_down(point: np.ndarray) -> tuple[np.ndarray, ...]:
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


def top_down_from_planar(
    planar: tuple[np.ndarray, ...], roll: np.ndarray, gripper: np.ndarray
) -> np.ndarray:
    """The joints [..., 7] of `planar_top_down`'s arm with joint_4 at 0, the tool roll and
    opening."""
    base, shoulder, elbow, wrist, _ = planar
    return np.stack([base, shoulder, elbow, np.zeros_like(base), wrist, roll, gripper], -1)


def top_down_joints(point: np.ndarray, roll: np.ndarray, gripper: np.ndarray) -> np.ndarray:
    """Joint commands [..., 7] for grip points [..., 3], tool roll (joint_6) and opening
    [...], for a policy's commands: unlike the simulator's checked single-pose inverse
    (`oxygen_core.sim.arm.inverse_top_down`) it never raises. Out of reach the arm stretches
    or folds toward the point; joint limits are the servos' to clamp."""
    return top_down_from_planar(planar_top_down(point), roll, gripper)
