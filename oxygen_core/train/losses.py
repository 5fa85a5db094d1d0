"""pi0.5's two training losses from one shared prefix, written with the inference code.

One prefill of the prefix (images, then the prompt with the discretised state) gives the
K/V cache that both losses read, as pi0.5 co-trains actions and language:

- flow matching on the action chunk: t ~ Beta(1.5, 1) scaled into [0.001, 1] (openpi's
  schedule for pi0 and pi0.5, biased towards the noisy end where sampling starts),
  x_t = t * noise + (1 - t) * actions, and the action expert's velocity at (x_t, t) is
  regressed onto u = noise - actions (mean squared error over every dimension). The
  velocity comes from `pi05.velocity`, the function `denoise` integrates at inference.
  Each chunk may be scored at several (time, noise) draws from the one prefill
  (`samples`): the same expectation with less variance, for little more work, since the
  action expert's pass over H tokens is small next to the prefill's hundreds.
- next-token cross-entropy on language: each stream's row is its prompt ("Narrate:"),
  then the target line, then EOS, appended causally after the prefix by
  `pi05.extend_hidden`, the same function the engine decodes with. Only predictions of
  target tokens and the EOS count; predicting the prompt's own tokens does not.

Gradients flow from both losses into the shared VLM, so what the prefix encodes serves
the actions and the texts at once.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from oxygen_core.config import ModelConfig
from oxygen_core.model import gemma, pi05, plan

TIME_BETA = (1.5, 1.0)
TIME_MIN = 0.001


@dataclasses.dataclass(frozen=True)
class Batch:
    """One training batch, model-ready.

    prefix: the shared prefix (images scaled to [-1, 1]); actions: float32 [B, Ha, A]
    normalised targets; text: int32 [B, N, T] per stream the prompt, the target line, EOS
    and padding; text_target: bool [B, N, T] True where a token is a target (the line and
    its EOS), so the prediction of token j (made at j - 1) is scored.
    """

    prefix: pi05.PrefixInputs
    actions: jax.Array
    text: jax.Array
    text_target: jax.Array


jax.tree_util.register_dataclass(
    Batch, data_fields=["prefix", "actions", "text", "text_target"], meta_fields=[]
)


def sample_time(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Flow-matching times in [0.001, 1], Beta(1.5, 1) distributed before scaling."""
    return jax.random.beta(key, *TIME_BETA, shape) * (1.0 - TIME_MIN) + TIME_MIN


def flow_pair(actions: jax.Array, noise: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The noisy actions x_t and the velocity target u for times t [B]."""
    t = t[:, None, None]
    return t * noise + (1.0 - t) * actions, noise - actions


def flow_loss(
    params: pi05.Params,
    cfg: ModelConfig,
    cache: pi05.PrefixCache,
    actions: jax.Array,
    key: jax.Array,
    samples: int = 1,
) -> jax.Array:
    """Mean squared error of the predicted velocity at `samples` random (time, noise)
    draws per chunk, all reading the one prefix cache."""
    if samples > 1:
        repeat = lambda a: jnp.repeat(a, samples, axis=0)  # noqa: E731
        cache = pi05.PrefixCache(
            kv=[(repeat(k), repeat(v)) for k, v in cache.kv], mask=repeat(cache.mask)
        )
        actions = repeat(actions)
    noise_key, time_key = jax.random.split(key)
    noise = jax.random.normal(noise_key, actions.shape, actions.dtype)
    t = sample_time(time_key, actions.shape[:1])
    x_t, u = flow_pair(actions, noise, t)
    v = pi05.velocity(params, cfg, cache, x_t, t)
    return jnp.mean(jnp.square(v - u))


def text_logits(
    params: pi05.Params, cfg: ModelConfig, cache: pi05.PrefixCache, text: jax.Array
) -> jax.Array:
    """Next-token logits [B, N, T - 1, V] of every text row after the shared prefix.

    text: [B, N, T]. Each of the N rows gets its own cache row holding the shared prefix,
    as a language request gets a pool row in the engine.
    """
    b, n, t = text.shape
    repeat = lambda a: jnp.repeat(a, n, axis=0)  # noqa: E731  row b*n + s = batch b, row s
    rows_cache = pi05.PrefixCache(
        kv=[(repeat(k), repeat(v)) for k, v in cache.kv], mask=repeat(cache.mask)
    )
    rows = pi05.cache_rows(rows_cache, rows_cache.mask.shape[1] + t)
    tokens = text.reshape(b * n, t)
    start = jnp.zeros((b * n,), jnp.int32)
    _, hidden = pi05.extend_hidden(params, cfg, rows, rows_cache.mask, start, tokens)
    logits = gemma.lm_logits(params["PaliGemma"]["llm"], hidden[:, :-1])
    return logits.reshape(b, n, t - 1, -1)


def text_loss(
    params: pi05.Params,
    cfg: ModelConfig,
    cache: pi05.PrefixCache,
    text: jax.Array,
    text_target: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Cross-entropy summed over target tokens, and their count, for every text row
    (text, text_target: [B, N, T])."""
    logits = text_logits(params, cfg, cache, text)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, text[..., 1:])
    scored = text_target[..., 1:]
    return jnp.sum(ce * scored), jnp.sum(scored)


def losses(
    params: pi05.Params,
    cfg: ModelConfig,
    batch: Batch,
    key: jax.Array,
    flow: bool = True,
    flow_samples: int = 1,
    plan_row: bool = False,
) -> dict[str, jax.Array]:
    """Both losses from one prefill: {"flow", "text"} (text: mean over target tokens).
    flow=False leaves the action expert out (its loss reads 0): the text rows alone.
    plan_row: the action expert reads the prefix followed by the last text row's prompt
    and true answer, as a two-stage robot's reads its decoded plan (`model/plan.py`)."""
    cache = pi05.prefill(params, cfg, batch.prefix)
    ce_sum, count = text_loss(params, cfg, cache, batch.text, batch.text_target)
    act_cache = plan.teacher_forced(params, cfg, cache, batch.text[:, -1]) if plan_row else cache
    action = (
        flow_loss(params, cfg, act_cache, batch.actions, key, flow_samples)
        if flow
        else jnp.zeros(())
    )
    return {"flow": action, "text": ce_sum / jnp.maximum(count, 1.0)}
