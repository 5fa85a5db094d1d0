"""Policy: robot observations in, model inputs out, checked at the boundary.

A robot hands over uint8 images of any size, a state in its own units and an instruction.
Bad data must stop here with an ObservationError that names the field, never reach the
model as NaNs or wrong shapes; good data must arrive exactly as pi0.5 was trained to see
it: images resized with pad into [-1, 1], the normalised state as 256-bin integers in the
prompt, missing cameras masked.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from oxygen_core.config import BOS_ID, IMAGE_SLOTS, PAD_ID, RobotConfig
from oxygen_core.model import pi05
from oxygen_core.model.normalize import NormStats, Stats
from oxygen_core.observation import Observation, ObservationError
from oxygen_core.policy import Policy, load_policy

BASE, LEFT, RIGHT = IMAGE_SLOTS
STATE_DIM = 7  # the demo robot


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(preset="tiny", robot="demo")


def image(height: int, width: int, value: int | None = None) -> np.ndarray:
    if value is not None:
        return np.full((height, width, 3), value, np.uint8)
    return np.random.default_rng(height * width).integers(0, 256, (height, width, 3), np.uint8)


def good_observation(**changes) -> Observation:
    size = 56
    obs = Observation(
        images={BASE: image(size, size), LEFT: image(size, size)},
        state=np.zeros(STATE_DIM, np.float32),
        prompt="pick up the cup",
    )
    return dataclasses.replace(obs, **changes)


BAD = {
    "float image": (
        {"images": {BASE: np.zeros((56, 56, 3), np.float32)}},
        r"image 'base_0_rgb' must be uint8 \[H, W, 3\], got float32 \(56, 56, 3\)",
    ),
    "mono image": (
        {"images": {BASE: np.zeros((56, 56), np.uint8)}},
        r"image 'base_0_rgb' must be uint8 \[H, W, 3\], got uint8 \(56, 56\)",
    ),
    "rgba image": (
        {"images": {LEFT: np.zeros((56, 56, 4), np.uint8)}},
        r"image 'left_wrist_0_rgb' must be uint8 \[H, W, 3\], got uint8 \(56, 56, 4\)",
    ),
    "empty image": ({"images": {BASE: np.zeros((0, 56, 3), np.uint8)}}, r"is empty: \(0, 56, 3\)"),
    "unknown slot": (
        {"images": {"top_rgb": image(56, 56)}},
        r"image slot 'top_rgb' is not one of the model's slots",
    ),
    "nan state": (
        {"state": np.asarray([0, 0, np.nan, 0, 0, 0, 0], np.float32)},
        r"state has non-finite values at indices \[2\]",
    ),
    "inf state": (
        {"state": np.asarray([np.inf, 0, 0, 0, 0, 0, -np.inf], np.float32)},
        r"state has non-finite values at indices \[0, 6\]",
    ),
    "short state": (
        {"state": np.zeros(6, np.float32)},
        r"state must have shape \(7,\), got \(6,\)",
    ),
    "empty prompt": ({"prompt": " \n\t"}, "prompt is empty"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_observations_raise_a_clear_error(policy: Policy, case: str):
    changes, message = BAD[case]
    with pytest.raises(ObservationError, match=message):
        policy.prefix_inputs(good_observation(**changes))


def test_a_camera_the_robot_lacks_is_refused():
    """LIBERO has two cameras: a right-wrist image is an error, not silently used."""
    libero = load_policy(preset="tiny", robot="libero")
    obs = good_observation(images={RIGHT: image(56, 56)}, state=np.zeros(8, np.float32))
    with pytest.raises(ObservationError, match="'right_wrist_0_rgb' is not one of"):
        libero.prefix_inputs(obs)


def test_images_of_any_size_are_resized_with_pad(policy: Policy):
    base = image(56, 56)
    obs = good_observation(images={BASE: base, LEFT: image(30, 60, value=255)})
    inputs = policy.prefix_inputs(obs)
    images = np.asarray(inputs.images)
    assert images.shape == (1, 3, 56, 56, 3)
    np.testing.assert_array_equal(inputs.image_mask, [[True, True, False]])
    # The model-size image is only scaled to [-1, 1].
    np.testing.assert_allclose(images[0, 0], base / 127.5 - 1.0, atol=1e-6)
    # 30x60 white fits the width: 28 rows of 1.0 centred at rows 14..41, black (-1) around.
    left = images[0, 1]
    assert np.all(left[14:42] == 1.0)
    assert np.all(left[:14] == -1.0) and np.all(left[42:] == -1.0)
    # A tall 100x20 image: 11 columns at 22..32.
    tall = policy.prefix_inputs(good_observation(images={BASE: image(100, 20, value=255)}))
    column_on = np.asarray(tall.images)[0, 0, 28, :, 0] == 1.0
    assert np.flatnonzero(column_on).tolist() == list(range(22, 33))
    # The missing camera is masked; its pixels never reach the outputs (test_model).
    assert not np.any(np.asarray(tall.image_mask)[0, 1:])


def mid_bin(bins: list[int]) -> np.ndarray:
    """Normalised values at the centre of each 256-bin (bin b covers -1 + [b, b+1]/128)."""
    return np.asarray([-1.0 + (b + 0.5) / 128 for b in bins], np.float32)


def test_state_is_normalised_and_discretised_into_the_prompt(policy: Policy):
    q01 = np.asarray([0.0, -1.0, 10.0, -5.0, 0.0, 0.0, 0.0], np.float32)
    q99 = np.asarray([2.0, 3.0, 20.0, 5.0, 1.0, 1.0, 1.0], np.float32)
    state_stats = Stats(q01=q01, q99=q99, mean=(q01 + q99) / 2, std=q99 - q01)
    scaled = dataclasses.replace(policy, norm=NormStats(state_stats, policy.norm.actions))
    state = state_stats.unnormalize(mid_bin([0, 37, 128, 200, 255, 0, 0]))
    state[5], state[6] = -4.0, 9.0  # outside [q01, q99]: openpi's bins -1 and 255
    obs = good_observation(state=state, prompt="  pick_up the red cup\n")
    inputs = scaled.prefix_inputs(obs)
    tokens, mask = np.asarray(inputs.tokens)[0], np.asarray(inputs.token_mask)[0]
    n = int(mask.sum())
    assert mask.tolist() == [True] * n + [False] * (len(mask) - n)
    assert tokens[0] == BOS_ID and np.all(tokens[n:] == PAD_ID)
    text = scaled.tokenizer.decode(tokens[:n].tolist())
    assert text == "Task: pick up the red cup, State: 0 37 128 200 255 -1 255;\nAction: "


def test_noise_is_a_pure_function_of_the_seed(policy: Policy):
    a, b = policy.noise(seed=(4, 2), batch=3), policy.noise(seed=(4, 2), batch=3)
    assert a.shape == (3, policy.config.action_horizon, 32)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, policy.noise(seed=(4, 3), batch=3))
    assert 0.8 < float(np.std(np.asarray(a))) < 1.2


def test_robot_overrides_reach_the_model():
    """A robot's horizon and prompt budget change the model's shapes end to end."""
    robot = RobotConfig(
        "arm", cameras=(BASE,), action_dim=5, state_dim=3, action_horizon=6, max_token_len=32
    )
    arm = load_policy(preset="tiny", robot=robot)
    assert arm.config.prefix_len == 3 * 16 + 32
    obs = Observation(images={BASE: image(40, 70)}, state=np.zeros(3), prompt="wave")
    inputs = arm.prefix_inputs(obs)
    assert inputs.tokens.shape == (1, 32)
    cache = pi05.prefill(arm.params, arm.config, inputs)
    assert cache.mask.shape == (1, arm.config.prefix_len)
    actions = pi05.denoise(arm.params, arm.config, cache, arm.noise(seed=0), 2)
    actions = jax.block_until_ready(actions)
    assert actions.shape == (1, 6, 32)
    assert arm.robot_actions(np.asarray(actions), obs.state).shape == (1, 6, 5)


def test_instruction_that_cannot_fit_the_prompt_is_named(policy: Policy):
    """tiny's prompt holds 48 tokens; the demo robot's 7 state bins take up to 21 of them."""
    assert policy.instruction_problem("pick up the red block") is None
    words = "pick up the red block and put it in the bowl " * 3
    need = policy.tokenizer.prompt_len_bound(words, STATE_DIM)
    assert need > 48
    assert policy.instruction_problem(words) == (
        f"instruction needs up to {need} prompt tokens with the state, over the model's "
        "max_token_len=48"
    )
    longest = max(len(policy.tokenizer.prompt_ids(words, np.full(STATE_DIM, v))) for v in (-1, 0))
    assert longest <= need
