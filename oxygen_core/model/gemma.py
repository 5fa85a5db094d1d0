"""Gemma Mixture-of-Transformers: the VLM stream and the action expert in one attention.

pi0.5 runs two Gemma experts side by side. Each layer, every expert projects its own
tokens to Q, K, V with its own weights; the projections of both token streams are
concatenated along the sequence and go through ONE softmax; each expert then applies its
own output projection, MLP and norms. The action expert's norms are adaptive (adaRMS):
a Dense of the flow-matching time embedding gives scale, shift and a residual gate.

Attention takes its keys as a list of *segments* (a cached prefix, a pool row, the new
tokens) instead of one concatenated array, so a frame's prefix KV cache is read in place
by the denoiser and by decoding, never copied into a longer buffer.

Weights come in the runtime layout of `params.to_runtime`: per layer, a list with one
dict per expert (`attn_norm`, `q`, `kv`, `out`, `ffw_norm`, `gating`, `linear`), every
matrix with its contracted axis first and its outputs in natural order. One array per
layer, and no einsum that must transpose its output, are the fast layouts for XLA on CPU
(docs/DESIGN.md section 5; a stacked-gate einsum was 18x slower than this at decode shapes).

Axis legend (einsum letters):
  B batch   T query tokens   S key tokens   D width   F mlp hidden
  N query heads   K kv heads   G query heads per kv head (N = K*G)   H head dim
  X batch x kv heads   Q a kv head's queries (T*G)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

Params = dict[str, Any]
KV = tuple[jax.Array, jax.Array]  # K and V, each [B, S, K, H]
LayerMods = tuple[jax.Array, jax.Array]  # adaRMS modulations before attention and MLP

# Large negative logit for masked keys; finite so fully-masked (padding) rows stay NaN-free.
MASK_VALUE = -2.3819763e38


def modulation(p: Params, cond: jax.Array) -> jax.Array:
    """adaRMS's Dense of the time embedding cond [..., C]: scale, shift and gate [..., 3D].

    It depends on the flow time only, so a denoiser computes it for all its steps at once
    (`pi05.expert_mods`) instead of as one small matmul per norm and step.
    """
    return cond @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]


def rms_norm(x: jax.Array, p: Params, mod: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
    """RMSNorm; with `mod` [B, 3D] (`modulation`) it is pi0.5's adaRMS and also returns
    the residual gate."""
    var = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
    normed = (x * jax.lax.rsqrt(var + 1e-6)).astype(x.dtype)
    if mod is None:
        return normed * (1 + p["scale"]), None
    scale, shift, gate = jnp.split(mod[:, None, :], 3, axis=-1)
    return normed * (1 + scale) + shift, gate


def gated_residual(x: jax.Array, y: jax.Array, gate: jax.Array | None) -> jax.Array:
    return x + y if gate is None else x + y * gate


def apply_rope(x: jax.Array, positions: jax.Array, max_wavelength: float) -> jax.Array:
    """Rotary embedding of x [B, T, N, H] at integer positions [B, T] (float32 math)."""
    head_dim = x.shape[-1]
    exponents = 2.0 * jnp.arange(head_dim // 2, dtype=jnp.float32) / head_dim
    timescale = max_wavelength**exponents
    radians = positions[..., None].astype(jnp.float32) / timescale  # [B, T, H/2]
    sin, cos = jnp.sin(radians)[..., None, :], jnp.cos(radians)[..., None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


def attend(q: jax.Array, segments: Sequence[KV], mask: jax.Array) -> jax.Array:
    """Softmax attention of q [B, T, N, H] over key segments, one float32 softmax.

    mask: bool [B, T, S] with S the total length of all segments, in segment order.
    Returns [B, T, N, H].

    Batch and kv-head axes are merged into one batch axis X (and a kv head's queries of
    all T tokens into one axis Q) before the dots: XLA on CPU runs a single-batch-axis dot
    2-3x faster than the same dot with two batch axes. With pi0.5's single kv head every
    reshape and transpose here is free (a size-1 axis moves).
    """
    b, t, n, h = q.shape
    kv_heads = segments[0][0].shape[2]
    g = n // kv_heads
    x = b * kv_heads
    qx = q.reshape(b, t, kv_heads, g, h).transpose(0, 2, 1, 3, 4).reshape(x, t * g, h)

    def per_head(a: jax.Array) -> jax.Array:  # [B, S, K, H] -> [X, S, H]
        return a.transpose(0, 2, 1, 3).reshape(x, a.shape[1], h)

    keys = [(per_head(k), per_head(v)) for k, v in segments]
    valid = jnp.broadcast_to(mask[:, None, :, None, :], (b, kv_heads, t, g, mask.shape[-1]))
    valid = valid.reshape(x, t * g, mask.shape[-1])
    # Key-major logits [X, S, Q] when each row has one query token (a decode step): the
    # keys are then the dots' left operand, read as they lie, where as the right operand
    # of a query-major dot each row's keys are repacked on every call. That took the
    # pool's decode step at 32 rows from 16.6-17.0 to 14.0-14.2 ms (small preset, 2-core
    # CPU); prefill, admission and the denoiser, with more queries per row, are faster
    # query-major.
    key_major = t == 1
    if key_major:
        valid = valid.transpose(0, 2, 1)
        scores = [
            jnp.einsum("XSH,XQH->XSQ", k, qx, preferred_element_type=jnp.float32) for k, _ in keys
        ]
    else:
        scores = [
            jnp.einsum("XQH,XSH->XQS", qx, k, preferred_element_type=jnp.float32) for k, _ in keys
        ]
    axis = 1 if key_major else 2  # the key axis
    logits = jnp.where(valid, jnp.concatenate(scores, axis=axis), MASK_VALUE)
    probs = jax.nn.softmax(logits, axis=axis).astype(q.dtype)
    value_spec = "XSQ,XSH->XQH" if key_major else "XQS,XSH->XQH"
    out, start = 0.0, 0
    for _, v in keys:
        stop = start + v.shape[1]
        out = out + jnp.einsum(value_spec, jax.lax.slice_in_dim(probs, start, stop, axis=axis), v)
        start = stop
    return out.reshape(b, kv_heads, t, g, h).transpose(0, 2, 1, 3, 4).reshape(b, t, n, h)


def project_qkv(
    x: jax.Array, e: Params, positions: jax.Array, max_wavelength: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One expert's Q [B,T,N,H] (RoPE'd, scaled) and K, V [B,T,K,H] (K RoPE'd)."""
    q = jnp.einsum("BTD,DNH->BTNH", x, e["q"])
    kv = jnp.einsum("BTD,DCKH->BTCKH", x, e["kv"])
    k, v = kv[:, :, 0], kv[:, :, 1]
    q = apply_rope(q, positions, max_wavelength) * (q.shape[-1] ** -0.5)
    return q, apply_rope(k, positions, max_wavelength), v


def attn_output(o: jax.Array, w: jax.Array) -> jax.Array:
    """Attention output o [B, T, N, H] through the output projection w [N, H, D] -> [B, T, D].

    One matmul over the merged N*H axis (both reshapes are free): as an einsum contracting
    two axes, XLA on CPU transposed the whole weight matrix on every call.
    """
    b, t, n, h = o.shape
    return o.reshape(b, t, n * h) @ w.reshape(n * h, w.shape[-1])


def feed_forward(x: jax.Array, e: Params) -> jax.Array:
    """GeGLU MLP (tanh-approximate GELU, as Gemma); gate and up in one matmul."""
    h = jnp.einsum("BTD,DCF->BTCF", x, e["gating"])
    return jnp.einsum("BTF,FD->BTD", jax.nn.gelu(h[:, :, 0]) * h[:, :, 1], e["linear"])


def attention_inputs(
    e: Params, x: jax.Array, positions: jax.Array, max_wavelength: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A plain (not adaRMS) expert's Q, K, V of its tokens x [B, T, D]: the first half of
    `layer` for the VLM stream alone, which language rows run; the caller decides where the
    K/V go and what the queries attend to, then calls `after_attention`."""
    y, _ = rms_norm(x, e["attn_norm"], None)
    return project_qkv(y, e, positions, max_wavelength)


def after_attention(e: Params, x: jax.Array, attended: jax.Array) -> jax.Array:
    """The second half: output projection, residual, MLP and residual of a plain expert."""
    x = x + attn_output(attended, e["out"])
    y, _ = rms_norm(x, e["ffw_norm"], None)
    return x + feed_forward(y, e)


def layer(
    p: Params,
    xs: Sequence[jax.Array | None],
    positions: Sequence[jax.Array | None],
    cached: Sequence[KV],
    mask: jax.Array,
    mods: Sequence[LayerMods | None],
    max_wavelength: float,
) -> tuple[list[jax.Array | None], list[KV | None]]:
    """One MoT layer. `cached` segments come first in the key order, then the new tokens
    of each present expert in expert order; `mods` holds each expert's adaRMS modulations
    (None: plain RMSNorm). Returns new hidden states and each expert's new K, V (None for
    absent experts)."""
    gates: list[jax.Array | None] = []
    queries: list[jax.Array] = []
    new_kv: list[KV | None] = []
    for i, x in enumerate(xs):
        if x is None:
            gates.append(None)
            new_kv.append(None)
            continue
        y, gate = rms_norm(x, p[i]["attn_norm"], None if mods[i] is None else mods[i][0])
        q, k, v = project_qkv(y, p[i], positions[i], max_wavelength)
        gates.append(gate)
        queries.append(q)
        new_kv.append((k, v))
    q_all = jnp.concatenate(queries, axis=1)
    segments = list(cached) + [kv for kv in new_kv if kv is not None]
    attended = attend(q_all, segments, mask)
    outs, start = [], 0
    for i, x in enumerate(xs):
        if x is None:
            outs.append(None)
            continue
        stop = start + x.shape[1]
        o = attn_output(attended[:, start:stop], p[i]["out"])
        start = stop
        x = gated_residual(x, o, gates[i])
        y, gate = rms_norm(x, p[i]["ffw_norm"], None if mods[i] is None else mods[i][1])
        outs.append(gated_residual(x, feed_forward(y, p[i]), gate))
    return outs, new_kv


def final_norm(llm: Params, x: jax.Array, expert: int, mod: jax.Array | None) -> jax.Array:
    return rms_norm(x, llm["final_norm"][expert], mod)[0]


def embed_tokens(llm: Params, tokens: jax.Array) -> jax.Array:
    """Token ids [B, T] -> embeddings [B, T, D], scaled by sqrt(D) as Gemma does."""
    table = llm["embedder"]["input_embedding"]
    return table[tokens] * jnp.sqrt(jnp.asarray(table.shape[1], table.dtype))


def lm_logits(llm: Params, h: jax.Array) -> jax.Array:
    """Tied LM head: final-normed hidden [..., D] -> float32 logits [..., V]."""
    h = final_norm(llm, h, 0, None)
    return jnp.einsum(
        "...D,VD->...V", h, llm["embedder"]["input_embedding"], preferred_element_type=jnp.float32
    )
