"""One language request decoded to completion in a single jitted loop (the baselines).

The isolated and shared baselines of the paper finish each request inside its frame.
They use the same kernels as the pool (`start_row`, `pi05.seed_row`, `pi05.extend`,
`sample`) at batch 1, in a `while_loop` that stops at EOS, so a baseline is as fast as the
model allows and its greedy tokens are the ones the OxyGen pool must reproduce.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from oxygen_core.config import ModelConfig
from oxygen_core.engine.kv_pool import RowRequest, finished, sample, start_row
from oxygen_core.model import pi05


@functools.partial(jax.jit, static_argnames=("cfg", "capacity", "n_max"))
def generate(
    params: dict,
    cfg: ModelConfig,
    cache: pi05.PrefixCache,
    req: RowRequest,
    capacity: int,
    n_max: int,
) -> jax.Array:
    """Tokens [n_max] of one request (-1 after it finished), prefix from `cache` [1, P]."""
    prompt_kv, token, done = start_row(params, cfg, cache, req)
    shape = (1, capacity, *cache.kv[0][0].shape[2:])
    empty = [(jnp.zeros(shape, k.dtype), jnp.zeros(shape, v.dtype)) for k, v in cache.kv]
    row = pi05.seed_row(empty, jnp.int32(0), cache.kv, prompt_kv)
    out = jnp.full((n_max,), -1, jnp.int32).at[0].set(token[0])

    def body(carry):
        row, ext_len, token, n_gen, _, out = carry
        row, logits = pi05.extend(
            params, cfg, row, cache.mask, ext_len, token[:, None], jnp.ones((1,), jnp.int32)
        )
        token = sample(logits, req.temperature[None], req.key[None], n_gen)
        n_gen = n_gen + 1
        done = finished(token, n_gen, req.max_tokens[None], req.stop_eos[None])
        return row, ext_len + 1, token, n_gen, done, out.at[n_gen[0] - 1].set(token[0])

    def cond(carry):
        return ~carry[4][0]

    init = (row, req.n_prompt[None], token, jnp.ones((1,), jnp.int32), done, out)
    return jax.lax.while_loop(cond, body, init)[-1]
