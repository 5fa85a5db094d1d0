"""Robot units <-> the space a pi0.5 checkpoint was trained in, per robot.

openpi trains each robot with its own data transforms, and a checkpoint only works when
inference applies the same ones around normalisation. Three kinds exist for the presets
here (openpi `training/config.py`, `policies/*`, `transforms.py`):

- state in the prompt or not (`RobotConfig.discrete_state`: pi05_libero was trained
  without it);
- delta actions: some action dimensions are predicted relative to the current state and
  made absolute after unnormalising (pi05_aloha: the joints, not the grippers);
- a space adapter (`RobotConfig.space`): pi05_aloha was trained in the "pi" joint space,
  with some joints mirrored and the gripper in angular units, while the ALOHA runtime
  reports and takes linear gripper positions; "grip" (the tabletop arm of
  `oxygen_core.kinematics`, the `sim_grip` preset): the grip point, tool roll and opening,
  the joints by the arm's top-down inverse kinematics, as end-effector policies
  (pi05_libero) leave the joints to the robot.

Flow: robot state -> `state_to_model` -> normalise (prompt); model actions -> unnormalise
-> `actions_to_robot` (deltas made absolute with the state in model space, then encoded
for the robot). `actions_to_model` is its exact inverse: real-time chunking turns the
chunk the robot is executing back into the model's space, relative to the NEW state.
"""

from __future__ import annotations

import numpy as np

from oxygen_core import kinematics
from oxygen_core.config import RobotConfig

# --- ALOHA (Interbotix ViperX) constants, as the pi05_aloha checkpoint was trained -------
_ALOHA_FLIP = np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1], np.float64)
_ALOHA_GRIPPERS = [6, 13]
_LINEAR_RANGE = (0.01844, 0.05800)  # gripper finger position the runtime reports (m)
_ARM_LENGTH, _HORN_RADIUS = 0.036, 0.022  # the gripper linkage (m)
_ANGULAR_RANGE = (0.5476, 1.6296)  # gripper angle (rad) over the training data's range
_RUNTIME_ANGLE_RANGE = (-0.6213, 1.4910)  # the runtime's open..closed gripper joint (rad)


def state_to_model(robot: RobotConfig, state: np.ndarray) -> np.ndarray:
    """Robot state [D] (float) -> the checkpoint's state space, before normalisation."""
    state = np.asarray(state, np.float64)
    if robot.space == "aloha":
        state = state * _ALOHA_FLIP
        state[_ALOHA_GRIPPERS] = _aloha_gripper_to_model(state[_ALOHA_GRIPPERS])
    if robot.space == "grip":
        state = _joints_to_grip(state)
    return state.astype(np.float32)


def actions_to_robot(
    robot: RobotConfig, actions: np.ndarray, model_state: np.ndarray
) -> np.ndarray:
    """Unnormalised model actions [..., H, A] -> robot commands [..., H, A].

    model_state: `state_to_model` of the frame's state, for the delta dimensions.
    """
    actions = np.array(actions, np.float64)
    if robot.delta_actions:
        delta = list(robot.delta_actions)
        actions[..., delta] += np.asarray(model_state, np.float64)[delta]
    if robot.space == "aloha":
        actions = actions * _ALOHA_FLIP[: actions.shape[-1]]
        actions[..., _ALOHA_GRIPPERS] = _aloha_gripper_to_robot(actions[..., _ALOHA_GRIPPERS])
    if robot.space == "grip":
        actions = kinematics.top_down_joints(actions[..., :3], actions[..., 3], actions[..., 4])
    return actions.astype(np.float32)


def actions_to_model(
    robot: RobotConfig, actions: np.ndarray, model_state: np.ndarray
) -> np.ndarray:
    """Robot commands [..., H, A] -> unnormalised model actions: `actions_to_robot` undone.

    model_state: `state_to_model` of the state the deltas are to be relative to ([S], or
    [..., S] with one state per chunk, for training targets).
    """
    actions = np.array(actions, np.float64)
    if robot.space == "aloha":
        actions[..., _ALOHA_GRIPPERS] = _aloha_gripper_from_robot(actions[..., _ALOHA_GRIPPERS])
        actions = actions * _ALOHA_FLIP[: actions.shape[-1]]  # the flip is its own inverse
    if robot.space == "grip":
        actions = _joints_to_grip(actions)
    if robot.delta_actions:
        delta = list(robot.delta_actions)
        actions[..., delta] -= np.asarray(model_state, np.float64)[..., None, delta]
    return actions.astype(np.float32)


def _joints_to_grip(joints: np.ndarray) -> np.ndarray:
    """Tabletop arm joints [..., 7] -> [..., 5]: grip point, joint_6 (the tool roll),
    opening. The exact inverse of `kinematics.top_down_joints` for top-down poses in reach;
    of any other pose it keeps where the grip point is, not how the arm holds it."""
    joints = np.asarray(joints, np.float64)
    return np.concatenate([kinematics.grip_points(joints), joints[..., 5:7]], axis=-1)


def _aloha_gripper_to_model(linear01: np.ndarray) -> np.ndarray:
    """The runtime's normalised linear gripper position -> normalised gripper angle."""
    position = _LINEAR_RANGE[0] + linear01 * (_LINEAR_RANGE[1] - _LINEAR_RANGE[0])
    # The inverse of the linkage's angle-to-position relation (law of cosines).
    sine = (_HORN_RADIUS**2 + position**2 - _ARM_LENGTH**2) / (2 * _HORN_RADIUS * position)
    radians = np.arcsin(np.clip(sine, -1.0, 1.0))
    return (radians - _ANGULAR_RANGE[0]) / (_ANGULAR_RANGE[1] - _ANGULAR_RANGE[0])


def _aloha_gripper_to_robot(model01: np.ndarray) -> np.ndarray:
    """The model's gripper action -> the runtime's normalised gripper joint command."""
    radians = model01 + _ANGULAR_RANGE[0]
    low, high = _RUNTIME_ANGLE_RANGE
    return (radians - low) / (high - low)


def _aloha_gripper_from_robot(command01: np.ndarray) -> np.ndarray:
    """The inverse of `_aloha_gripper_to_robot` (both affine)."""
    low, high = _RUNTIME_ANGLE_RANGE
    return command01 * (high - low) + low - _ANGULAR_RANGE[0]
