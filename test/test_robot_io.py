"""Per-robot steps around normalisation, as each openpi checkpoint was trained.

openpi's training configs fix, per robot: the horizon, whether the state is in the
prompt, which action dimensions are deltas to the state, and (ALOHA) a joint space of its
own. A checkpoint run without the same steps gives wrong commands, so they are checked
here on the presets and on a loaded policy.
"""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_core import robot_io
from oxygen_core.config import BOS_ID, IMAGE_SLOTS, RobotConfig, robot_preset
from oxygen_core.observation import Observation
from oxygen_core.policy import load_policy

ALOHA = robot_preset("aloha")
JOINTS = [i for i in range(14) if i not in (6, 13)]


def test_presets_carry_the_checkpoints_training_settings():
    libero, droid = robot_preset("libero"), robot_preset("droid")
    assert (libero.action_horizon, libero.discrete_state) == (10, False)  # pi05_libero
    assert (droid.action_horizon, droid.discrete_state, droid.delta_actions) == (15, True, ())
    assert (ALOHA.action_horizon, ALOHA.space) == (50, "aloha")
    assert ALOHA.delta_actions == tuple(JOINTS)  # both arms' joints; grippers absolute


def test_libero_prompt_has_no_state():
    policy = load_policy("tiny", "libero")
    image = np.zeros((8, 8, 3), np.uint8)
    obs = Observation(
        images={IMAGE_SLOTS[0]: image, IMAGE_SLOTS[1]: image},
        state=np.full(8, 0.3, np.float32),
        prompt="pick up the bowl",
    )
    inputs = policy.prefix_inputs(obs)
    n = int(inputs.token_mask[0].sum())
    ids = inputs.tokens[0, :n].tolist()
    assert ids[0] == BOS_ID
    assert policy.tokenizer.decode(ids) == "pick up the bowl\n"


def test_a_zero_aloha_delta_commands_the_current_joints():
    """Deltas are added in openpi's mirrored joint space; mirroring back gives the pose."""
    rng = np.random.default_rng(0)
    state = rng.uniform(-1.0, 1.0, 14)
    state[[6, 13]] = [0.2, 0.9]  # normalised gripper openings
    model_state = robot_io.state_to_model(ALOHA, state)
    assert np.allclose(model_state[[1, 2, 8, 9]], -state[[1, 2, 8, 9]], atol=1e-6)
    commands = robot_io.actions_to_robot(ALOHA, np.zeros((3, 14)), model_state)
    np.testing.assert_allclose(commands[:, JOINTS], np.tile(state[JOINTS], (3, 1)), atol=1e-6)


def test_aloha_grippers_are_absolute_not_deltas():
    model_state = robot_io.state_to_model(ALOHA, np.zeros(14))
    actions = np.zeros((2, 14))
    actions[:, [6, 13]] = [[0.0, 0.5], [1.0, 0.25]]
    commands = robot_io.actions_to_robot(ALOHA, actions, model_state)
    other = robot_io.actions_to_robot(ALOHA, actions, model_state + 3.0)
    np.testing.assert_array_equal(commands[:, [6, 13]], other[:, [6, 13]])  # not deltas
    assert commands[1, 6] > commands[0, 6] and commands[0, 13] > commands[1, 13]  # monotonic


def test_aloha_gripper_linkage_spans_the_runtime_joint_range():
    """Two sets of constants from different places (the linkage's lengths and the
    runtime's joint limits) must agree: fully closed is the runtime's closed angle."""
    closed = robot_io._aloha_gripper_to_model(np.array([0.0]))
    low, high = robot_io._ANGULAR_RANGE
    radians = closed * (high - low) + low
    assert radians[0] == pytest.approx(robot_io._RUNTIME_ANGLE_RANGE[0], abs=1e-3)
    opened = robot_io._aloha_gripper_to_model(np.array([1.0])) * (high - low) + low
    assert opened[0] == pytest.approx(np.pi / 2, abs=1e-6)  # the linkage fully extended


def test_robots_without_steps_pass_actions_through():
    demo = robot_preset("demo")
    actions = np.arange(12, dtype=np.float32).reshape(2, 6) / 7
    state = np.ones(6, np.float32)
    arm = RobotConfig("arm", cameras=IMAGE_SLOTS[:1], action_dim=6, state_dim=6)
    for robot in (demo, arm):
        assert robot.space == "robot" and robot.delta_actions == ()
    np.testing.assert_array_equal(robot_io.actions_to_robot(arm, actions, state), actions)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"space": "ur5"}, "space 'ur5'"), ({"delta_actions": (7,)}, r"outside \[0, 6\)")],
)
def test_bad_robot_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        RobotConfig("arm", cameras=IMAGE_SLOTS[:1], action_dim=6, state_dim=6, **changes)
