"""The weights a training run starts from (`oxygen_core.train.init`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from oxygen_core.config import model_preset, robot_preset
from oxygen_core.model import pi05
from oxygen_core.model import weights as P
from oxygen_core.train import cli
from oxygen_core.train.init import POSITION, sincos_2d, training_params

CFG = robot_preset("sim").apply(model_preset("tiny"))


def test_sincos_2d_reads_row_then_column_in_patch_order():
    emb = sincos_2d(grid=3, width=8, temperature=100.0)
    omega = np.array([1.0, 0.1])  # 1 / 100 ** (k / 2)
    row, col = 2, 1
    expected = np.concatenate(
        [np.sin(row * omega), np.cos(row * omega), np.sin(col * omega), np.cos(col * omega)]
    )
    np.testing.assert_allclose(emb[row * 3 + col], expected, rtol=1e-12)
    assert emb.shape == (9, 8)
    assert len({tuple(np.round(e, 9)) for e in emb}) == 9  # every patch its own


def test_sincos_2d_needs_a_width_divisible_by_four():
    with pytest.raises(ValueError, match="divisible by 4"):
        sincos_2d(4, 10)


def test_training_params_keep_the_matrices_and_reset_norms_gates_and_positions():
    random = P.flatten(P.init_params(CFG, seed=3))
    fresh = P.flatten(training_params(CFG, seed=3))
    assert {k: np.shape(v) for k, v in fresh.items()} == {k: np.shape(v) for k, v in random.items()}
    grid = CFG.vision.image_size // CFG.vision.patch_size
    np.testing.assert_array_equal(
        fresh[POSITION][0], sincos_2d(grid, CFG.vision.width).astype(np.float32)
    )
    for path, value in fresh.items():
        if path.startswith("PaliGemma/img/") and path.endswith("/scale"):
            assert np.all(value == 1), path  # LayerNorm: x * scale
        elif path.startswith("PaliGemma/img/") and path.endswith("/bias"):
            assert np.all(value == 0), path
        elif path.startswith("PaliGemma/llm/") and ("/Dense_0/" in path or path.endswith("scale")):
            assert np.all(value == 0), path  # RMSNorm x * (1 + scale); adaRMS zero
        elif path != POSITION:
            np.testing.assert_array_equal(value, random[path], err_msg=path)


@pytest.mark.parametrize("init", cli.INITS)
def test_oxygen_train_starts_from_the_init_it_is_told(init: str):
    args = cli._train_parser().parse_args(
        ["--out", "unused", "--weights-init", init, "--seed", "3"]
    )
    fresh = training_params if init == "training" else P.init_params
    expected = P.to_runtime(fresh(CFG, 3))
    got = cli.initial_params(CFG, args, cli.base_policy(args))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(a, b)


def test_oxygen_train_defaults_to_the_training_init():
    assert cli._train_parser().parse_args(["--out", "unused"]).weights_init == "training"


def test_the_action_expert_starts_as_the_identity_on_its_stream():
    """adaRMS gates 0: no block writes to the action tokens, so the first velocity depends
    on neither the observation nor the time; the VLM's prefix still sees the images."""
    params = P.to_runtime(training_params(CFG))
    b, h, a = 1, CFG.action_horizon, CFG.action_dim
    x = jax.random.normal(jax.random.key(0), (b, h, a))

    def velocity(seed: int, t: float) -> jax.Array:
        prefix = _prefix(seed)
        cache = pi05.prefill(params, CFG, prefix)
        return pi05.velocity(params, CFG, cache, x, jnp.full((b,), t))

    v = velocity(0, 0.9)
    np.testing.assert_allclose(velocity(1, 0.9), v, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(velocity(0, 0.2), v, rtol=1e-6, atol=1e-6)
    keys = [pi05.prefill(params, CFG, _prefix(seed)).kv[-1][0] for seed in (0, 1)]
    assert not np.allclose(keys[0], keys[1])


def _prefix(seed: int) -> pi05.PrefixInputs:
    rng = np.random.default_rng(seed)
    n, s = CFG.num_images, CFG.vision.image_size
    return pi05.PrefixInputs(
        images=jnp.asarray(rng.uniform(-1, 1, (1, n, s, s, 3)), jnp.float32),
        image_mask=jnp.ones((1, n), bool),
        tokens=jnp.asarray(rng.integers(3, 100, (1, CFG.max_token_len)), jnp.int32),
        token_mask=jnp.ones((1, CFG.max_token_len), bool),
    )
