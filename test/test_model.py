"""pi0.5 in JAX (tiny preset): the cached paths compute the same function as the oracles.

The engine never runs `sample_actions` or `full_logits`; it runs `prefill` once and then
`denoise` and `extend` on the cache. These tests prove, on batches with a padded prompt
and a missing camera, that the cached paths equal the recomputing references, and that
the masks do what docs/DESIGN.md section 3 says: padding and missing cameras are invisible,
the prefix never sees the actions, rows of different ages batch together.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from oxygen_core.config import model_preset
from oxygen_core.model import gemma, pi05
from oxygen_core.model import weights as P

CFG = model_preset("tiny")
TOKEN_LENS = (30, 17)  # valid prompt tokens per row; the rest of the 48 is padding
IMAGE_MASK = ((True, False, True), (True, True, False))  # one missing camera per row
extend = jax.jit(pi05.extend, static_argnames="cfg")
velocity = jax.jit(pi05.velocity, static_argnames="cfg")


def random_inputs(seed: int) -> pi05.PrefixInputs:
    """A batch of two observations with padded prompts and a missing camera each."""
    k_img, k_tok = jax.random.split(jax.random.key(seed))
    size, n_img = CFG.vision.image_size, CFG.num_images
    images = jax.random.uniform(k_img, (2, n_img, size, size, 3), minval=-1.0, maxval=1.0)
    tokens = jax.random.randint(k_tok, (2, CFG.max_token_len), 3, CFG.vocab_size)
    token_mask = jnp.arange(CFG.max_token_len)[None, :] < jnp.asarray(TOKEN_LENS)[:, None]
    return pi05.PrefixInputs(
        images=images,
        image_mask=jnp.asarray(IMAGE_MASK),
        tokens=jnp.where(token_mask, tokens, 0).astype(jnp.int32),
        token_mask=token_mask,
    )


def row(inputs: pi05.PrefixInputs, i: int) -> pi05.PrefixInputs:
    return jax.tree.map(lambda a: a[i : i + 1], inputs)


def noise(seed: int, batch: int = 2) -> jax.Array:
    shape = (batch, CFG.action_horizon, CFG.action_dim)
    return jax.random.normal(jax.random.key(seed), shape)


@pytest.fixture(scope="module")
def tree() -> P.Tree:
    """Random weights in checkpoint layout whose VLM layers outweigh the embedding.

    With plain random init the sqrt(D)-scaled token embedding dominates the residual
    stream and the tied LM head greedily repeats the last token, which would make
    "greedy tokens identical" an empty claim. Scaling each VLM layer's output
    projections makes the layers, and so the cache, decide the next token.
    """
    amplified = ("attn/attn_vec_einsum/w", "mlp/linear")
    flat = P.flatten(P.init_params(CFG, seed=0))
    return P.unflatten({p: v * 32 if p.endswith(amplified) else v for p, v in flat.items()})


@pytest.fixture(scope="module")
def params(tree: P.Tree) -> P.Tree:
    return P.to_runtime(tree)


@pytest.fixture(scope="module")
def inputs() -> pi05.PrefixInputs:
    return random_inputs(seed=1)


def actions_from_cache(params, inputs, x, steps=3) -> jax.Array:
    return pi05.denoise(params, CFG, pi05.prefill(params, CFG, inputs), x, steps)


def first_logits(params, inputs, prompt=(5, 6, 7)) -> jax.Array:
    """Logits after a stream prompt appended to each row of the prefix (cached path)."""
    cache = pi05.prefill(params, CFG, inputs)
    rows = pi05.cache_rows(cache, CFG.prefix_len + len(prompt))
    b = inputs.tokens.shape[0]
    tokens = jnp.tile(jnp.asarray([prompt], jnp.int32), (b, 1))
    n = jnp.full((b,), len(prompt), jnp.int32)
    return extend(params, CFG, rows, cache.mask, jnp.zeros(b, jnp.int32), tokens, n)[1]


# ------------------------------------------------------------------------ language


@pytest.mark.slow  # ~9 s of CPU here, nearly all compiling (extend x2, full_logits x3)
def test_cached_decoding_equals_full_recomputation(params, inputs):
    """extend step by step == full_logits over prefix + extension, at every step."""
    prompts, steps = [[7, 8, 9], [10, 11]], 8
    max_new = 3 + steps
    cache = pi05.prefill(params, CFG, inputs)
    rows = pi05.cache_rows(cache, CFG.prefix_len + max_new)
    tokens = jnp.asarray([[7, 8, 9], [10, 11, 0]], jnp.int32)
    n_valid = jnp.asarray([3, 2], jnp.int32)
    ext_len = jnp.zeros(2, jnp.int32)
    seqs = [list(p) for p in prompts]
    for _ in range(steps):
        rows, logits = extend(params, CFG, rows, cache.mask, ext_len, tokens, n_valid)
        padded = jnp.asarray([s + [0] * (max_new - len(s)) for s in seqs], jnp.int32)
        lens = jnp.asarray([len(s) for s in seqs], jnp.int32)
        ref = pi05.full_logits(params, CFG, inputs, padded, lens, max_new)
        np.testing.assert_allclose(logits, ref, rtol=1e-5, atol=1e-5)
        greedy = np.asarray(jnp.argmax(logits, axis=-1))
        np.testing.assert_array_equal(greedy, np.asarray(jnp.argmax(ref, axis=-1)))
        for s, t in zip(seqs, greedy, strict=True):
            s.append(int(t))
        ext_len, n_valid = ext_len + n_valid, jnp.ones(2, jnp.int32)
        tokens = jnp.asarray(greedy[:, None], jnp.int32)
    # The batch-1 greedy oracle gives the same tokens for each row on its own.
    for i, prompt in enumerate(prompts):
        oracle = pi05.generate_text(params, CFG, row(inputs, i), prompt, steps)
        assert seqs[i][len(prompt) :] == oracle
    generated = {t for s, p in zip(seqs, prompts, strict=True) for t in s[len(p) :]}
    assert len(generated) > 2, "degenerate greedy text proves little"


def test_rows_of_different_ages_decode_together_as_alone(params, inputs):
    """Per-row positions and masks: a batched step == each row's step on its own, and
    rows of the pool beyond the batch are neither read nor written."""
    cache = pi05.prefill(params, CFG, inputs)
    # A pool of three rows; only the first two take part in the batch.
    pool = jax.tree.map(lambda a: jnp.concatenate([a, jnp.full_like(a[:1], 7)]), cache)
    rows = pi05.cache_rows(pool, CFG.prefix_len + 8)
    spare = [(k[2], v[2]) for k, v in rows]
    warm = jnp.asarray([[20, 21, 22, 23, 24], [30, 31, 0, 0, 0]], jnp.int32)
    rows, _ = extend(
        params, CFG, rows, cache.mask, jnp.zeros(2, jnp.int32), warm, jnp.asarray([5, 2], jnp.int32)
    )
    ext_len, step = jnp.asarray([5, 2], jnp.int32), jnp.asarray([[40], [41]], jnp.int32)
    one = jnp.ones(2, jnp.int32)
    together, logits = extend(params, CFG, rows, cache.mask, ext_len, step, one)
    for i in range(2):
        alone_rows = [(k[i : i + 1], v[i : i + 1]) for k, v in rows]
        alone, alone_logits = extend(
            params,
            CFG,
            alone_rows,
            cache.mask[i : i + 1],
            ext_len[i : i + 1],
            step[i : i + 1],
            one[:1],
        )
        np.testing.assert_allclose(logits[i], alone_logits[0], rtol=1e-6, atol=1e-6)
        for (k_b, v_b), (k_a, v_a) in zip(together, alone, strict=True):
            np.testing.assert_allclose(k_b[i], k_a[0], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(v_b[i], v_a[0], rtol=1e-6, atol=1e-6)
    for (k, v), (k_spare, v_spare) in zip(together, spare, strict=True):
        np.testing.assert_array_equal(k[2], k_spare)
        np.testing.assert_array_equal(v[2], v_spare)
    # The new token landed at each row's own slot: P + ext_len.
    slot = CFG.prefix_len + np.asarray(ext_len)
    for (k_new, _), (k_old, _) in zip(together, rows, strict=True):
        for i in range(2):
            changed = np.flatnonzero(np.any(np.asarray(k_new[i] != k_old[i]), axis=(1, 2)))
            assert changed.tolist() == [slot[i]]


# ------------------------------------------------------------------------ actions


@pytest.mark.parametrize("steps", [1, 3, 10])
def test_denoise_from_cached_prefix_equals_sample_actions(params, inputs, steps):
    x = noise(seed=2)
    cached = actions_from_cache(params, inputs, x, steps)
    ref = pi05.sample_actions(params, CFG, inputs, x, steps)
    np.testing.assert_allclose(cached, ref, rtol=1e-5, atol=1e-5)
    assert float(jnp.max(jnp.abs(cached - x))) > 0.1, "the flow must move the noise"


def joint_prefix_kv(params, inputs, x) -> pi05.LayerKV:
    """The prefix K/V of one joint pass over [prefix | action tokens], as sample_actions
    runs it (the prefix stream is the first expert, so run_layers returns its K/V)."""
    prefix, pmask = pi05.embed_prefix(params, CFG, inputs)
    b, p_len, horizon = x.shape[0], prefix.shape[1], x.shape[1]
    valid = jnp.concatenate([pmask, jnp.ones((b, horizon), bool)], axis=1)
    mask = pi05.make_attn_mask(valid, jnp.zeros_like(valid).at[:, p_len].set(True))
    pos = jnp.cumsum(valid, axis=1) - 1
    tokens = x @ params["action_in_proj"]["kernel"] + params["action_in_proj"]["bias"]
    cond = pi05.time_embedding(params, jnp.full((b,), 0.5), CFG.expert.width)
    llm = params["PaliGemma"]["llm"]
    _, kv = pi05.run_layers(
        llm,
        CFG,
        [prefix, tokens],
        [pos[:, :p_len], pos[:, p_len:]],
        [[] for _ in llm["layers"]],
        mask,
        pi05.expert_mods(llm, cond),
    )
    return kv


def test_prefix_never_attends_to_actions(params, inputs):
    """In a joint pass the prefix K/V do not depend on the action tokens, and equal the
    prefill cache at every valid prefix position."""
    joint = jax.jit(joint_prefix_kv)
    kv_a, kv_b = joint(params, inputs, noise(3)), joint(params, inputs, 5.0 * noise(4))
    cache = pi05.prefill(params, CFG, inputs)
    valid = np.asarray(cache.mask)  # invalid slots are never read, so they may differ
    for layer_a, layer_b, layer_c in zip(kv_a, kv_b, cache.kv, strict=True):
        for a, b, c in zip(layer_a, layer_b, layer_c, strict=True):  # K, then V
            a, b, c = (np.asarray(z)[valid] for z in (a, b, c))
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ masks


def test_padded_prompt_tokens_do_not_change_outputs(params, inputs):
    junk = jax.random.randint(jax.random.key(9), inputs.tokens.shape, 3, CFG.vocab_size)
    other = dataclasses.replace(
        inputs, tokens=jnp.where(inputs.token_mask, inputs.tokens, junk).astype(jnp.int32)
    )
    assert not np.array_equal(other.tokens, inputs.tokens)
    x = noise(5)
    np.testing.assert_array_equal(
        actions_from_cache(params, other, x), actions_from_cache(params, inputs, x)
    )
    np.testing.assert_array_equal(
        pi05.sample_actions(params, CFG, other, x, 2),
        pi05.sample_actions(params, CFG, inputs, x, 2),
    )
    np.testing.assert_array_equal(first_logits(params, other), first_logits(params, inputs))


def test_missing_camera_pixels_do_not_change_outputs(params, inputs):
    missing = ~inputs.image_mask[:, :, None, None, None]
    scribble = jax.random.uniform(jax.random.key(8), inputs.images.shape, minval=-1.0)
    other = dataclasses.replace(inputs, images=jnp.where(missing, scribble, inputs.images))
    x = noise(6)
    np.testing.assert_array_equal(
        actions_from_cache(params, other, x), actions_from_cache(params, inputs, x)
    )
    np.testing.assert_array_equal(first_logits(params, other), first_logits(params, inputs))
    # Control: the same scribble on a *present* camera does change the actions.
    present = dataclasses.replace(inputs, images=inputs.images.at[:, 0].set(scribble[:, 0]))
    diff = actions_from_cache(params, present, x) - actions_from_cache(params, inputs, x)
    assert float(jnp.max(jnp.abs(diff))) > 1e-3


# ------------------------------------------------------------------------ time conditioning


def with_adarms_zeroed(tree: P.Tree) -> P.Tree:
    """openpi's initialisation of the adaRMS Dense (zeros): scale, shift and gate are 0."""
    flat = P.flatten(tree)
    return P.unflatten(
        {p: np.zeros_like(v) if "norm_1/Dense_0/" in p else v for p, v in flat.items()}
    )


def test_time_conditioning_changes_the_velocity(params, inputs):
    cache = pi05.prefill(params, CFG, inputs)
    x = noise(7)
    v_early = velocity(params, CFG, cache, x, jnp.full((2,), 0.9))
    v_late = velocity(params, CFG, cache, x, jnp.full((2,), 0.1))
    assert float(jnp.max(jnp.abs(v_early - v_late))) > 1e-2


def test_zero_adarms_gate_skips_every_expert_layer(tree, inputs):
    """With scale = shift = gate = 0 every gated residual adds nothing, so the velocity
    is action_out_proj(rms_norm(action_in_proj(x))) whatever the prefix and t are."""
    params = P.to_runtime(with_adarms_zeroed(tree))
    cache = pi05.prefill(params, CFG, inputs)
    x = noise(8)
    got = velocity(params, CFG, cache, x, jnp.full((2,), 0.3))
    h = x @ params["action_in_proj"]["kernel"] + params["action_in_proj"]["bias"]
    h = h / jnp.sqrt(jnp.mean(h**2, axis=-1, keepdims=True) + 1e-6)
    want = h @ params["action_out_proj"]["kernel"] + params["action_out_proj"]["bias"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_time_embedding_periods_span_4e_3_to_4():
    """With identity time MLPs the embedding is swish(swish(sincos(t))): the first
    frequency has period 4e-3 and the last 4.0 (pi0.5's sin-cos embedding)."""
    width = CFG.expert.width
    eye = {"kernel": jnp.eye(width), "bias": jnp.zeros(width)}
    p = {"time_mlp_in": eye, "time_mlp_out": eye}
    t = jnp.asarray([0.001, 1.0, 2.0])
    emb = pi05.time_embedding(p, t, width)
    half = width // 2
    sin_first = jnp.asarray([1.0, 0.0, 0.0])  # sin(2 pi t / 4e-3): a quarter, 250 and 500 turns
    sin_last = jnp.asarray([np.sin(2 * np.pi * 0.001 / 4.0), 1.0, 0.0])  # sin(2 pi t / 4)
    cos_last = jnp.asarray([np.cos(2 * np.pi * 0.001 / 4.0), 0.0, -1.0])

    def twice(v):
        return jax.nn.swish(jax.nn.swish(v))

    np.testing.assert_allclose(emb[:, 0], twice(sin_first), atol=1e-4)
    np.testing.assert_allclose(emb[:, half - 1], twice(sin_last), atol=1e-5)
    np.testing.assert_allclose(emb[:, width - 1], twice(cos_last), atol=1e-5)


def test_rms_norm_matches_gemma_definition():
    """Plain RMSNorm scales by (1 + scale); adaRMS returns the gate from the same Dense."""
    x = jnp.asarray([[[3.0, 4.0]]])
    normed, gate = gemma.rms_norm(x, {"scale": jnp.asarray([0.0, 1.0])}, None)
    rms = np.sqrt((9 + 16) / 2 + 1e-6)
    np.testing.assert_allclose(normed, [[[3 / rms, 2 * 4 / rms]]], rtol=1e-6)
    assert gate is None
    dense = {
        "Dense_0": {"kernel": jnp.asarray([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]), "bias": jnp.zeros(6)}
    }
    out, gate = gemma.rms_norm(x, dense, gemma.modulation(dense, jnp.asarray([[0.5]])))
    # cond 0.5 -> scale (0.5, 1), shift (1.5, 2), gate (2.5, 3)
    np.testing.assert_allclose(out, [[[3 / rms * 1.5 + 1.5, 4 / rms * 2 + 2]]], rtol=1e-6)
    np.testing.assert_allclose(gate, [[[2.5, 3.0]]])
