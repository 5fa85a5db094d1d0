"""The ALOHA env (oxygen_core.aloha.env): seeded resets, joint targets held, malformed
targets refused before MuJoCo, the episode limit, the cameras, and agreement with gym-aloha's
own gymnasium env stepped with the same targets.

gym-aloha (and dm_control) come from requirements.txt; a machine without them skips this
module. MuJoCo renders headless through EGL; the camera test is skipped where EGL is
missing.
"""

from __future__ import annotations

import pytest

pytest.importorskip("gym_aloha")

import numpy as np  # noqa: E402
from gym_aloha.constants import START_ARM_POSE  # noqa: E402
from gym_aloha.utils import sample_box_pose  # noqa: E402

from oxygen_core.aloha.env import (  # noqa: E402
    CAMERAS,
    GRIPPERS,
    JOINT_NAMES,
    AlohaEnv,
    object_poses,
)


def egl_missing() -> str | None:
    """Why MuJoCo cannot render headless here (None: it can)."""
    try:
        from mujoco.egl import GLContext

        GLContext(16, 16).free()
    except Exception as error:  # no library, no device: every kind means no rendering
        return f"MuJoCo's EGL rendering is unavailable: {type(error).__name__}: {error}"
    return None


@pytest.fixture(scope="module")
def env():
    env = AlohaEnv("transfer_cube")
    yield env
    env.close()


def test_a_seed_places_the_objects_as_gym_aloha_does_and_leaves_numpys_rng_alone(env):
    state = np.random.get_state()[1].copy()
    env.reset(7)
    first = env.objects()
    env.step(env.joints())
    env.reset(7)
    np.testing.assert_array_equal(env.objects(), first)
    np.testing.assert_array_equal(first, sample_box_pose(7))
    env.reset(8)
    assert np.abs(env.objects()[:2] - first[:2]).max() > 1e-3
    np.testing.assert_array_equal(np.random.get_state()[1], state)


def test_the_reset_starts_the_arms_at_gym_alohas_start_pose(env):
    step = env.reset(0)
    arms = [i for i in range(len(JOINT_NAMES)) if i not in GRIPPERS]
    expected = np.delete(np.array(START_ARM_POSE), [7, 15])  # one finger per gripper
    np.testing.assert_allclose(step.joints[arms], expected[arms])
    assert step.steps == 0 and not step.success
    assert object_poses("insertion", 0).shape == (14,)


def test_the_arms_converge_to_commanded_joint_targets(env):
    start = env.reset(0).joints
    target = start + [0.3, 0.2, -0.3, 0.4, 0.3, -0.5, 0.5, -0.3, 0.1, -0.2, -0.4, 0.2, 0.5, 0.3]
    for _ in range(75):
        step = env.step(target)
    arms = [i for i in range(len(JOINT_NAMES)) if i not in GRIPPERS]
    assert np.abs(step.joints[arms] - target[arms]).max() < 0.02  # rad
    assert np.abs(step.joints[list(GRIPPERS)] - target[list(GRIPPERS)]).max() < 0.03
    assert step.steps == 75


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (np.zeros(13), "shape"),
        (np.zeros((2, 14)), "shape"),
        (np.full(14, np.nan), "NaN or inf"),
        (np.r_[np.zeros(13), np.inf], "NaN or inf"),
        (["a"] * 14, "not numbers"),
    ],
)
def test_malformed_targets_raise_one_line_and_leave_the_sim_untouched(env, targets, message):
    env.reset(0)
    time = env.physics.data.time
    with pytest.raises(ValueError, match=message) as error:
        env.step(targets)
    assert "\n" not in str(error.value)
    assert env.physics.data.time == time and env.steps == 0


def test_the_episode_limit_and_stepping_before_a_reset_are_errors():
    env = AlohaEnv("insertion", max_steps=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(14))
    start = env.reset(0).joints
    env.step(start)
    env.step(start)
    with pytest.raises(RuntimeError, match="limit of 2 steps"):
        env.step(start)


def test_unknown_task_and_camera_are_clear_errors(env):
    with pytest.raises(ValueError, match="unknown ALOHA task 'peg'"):
        AlohaEnv("peg")
    with pytest.raises(ValueError, match="unknown camera 'side'"):
        env.render("side")


@pytest.mark.skipif(egl_missing() is not None, reason=egl_missing() or "")
def test_cameras_render_the_scene_at_the_asked_size(env):
    env.reset(0)
    top = env.render("top", 64)
    assert top.shape == (64, 64, 3) and top.dtype == np.uint8
    assert top.std() > 10  # the table, the arms and the cube, not a blank frame
    wrist = env.render("left_wrist", (48, 80))
    assert wrist.shape == (48, 80, 3) and wrist.std() > 1
    assert set(CAMERAS) >= {"top", "angle", "left_wrist", "right_wrist"}


def test_steps_match_gym_alohas_own_env_with_the_same_targets(env):
    """The reference renders three 640 x 480 cameras a step, so a few steps only."""
    gymnasium = pytest.importorskip("gymnasium")
    import gym_aloha  # noqa: F401  (registers the envs)

    reference = gymnasium.make("gym_aloha/AlohaTransferCube-v0", obs_type="pixels_agent_pos")
    observation, _ = reference.reset(seed=3)
    np.testing.assert_array_equal(env.reset(3).joints, observation["agent_pos"])
    rng = np.random.default_rng(0)
    for _ in range(3):
        targets = observation["agent_pos"] + rng.normal(0.0, 0.1, 14)
        observation, reward, *_ = reference.step(targets)
        step = env.step(targets)
        np.testing.assert_allclose(step.joints, observation["agent_pos"], atol=1e-12)
        assert step.reward == reward
    reference.close()


@pytest.mark.skipif(egl_missing() is not None, reason=egl_missing() or "")
def test_the_top_camera_shows_the_cube_several_pixels_wide(env):
    """The narrowed top camera (TOP_FOVY): at the 64 x 48 a CPU policy takes, the red cube
    covers at least 9 pixels (2 px wide, about 4, at the scene's own 78 degrees)."""
    env.reset(0)
    top = env.render("top", (48, 64)).astype(int)
    red = (top[..., 0] > 150) & (top[..., 1] < 100) & (top[..., 2] < 100)
    assert red.sum() >= 9, red.sum()
