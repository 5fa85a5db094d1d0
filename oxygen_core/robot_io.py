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

Around these sits what the robot's runtime does (openpi's clients, which the node
replaces; `RobotConfig`'s fields from action_space on): the measured gripper joint mapped
to the runtime's 0..1 on the way in; on the way out the gripper binarised at
gripper_threshold, every action clipped to [-action_clip, action_clip], joint velocities
scaled to rad/s, and the gripper's 0..1 spread over its command's range.

Flow: robot state -> `state_to_model` (measured units -> the runtime's -> the checkpoint's)
-> normalise (prompt); model actions -> unnormalise -> `actions_to_robot` (deltas made
absolute with the state in model space, encoded for the runtime, then as the controller
takes them). `actions_to_model` inverts it, except for the threshold and the clip, which
lose what they cut: real-time chunking turns the chunk the robot is executing back into
the model's space, relative to the NEW state.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    """Robot state [D] (float, as measured) -> the checkpoint's state space, before
    normalisation."""
    state = np.array(state, np.float64)
    if robot.gripper_state_range:
        grippers = list(robot.gripper_dims)
        state[grippers] = _unspread(state[grippers], robot.gripper_state_range)
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
    return _runtime_to_command(robot, actions).astype(np.float32)


def actions_to_model(
    robot: RobotConfig, actions: np.ndarray, model_state: np.ndarray
) -> np.ndarray:
    """Robot commands [..., H, A] -> unnormalised model actions: `actions_to_robot` undone.

    model_state: `state_to_model` of the state the deltas are to be relative to ([S], or
    [..., S] with one state per chunk, for training targets).
    """
    actions = _command_to_runtime(robot, np.array(actions, np.float64))
    if robot.space == "aloha":
        actions[..., _ALOHA_GRIPPERS] = _aloha_gripper_from_robot(actions[..., _ALOHA_GRIPPERS])
        actions = actions * _ALOHA_FLIP[: actions.shape[-1]]  # the flip is its own inverse
    if robot.space == "grip":
        actions = _joints_to_grip(actions)
    if robot.delta_actions:
        delta = list(robot.delta_actions)
        actions[..., delta] -= np.asarray(model_state, np.float64)[..., None, delta]
    return actions.astype(np.float32)


def neutral_state(robot: RobotConfig) -> np.ndarray:
    """A state the robot can report, float32 [state_dim]: zeros, the grippers mid-range
    (ALOHA's finger at 0 m would be no position at all). Warm-up and shape checks use it."""
    state = np.zeros(robot.state_dim, np.float32)
    state[list(robot.gripper_dims)] = np.mean(robot.gripper_state_range or (0.0, 1.0))
    return state


# How far past its range a gripper may read, as a share of the range, before the state is
# taken to be in other units: a gripper squeezing past its closed mark reads a little out.
GRIPPER_MARGIN = 0.25


def gripper_problem(robot: RobotConfig, state: np.ndarray, names: Sequence[str]) -> str | None:
    """Why the measured state cannot be this robot's (a gripper far outside the range its
    runtime normalises over, as a joint reported in other units would be); None if it can.
    names: the state's joint names, for the message."""
    if not robot.gripper_dims:
        return None
    span = robot.gripper_state_range or (0.0, 1.0)
    for dim in robot.gripper_dims:
        value01 = _unspread(float(state[dim]), span)
        if not -GRIPPER_MARGIN <= value01 <= 1 + GRIPPER_MARGIN:
            return (
                f"gripper {names[dim]} reads {float(state[dim]):.4g}, far outside the range "
                f"[{span[0]}, {span[1]}] robot {robot.name!r} expects (another unit?)"
            )
    return None


def _runtime_to_command(robot: RobotConfig, actions: np.ndarray) -> np.ndarray:
    """The runtime's actions [..., A] -> what the controller takes, as the robot's runtime
    sends them: gripper threshold, clip, velocity scale, gripper command range."""
    grippers = list(robot.gripper_dims)
    if robot.gripper_threshold:
        actions[..., grippers] = (actions[..., grippers] > robot.gripper_threshold).astype(float)
    if robot.action_clip:
        actions = np.clip(actions, -robot.action_clip, robot.action_clip)
    if robot.velocity_scale:
        actions[..., _joint_dims(robot, actions)] *= robot.velocity_scale
    if robot.gripper_command_range:
        actions[..., grippers] = _spread(actions[..., grippers], robot.gripper_command_range)
    return actions


def _command_to_runtime(robot: RobotConfig, actions: np.ndarray) -> np.ndarray:
    """`_runtime_to_command` undone, but for the threshold and the clip."""
    if robot.gripper_command_range:
        grippers = list(robot.gripper_dims)
        actions[..., grippers] = _unspread(actions[..., grippers], robot.gripper_command_range)
    if robot.velocity_scale:
        actions[..., _joint_dims(robot, actions)] /= robot.velocity_scale
    return actions


def _joint_dims(robot: RobotConfig, actions: np.ndarray) -> list[int]:
    """The action dims that are not grippers."""
    return [i for i in range(actions.shape[-1]) if i not in robot.gripper_dims]


def _spread(value01: np.ndarray, span: tuple[float, ...]) -> np.ndarray:
    """A runtime value in 0..1 -> the unit whose values at 0 and 1 are `span`."""
    return span[0] + value01 * (span[1] - span[0])


def _unspread(value: np.ndarray, span: tuple[float, ...]) -> np.ndarray:
    """The inverse of `_spread`."""
    return (value - span[0]) / (span[1] - span[0])


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
