"""Per-robot steps around normalisation, as each openpi checkpoint was trained.

openpi's training configs fix, per robot: the horizon, whether the state is in the
prompt, which action dimensions are deltas to the state, and (ALOHA) a joint space of its
own. A checkpoint run without the same steps gives wrong commands, so they are checked
here on the presets and on a loaded policy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oxygen_core import robot_io
from oxygen_core.config import BOS_ID, IMAGE_SLOTS, ROBOT_PRESETS, RobotConfig, robot_preset
from oxygen_core.model.normalize import NormStats, Stats
from oxygen_core.observation import Observation
from oxygen_core.policy import load_policy
from oxygen_core.sim import arm

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
    state[[6, 13]] = [0.026, 0.05]  # finger positions (m), as the Interbotix driver reports
    model_state = robot_io.state_to_model(ALOHA, state)
    assert np.allclose(model_state[[1, 2, 8, 9]], -state[[1, 2, 8, 9]], atol=1e-6)
    commands = robot_io.actions_to_robot(ALOHA, np.zeros((3, 14)), model_state)
    np.testing.assert_allclose(commands[:, JOINTS], np.tile(state[JOINTS], (3, 1)), atol=1e-6)


def test_aloha_grippers_are_absolute_not_deltas():
    model_state = robot_io.state_to_model(ALOHA, np.full(14, 0.03))
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
    [
        ({"space": "ur5"}, "space 'ur5'"),
        ({"delta_actions": (7,)}, r"outside \[0, 6\)"),
        ({"delta_actions": (1, 1)}, "repeats a dimension"),
        ({"space": "aloha"}, "space 'aloha' needs action_dim and state_dim 14, got 6 and 6"),
        ({"space": "grip"}, "space 'grip' needs action_dim and state_dim 7"),
        ({"cameras": ("wrist",)}, r"cameras \['wrist'\] must be some of"),
        ({"cameras": ()}, r"cameras \[\] must be some of"),
    ],
)
def test_bad_robot_settings_are_refused(changes, message):
    arm = {"name": "arm", "cameras": IMAGE_SLOTS[:1], "action_dim": 6, "state_dim": 6}
    with pytest.raises(ValueError, match=message):
        RobotConfig(**{**arm, **changes})


def random_norm(dims: int, seed: int) -> NormStats:
    """Quantiles far from identity, so a missed (un)normalisation shows."""
    rng = np.random.default_rng(seed)
    q01 = rng.uniform(-3.0, 1.0, dims).astype(np.float32)
    q99 = (q01 + rng.uniform(0.5, 4.0, dims)).astype(np.float32)
    stats = Stats(q01=q01, q99=q99, mean=0 * q01, std=1 + 0 * q01)
    return NormStats(state=stats, actions=stats)


@pytest.mark.parametrize("name", sorted(n for n, r in ROBOT_PRESETS.items() if r.space != "grip"))
def test_model_actions_inverts_robot_actions_for_every_robot(name):
    """Real-time chunking turns the chunk in execution back into the model's space: the
    exact inverse, relative to whichever state the deltas are taken from."""
    policy = dataclasses.replace(load_policy("tiny", name), norm=random_norm(32, 3))
    robot, horizon = policy.robot, policy.config.action_horizon
    rng = np.random.default_rng(7)
    states = rng.uniform(-1.0, 1.0, (2, robot.state_dim)).astype(np.float32)
    if robot.space == "aloha":
        states[:, [6, 13]] = rng.uniform(0.02, 0.055, (2, 2))  # finger positions (m)
    raw = rng.uniform(-1.0, 1.0, (horizon, 32)).astype(np.float32)
    commands = policy.robot_actions(raw, states[0])
    back = policy.model_actions(commands, states[0])
    if robot.gripper_threshold or robot.action_clip:  # they lose what they cut...
        np.testing.assert_allclose(policy.robot_actions(back, states[0]), commands, atol=2e-5)
        return  # ...and leave what they let through as it was
    np.testing.assert_allclose(back[:, : robot.action_dim], raw[:, : robot.action_dim], atol=2e-5)
    np.testing.assert_array_equal(back[:, robot.action_dim :], 0.0)
    # Relative to a new state, the commands are the same commands.
    again = policy.robot_actions(policy.model_actions(commands, states[1]), states[1])
    np.testing.assert_allclose(again, commands, atol=2e-5)
    moved = np.abs(policy.model_actions(commands, states[1]) - back).max(axis=0)
    deltas = list(robot.delta_actions)
    assert np.all(moved[deltas] > 1e-3)  # deltas are re-taken from the new state...
    absolute = [i for i in range(robot.action_dim) if i not in deltas]
    np.testing.assert_array_equal(moved[absolute], 0.0)  # ...absolute dims are not


GRIP = robot_preset("sim_grip")


def top_down_commands(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Joint commands [rows, 7] of top-down poses inside the sim arm's reach."""
    points = np.stack(
        [rng.uniform(0.25, 0.55, rows), rng.uniform(-0.3, 0.3, rows), rng.uniform(0.0, 0.3, rows)],
        axis=-1,
    )
    return np.array(
        [arm.inverse_top_down(p, rng.uniform(0, np.pi), rng.uniform(0, 1)) for p in points]
    )


def test_grip_space_is_the_grip_point_roll_and_opening():
    rng = np.random.default_rng(2)
    state = top_down_commands(rng, 1)[0]
    model_state = robot_io.state_to_model(GRIP, state)
    assert GRIP.model_dims == 5 and model_state.shape == (5,)
    np.testing.assert_allclose(model_state[:3], arm.forward(state).grip, atol=1e-6)
    np.testing.assert_allclose(model_state[3:], state[5:], atol=1e-6)  # roll, opening


def test_a_zero_grip_delta_holds_the_grip_point_top_down():
    rng = np.random.default_rng(3)
    state = top_down_commands(rng, 1)[0]
    actions = np.zeros((4, 5))
    actions[:, 4] = [0.0, 0.3, 0.6, 1.0]  # the opening is absolute
    commands = robot_io.actions_to_robot(GRIP, actions, robot_io.state_to_model(GRIP, state))
    np.testing.assert_allclose(commands[:, :6], np.tile(state[:6], (4, 1)), atol=1e-5)
    np.testing.assert_allclose(commands[:, 6], actions[:, 4], atol=1e-7)


def test_grip_space_inverts_top_down_commands_relative_to_any_state():
    """What real-time chunking needs of the grip space: a chunk of top-down commands, taken
    into the model's space relative to a new state and back, is the same chunk."""
    policy = dataclasses.replace(load_policy("tiny", "sim_grip"), norm=random_norm(32, 3))
    rng = np.random.default_rng(5)
    commands = top_down_commands(rng, policy.config.action_horizon).astype(np.float32)
    states = top_down_commands(rng, 2).astype(np.float32)
    model = [policy.model_actions(commands, s) for s in states]
    for s, m in zip(states, model, strict=True):
        np.testing.assert_allclose(policy.robot_actions(m, s), commands, atol=2e-5)
        np.testing.assert_array_equal(m[:, 5:], 0.0)  # past the space's five dims
    moved = np.abs(model[1] - model[0]).max(axis=0)
    assert np.all(moved[:4] > 1e-3) and moved[4] == 0.0  # point and roll re-taken; opening not
