"""The unified KV cache pool: every live language request's state sigma on the device.

Each request owns one row of a preallocated pool (per layer K and V [R, C, K, H], with
C = prefix slots + stream prompt + max new tokens) plus small per-row state: prefix mask,
extension length, last token, tokens generated, done flag, sampling settings and rng
key. Rows of requests that started in different frames, with different prefixes and
ages, decode together: positions and masks are per row.

All updates are in place: `admit` and `decode` are jitted with the pool donated, write
with scatter / dynamic_update_slice, and never concatenate or split the pool. A decode
runs over the first `bucket` rows (a static size compiled at warm-up); rows that are
free or finished are masked, not removed. A decode packs what the host needs into one
int32 array on the device, so one device-to-host copy per call carries it;
`DecodeOutput.unpack` is the one place that turns it into named fields on the host.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from oxygen_core.config import EOS_ID, ModelConfig
from oxygen_core.model import pi05


@dataclasses.dataclass(frozen=True)
class PoolState:
    """Device state of all R rows. Shapes: kv per layer [R, C, K, H]; others [R] / [R, P]."""

    kv: pi05.LayerKV
    prefix_mask: jax.Array  # bool [R, P]
    ext_len: jax.Array  # int32 [R]: extension slots written (stream prompt + fed tokens)
    last_token: jax.Array  # int32 [R]: sampled, not yet fed back
    n_gen: jax.Array  # int32 [R]: tokens generated so far
    max_tokens: jax.Array  # int32 [R]
    done: jax.Array  # bool [R]: finished or free; masked from decoding
    fresh: jax.Array  # bool [R]: admitted this frame, first token not yet reported
    stop_eos: jax.Array  # bool [R]
    temperature: jax.Array  # float32 [R]; 0 = greedy
    key: jax.Array  # uint32 [R, 2] raw PRNG keys


jax.tree_util.register_dataclass(
    PoolState, data_fields=[f.name for f in dataclasses.fields(PoolState)], meta_fields=[]
)


@dataclasses.dataclass(frozen=True)
class RowRequest:
    """Device-side settings for a new row (host scalars / small arrays)."""

    prompt: jax.Array  # int32 [E_p] stream prompt ids, padded
    n_prompt: jax.Array  # int32 scalar
    max_tokens: jax.Array  # int32 scalar
    stop_eos: jax.Array  # bool scalar
    temperature: jax.Array  # float32 scalar
    key: jax.Array  # uint32 [2]


jax.tree_util.register_dataclass(
    RowRequest, data_fields=[f.name for f in dataclasses.fields(RowRequest)], meta_fields=[]
)


def init_pool(
    cfg: ModelConfig, rows: int, capacity: int, dtype: jnp.dtype = jnp.float32
) -> PoolState:
    """An empty pool: every row free (done)."""
    shape = (rows, capacity, cfg.vlm.num_kv_heads, cfg.vlm.head_dim)
    kv = [(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)) for _ in range(cfg.vlm.depth)]

    # Separate buffers per field: donation rejects one buffer passed twice.
    def zeros() -> jax.Array:
        return jnp.zeros((rows,), jnp.int32)

    return PoolState(
        kv=kv,
        prefix_mask=jnp.zeros((rows, cfg.prefix_len), bool),
        ext_len=zeros(),
        last_token=zeros(),
        n_gen=zeros(),
        max_tokens=zeros(),
        done=jnp.ones((rows,), bool),
        fresh=jnp.zeros((rows,), bool),
        stop_eos=jnp.zeros((rows,), bool),
        temperature=jnp.zeros((rows,), jnp.float32),
        key=jnp.zeros((rows, 2), jnp.uint32),
    )


def sample(logits: jax.Array, temperature: jax.Array, key: jax.Array, step: jax.Array) -> jax.Array:
    """Next token per row: argmax at temperature 0, else a draw keyed by (request, step).

    logits [B, V]; temperature [B]; key uint32 [B, 2]; step [B] (tokens generated so far).
    The same request gets the same draws in every engine mode.
    """
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def draw(lg: jax.Array, t: jax.Array, k: jax.Array, s: jax.Array) -> jax.Array:
        rng = jax.random.fold_in(jax.random.wrap_key_data(k), s)
        return jax.random.categorical(rng, lg / jnp.maximum(t, 1e-6)).astype(jnp.int32)

    def mixed() -> jax.Array:
        drawn = jax.vmap(draw)(logits, temperature, key, step)
        return jnp.where(temperature > 0, drawn, greedy)

    # Random draws cost a Gumbel sample per vocabulary entry and row: skip them when every
    # row is greedy (the common case), which the cond decides on the device.
    return jax.lax.cond(jnp.any(temperature > 0), mixed, lambda: greedy)


def finished(
    token: jax.Array, n_gen: jax.Array, max_tokens: jax.Array, stop_eos: jax.Array
) -> jax.Array:
    return (stop_eos & (token == EOS_ID)) | (n_gen >= max_tokens)


def start_row(
    params: dict, cfg: ModelConfig, cache: pi05.PrefixCache, req: RowRequest
) -> tuple[pi05.LayerKV, jax.Array, jax.Array]:
    """A new request's stream prompt after the prefix: its K/V, first token and done flag.

    Returns the prompt's K/V per layer [1, E_p, K, H], the first token [1] and its done
    flag [1]; `pi05.seed_row` writes the row. The pool and the baselines both start here, so
    they sample the same first token.
    """
    prompt_kv, logits = pi05.extend_prefix(params, cfg, cache, req.prompt[None], req.n_prompt[None])
    return prompt_kv, *first_token(logits, req)


def first_token(logits: jax.Array, req: RowRequest) -> tuple[jax.Array, jax.Array]:
    """A request's first token [1] and done flag [1] from its prompt's logits [1, V]."""
    zero = jnp.zeros((1,), jnp.int32)
    token = sample(logits, req.temperature[None], req.key[None], zero)
    return token, finished(token, zero + 1, req.max_tokens[None], req.stop_eos[None])


def admit(
    params: dict,
    cfg: ModelConfig,
    pool: PoolState,
    slot: int,
    cache: pi05.PrefixCache,
    req: RowRequest,
) -> PoolState:
    """Write a new request into row `slot` (checked: XLA would clamp a bad index silently)."""
    rows = pool.done.shape[0]
    if not 0 <= slot < rows:
        raise ValueError(f"slot {slot} is outside the pool's {rows} rows")
    return admit_row(params, cfg, pool, np.int32(slot), cache, req)


@functools.partial(jax.jit, static_argnames=("cfg",), donate_argnames=("pool",))
def admit_row(
    params: dict,
    cfg: ModelConfig,
    pool: PoolState,
    slot: jax.Array,
    cache: pi05.PrefixCache,
    req: RowRequest,
) -> PoolState:
    """Write a new request into row `slot` in place: prefix K/V, prompt K/V, first token
    (`pi05.seed_row`: no row is built and copied, and the old occupant's slots stay masked)."""
    prompt_kv, token, done = start_row(params, cfg, cache, req)
    kv = pi05.seed_row(pool.kv, slot, cache.kv, prompt_kv)
    return started(dataclasses.replace(pool, kv=kv), slot, cache, req, token, done)


def started(
    pool: PoolState,
    slot: jax.Array,
    cache: pi05.PrefixCache,
    req: RowRequest,
    token: jax.Array,
    done: jax.Array,
) -> PoolState:
    """The pool with row `slot`, whose K/V is already seeded (`pi05.seed_row`), holding a
    started request: its first token [1] (reported by the next decode) and its settings."""
    return PoolState(
        kv=pool.kv,
        prefix_mask=pool.prefix_mask.at[slot].set(cache.mask[0]),
        ext_len=pool.ext_len.at[slot].set(req.n_prompt),
        last_token=pool.last_token.at[slot].set(token[0]),
        n_gen=pool.n_gen.at[slot].set(1),
        max_tokens=pool.max_tokens.at[slot].set(req.max_tokens),
        done=pool.done.at[slot].set(done[0]),
        fresh=pool.fresh.at[slot].set(True),
        stop_eos=pool.stop_eos.at[slot].set(req.stop_eos),
        temperature=pool.temperature.at[slot].set(req.temperature),
        key=pool.key.at[slot].set(req.key),
    )


def busy(pool: PoolState) -> PoolState:
    """Every row live and unable to finish (no EOS stop, no token budget), for timing.

    A decode stops once every row is done, so a step can only be timed over live rows;
    their K/V is whatever the pool holds, which costs the same as real rows.
    """
    no_limit = jnp.iinfo(jnp.int32).max
    return dataclasses.replace(
        pool,
        done=jnp.zeros_like(pool.done),
        fresh=jnp.zeros_like(pool.fresh),
        stop_eos=jnp.zeros_like(pool.stop_eos),
        max_tokens=jnp.full_like(pool.max_tokens, no_limit),
    )


@functools.partial(jax.jit, static_argnames=("cfg",), donate_argnames=("pool",))
def release(cfg: ModelConfig, pool: PoolState, slots: jax.Array) -> PoolState:
    """Mark rows free (done); their K/V stays and is overwritten by the next admit."""
    del cfg
    return dataclasses.replace(pool, done=pool.done.at[slots].set(True, mode="drop"))


@dataclasses.dataclass(frozen=True)
class DecodeOutput:
    """One decode call's report to the host, for the first `bucket` (B) rows."""

    tokens: np.ndarray  # int32 [k_max, B]: the token each step emitted per row, -1 for none
    first: np.ndarray  # int32 [B]: first token of a row admitted this frame, -1 otherwise
    done: np.ndarray  # bool [B]: finished or free (a finished row's slot can be freed)

    @classmethod
    def unpack(cls, packed: jax.Array) -> DecodeOutput:
        """`decode`'s packed [k_max + 2, B] array -> named fields: one host copy."""
        host = np.asarray(packed)
        k_max = host.shape[0] - 2
        return cls(tokens=host[:k_max], first=host[k_max], done=host[k_max + 1].astype(bool))

    def emitted(self, row: int) -> list[int]:
        """Row's new tokens in order: its admission token (if any), then the steps'."""
        head = [int(self.first[row])] if self.first[row] >= 0 else []
        return head + [int(t) for t in self.tokens[:, row] if t >= 0]


@dataclasses.dataclass(frozen=True)
class RowStart:
    """A request that starts in row `slot` inside a decode call's first step (`decode`)."""

    slot: jax.Array  # int32 scalar, below the call's bucket
    request: RowRequest
    cache: pi05.PrefixCache  # the frame's prefix [1, P]


jax.tree_util.register_dataclass(RowStart, data_fields=["slot", "request", "cache"], meta_fields=[])


def advanced(
    pool: PoolState, bucket: int, kv: pi05.LayerKV, logits: jax.Array, live: jax.Array
) -> tuple[PoolState, jax.Array]:
    """The pool after one decode step of its first `bucket` rows (K/V already written,
    logits [B, V]); returns it and the step's tokens [B], -1 where a row was not live."""
    b = bucket
    # Finished and free rows count as greedy: their stale temperature must not make an
    # all-greedy batch pay for random draws.
    temperature = jnp.where(live, pool.temperature[:b], 0.0)
    token = sample(logits, temperature, pool.key[:b], pool.n_gen[:b])
    n_gen = pool.n_gen[:b] + live
    done = pool.done[:b] | (live & finished(token, n_gen, pool.max_tokens[:b], pool.stop_eos[:b]))
    pool = dataclasses.replace(
        pool,
        kv=kv,
        ext_len=pool.ext_len.at[:b].add(live.astype(jnp.int32)),
        last_token=pool.last_token.at[:b].set(jnp.where(live, token, pool.last_token[:b])),
        n_gen=pool.n_gen.at[:b].set(n_gen),
        done=pool.done.at[:b].set(done),
    )
    return pool, jnp.where(live, token, -1)


def step_and_start(
    params: dict, cfg: ModelConfig, pool: PoolState, bucket: int, start: RowStart, live: jax.Array
) -> tuple[PoolState, jax.Array, jax.Array]:
    """One decode step of the `live` rows among the first `bucket` and the start of a new
    request in its free row, in one pass (`pi05.extend_and_start`): the step's tokens [B]
    and the new request's first token [1]."""
    b, req = bucket, start.request
    kv, logits, prompt_logits = pi05.extend_and_start(
        params,
        cfg,
        pool.kv,
        pool.prefix_mask[:b],
        pool.ext_len[:b],
        pool.last_token[:b, None],
        start.slot,
        start.cache,
        req.prompt[None],
        req.n_prompt[None],
    )
    pool, tokens = advanced(pool, b, kv, logits, live)
    token, done = first_token(prompt_logits, req)
    return started(pool, start.slot, start.cache, req, token, done), tokens, token


@functools.partial(jax.jit, static_argnames=("cfg", "bucket", "k_max"), donate_argnames=("pool",))
def decode(
    params: dict,
    cfg: ModelConfig,
    pool: PoolState,
    k: jax.Array,
    bucket: int,
    k_max: int,
    start: RowStart | None = None,
) -> tuple[PoolState, jax.Array]:
    """Decode up to k (<= k_max, traced) tokens for every live row among the first `bucket`.

    With `start` (and k >= 1), a new request starts in its free row inside the first step
    (`step_and_start`): it gets its first token there and decodes from the second step on,
    k tokens in this call where a request admitted apart (`admit`) gets 1 + k. Its prompt
    then costs a few more rows of the step's dots instead of a pass of its own.
    The loop stops early once every row is done (all hit EOS, say): a step over finished
    rows would cost a full batch step and emit nothing.
    Returns the pool and one packed int32 array [k_max + 2, bucket] for
    `DecodeOutput.unpack`: rows 0..k_max-1 the tokens emitted at each step (-1 where a row
    emitted nothing), row k_max the first token of rows admitted this frame (-1
    otherwise), row k_max + 1 the done flags.
    """
    b = bucket
    first = jnp.where(pool.fresh[:b], pool.last_token[:b], -1)

    def step(
        carry: tuple[jax.Array, PoolState, jax.Array],
    ) -> tuple[jax.Array, PoolState, jax.Array]:
        i, st, out = carry
        live = ~st.done[:b]
        kv, logits = pi05.extend(
            params,
            cfg,
            st.kv,
            st.prefix_mask[:b],
            st.ext_len[:b],
            st.last_token[:b, None],
            jnp.ones((b,), jnp.int32),
        )
        st, tokens = advanced(st, b, kv, logits, live)
        return i + 1, st, out.at[i].set(tokens)

    def more(carry: tuple[jax.Array, PoolState, jax.Array]) -> jax.Array:
        i, st, _ = carry
        return (i < jnp.minimum(k, k_max)) & jnp.any(~st.done[:b])

    out = jnp.full((k_max, b), -1, jnp.int32)
    i = jnp.int32(0)
    if start is not None:
        # k = 0 asks for no step: the rows sit it out and only the new request starts.
        live = ~pool.done[:b] & (k > 0)
        pool, tokens, token = step_and_start(params, cfg, pool, b, start, live)
        out = out.at[0].set(tokens)
        first = first.at[start.slot].set(token[0])
        i = jnp.int32(1)
    _, pool, out = jax.lax.while_loop(more, step, (i, pool, out))
    pool = dataclasses.replace(pool, fresh=pool.fresh.at[:b].set(False))
    packed = jnp.concatenate([out, first[None], pool.done[:b][None].astype(jnp.int32)])
    return pool, packed
