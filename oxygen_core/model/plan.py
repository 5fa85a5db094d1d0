"""Two-stage inference: a short text answer the action expert reads before it acts.

pi0.5 first decodes a high-level step as text from the prefix and then conditions its
action expert on prefix + that text. A robot preset with a `plan_prompt` does the same
here: after the frame's prefill the VLM answers the prompt greedily (for the sim's
policies "Target:" -> "r2 c5", the instructed object's table cell, `train/locate.py`),
those rows are appended causally to the prefix's K/V, and the action expert attends to
prefix + plan. The language streams keep reading the prefix alone.

Training feeds the true answer in the same place (`teacher_forced`), inference the
greedy one (`decode`); both go through `extended`, so the action expert sees the plan
rows at the same positions and under the same mask either way. Only the prompt and the
answer are in the cache: the EOS that ends the answer is never appended, as a decode
stops when it is sampled. `forced` is the training form at inference: closed-loop
evaluation with the true answer (`oxygen-eval in-process --true-plan`) measures what a
perfect answer would be worth to the action expert.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from oxygen_core.config import EOS_ID, PAD_ID, ModelConfig
from oxygen_core.model import pi05


def extended(cache: pi05.PrefixCache, rows: pi05.LayerKV, n_valid: jax.Array) -> pi05.PrefixCache:
    """The prefix cache followed by the first n_valid [B] extension slots of `rows`
    (per layer [B, C, K, H] holding the prefix in their first P slots)."""
    p_len, capacity = cache.mask.shape[1], rows[0][0].shape[1]
    ext = jnp.arange(capacity - p_len)[None, :] < n_valid[:, None]
    b = cache.mask.shape[0]
    return pi05.PrefixCache(
        kv=[(k[:b], v[:b]) for k, v in rows], mask=jnp.concatenate([cache.mask, ext], axis=1)
    )


def teacher_forced(
    params: pi05.Params, cfg: ModelConfig, cache: pi05.PrefixCache, row: jax.Array
) -> pi05.PrefixCache:
    """The action cache of a training row [B, T] (prompt, answer, EOS, padding): the
    prompt and the true answer appended after the prefix."""
    b, t = row.shape
    rows = pi05.cache_rows(cache, cache.mask.shape[1] + t)
    rows, _ = pi05.extend_hidden(params, cfg, rows, cache.mask, jnp.zeros((b,), jnp.int32), row)
    n_valid = jnp.sum((row != PAD_ID) & (row != EOS_ID), axis=1).astype(jnp.int32)
    return extended(cache, rows, n_valid)


forced = jax.jit(teacher_forced, static_argnames="cfg")


@functools.partial(jax.jit, static_argnames=("cfg", "n_max"))
def decode(
    params: pi05.Params, cfg: ModelConfig, cache: pi05.PrefixCache, prompt: jax.Array, n_max: int
) -> tuple[pi05.PrefixCache, jax.Array]:
    """Answer `prompt` (int32 [Tp]) greedily after each prefix of `cache` [B, P].

    Returns the action cache (prefix + prompt + answer) and the answer tokens [B, n_max]
    (PAD after a row's EOS, which is included; an answer cut at n_max keeps its last
    token out of the cache). Stops as soon as every row has sampled EOS.
    """
    b, n_prompt = cache.mask.shape[0], prompt.shape[0]
    rows = pi05.cache_rows(cache, cache.mask.shape[1] + n_prompt + n_max)
    zeros = jnp.zeros((b,), jnp.int32)
    tokens = jnp.broadcast_to(prompt, (b, n_prompt))
    rows, logits = pi05.extend(params, cfg, rows, cache.mask, zeros, tokens, zeros + n_prompt)
    token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    out = jnp.full((b, n_max), PAD_ID, jnp.int32).at[:, 0].set(token)
    done = token == EOS_ID

    def body(carry):
        rows, ext_len, token, n_gen, done, out = carry
        rows, logits = pi05.extend(
            params, cfg, rows, cache.mask, ext_len, token[:, None], jnp.ones((b,), jnp.int32)
        )
        ext_len = ext_len + (~done)  # a finished row's write lands past its valid slots
        nxt = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        out = out.at[:, n_gen].set(jnp.where(done, PAD_ID, nxt))
        done = done | (nxt == EOS_ID)
        return rows, ext_len, jnp.where(done, token, nxt), n_gen + 1, done, out

    def cond(carry):
        return (carry[3] < n_max) & ~jnp.all(carry[4])

    init = (rows, zeros + n_prompt, token, jnp.int32(1), done, out)
    rows, ext_len, _, _, _, out = jax.lax.while_loop(cond, body, init)
    return extended(cache, rows, ext_len), out
