"""pi0.5 inference as pure functions with the KV cache as an explicit value.

The shared prefix is the image tokens of every camera slot followed by the tokenized
prompt (which carries the discretised state). It is bidirectional among valid tokens.
Its consumers read a prefix KV cache without changing it:

- `denoise`: the action expert's H action tokens attend to the valid prefix and to each
  other for S Euler steps of flow matching (t from 1 to 0).
- `extend_prefix`: a new language request's stream prompt (such as "Narrate:") after the
  prefix, returning its K/V and logits for the caller to write into the request's row.
- `extend`: a language request appends tokens causally after the prefix in its own cache
  row (one decoded token per step), writing their K/V into the row in place and
  returning the logits of its last valid token.
- `generate_text` / `sample_actions`: reference oracles that recompute the whole
  sequence with no cache, used by tests to prove the cached paths equal them.

A language cache row is [prefix slots | extension slots]: prefix keys are valid where
the prefix mask says so; extension slot e is valid for a query at extension index m
when e <= m. Positions: prefix token i has position (valid tokens before it); extension
token m has position (valid prefix length + m), as if the prompt had been appended.

Axis legend: B batch, P prefix tokens, T new tokens, C cache slots (P + extension),
Ha action horizon, A action dim, D width, V vocab, K kv heads, H head dim.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from oxygen_core.config import ModelConfig
from oxygen_core.model import gemma, siglip

Params = dict[str, Any]
LayerKV = list[gemma.KV]  # one (K, V) per layer, each [B, S, K, H]


@dataclasses.dataclass(frozen=True)
class PrefixInputs:
    """Model-ready prefix inputs.

    images: float32 [B, I, S, S, 3] in [-1, 1]; image_mask: bool [B, I];
    tokens: int32 [B, L]; token_mask: bool [B, L] (L = max_token_len).
    """

    images: jax.Array
    image_mask: jax.Array
    tokens: jax.Array
    token_mask: jax.Array


jax.tree_util.register_dataclass(
    PrefixInputs, data_fields=["images", "image_mask", "tokens", "token_mask"], meta_fields=[]
)


@dataclasses.dataclass(frozen=True)
class PrefixCache:
    """A prefix's K/V per layer [B, P, K, H] and its key validity mask [B, P]."""

    kv: LayerKV
    mask: jax.Array

    @property
    def valid_len(self) -> jax.Array:
        return jnp.sum(self.mask, axis=-1).astype(jnp.int32)


jax.tree_util.register_dataclass(PrefixCache, data_fields=["kv", "mask"], meta_fields=[])


def embed_prefix(
    params: Params, cfg: ModelConfig, inputs: PrefixInputs
) -> tuple[jax.Array, jax.Array]:
    """Prefix embeddings [B, P, D] and validity [B, P]: image slots, then prompt tokens."""
    b, n_img = inputs.image_mask.shape
    flat = inputs.images.reshape(b * n_img, *inputs.images.shape[2:]).astype(param_dtype(params))
    img_tokens = siglip.encode(params["PaliGemma"]["img"], flat, cfg.vision)
    img_tokens = img_tokens.reshape(b, n_img * img_tokens.shape[1], -1)
    img_mask = jnp.repeat(inputs.image_mask, cfg.vision.num_tokens, axis=1)
    txt = gemma.embed_tokens(params["PaliGemma"]["llm"], inputs.tokens)
    return jnp.concatenate([img_tokens, txt], axis=1), jnp.concatenate(
        [img_mask, inputs.token_mask], axis=1
    )


@dataclasses.dataclass(frozen=True)
class ExpertMods:
    """The action expert's adaRMS modulations (`gemma.modulation`) of one time embedding:
    per layer (before attention, before the MLP) and of its final norm, each [..., B, 3D].

    `denoise` builds them for every step at once, outside its loop (leading axis S), and
    indexes one step's inside; `velocity` builds one step's.
    """

    layers: list[gemma.LayerMods]
    final: jax.Array


jax.tree_util.register_dataclass(ExpertMods, data_fields=["layers", "final"], meta_fields=[])

ACTION_EXPERT = 1  # the second expert of every layer; the only one with adaRMS norms


def expert_mods(llm: Params, cond: jax.Array) -> ExpertMods:
    """Modulations of every adaRMS norm of the action expert from time embedding cond."""
    layers = [
        (
            gemma.modulation(p[ACTION_EXPERT]["attn_norm"], cond),
            gemma.modulation(p[ACTION_EXPERT]["ffw_norm"], cond),
        )
        for p in llm["layers"]
    ]
    return ExpertMods(layers, gemma.modulation(llm["final_norm"][ACTION_EXPERT], cond))


def run_layers(
    llm: Params,
    cfg: ModelConfig,
    xs: list[jax.Array | None],
    positions: list[jax.Array | None],
    cached: list[list[gemma.KV]],
    mask: jax.Array,
    mods: ExpertMods | None,
) -> tuple[list[jax.Array | None], LayerKV]:
    """All MoT layers (`mods`: the action expert's conditioning, None when it is absent);
    returns final hidden states and the new tokens' K/V of the first present expert per
    layer (the only one any caller keeps)."""
    new_kv: LayerKV = []
    for i, p in enumerate(llm["layers"]):
        layer_mods = [None, None if mods is None else mods.layers[i]]
        xs, kvs = gemma.layer(
            p, xs, positions, cached[i], mask, layer_mods, cfg.rope_max_wavelength
        )
        new_kv.append(next(kv for kv in kvs if kv is not None))
    return xs, new_kv


@functools.partial(jax.jit, static_argnames="cfg")
def prefill(params: Params, cfg: ModelConfig, inputs: PrefixInputs) -> PrefixCache:
    """One VLM pass over the bidirectional prefix; returns its K/V cache."""
    x, mask = embed_prefix(params, cfg, inputs)
    positions = jnp.cumsum(mask, axis=1) - 1
    attn_mask = mask[:, None, :] & mask[:, :, None]
    no_cache = [[] for _ in params["PaliGemma"]["llm"]["layers"]]
    _, kv = run_layers(
        params["PaliGemma"]["llm"],
        cfg,
        [x, None],
        [positions, None],
        no_cache,
        attn_mask,
        None,
    )
    return PrefixCache(kv=kv, mask=mask)


def time_embedding(params: Params, t: jax.Array, width: int) -> jax.Array:
    """pi0.5 time conditioning: sin-cos of t (periods 4e-3..4.0), two Dense+swish."""
    fraction = jnp.linspace(0.0, 1.0, width // 2)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    angle = t[:, None] * (1.0 / period * 2 * jnp.pi)[None, :]  # openpi's rounding order
    emb = jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)
    emb = emb.astype(params["time_mlp_in"]["kernel"].dtype)
    emb = jax.nn.swish(emb @ params["time_mlp_in"]["kernel"] + params["time_mlp_in"]["bias"])
    return jax.nn.swish(emb @ params["time_mlp_out"]["kernel"] + params["time_mlp_out"]["bias"])


def param_dtype(params: Params) -> jnp.dtype:
    """The compute dtype: float32 on CPU, bfloat16 on accelerators (set at load time)."""
    return params["PaliGemma"]["llm"]["embedder"]["input_embedding"].dtype


def action_tokens(params: Params, x_t: jax.Array) -> jax.Array:
    """Noisy actions [B, Ha, A] (float32) -> action expert tokens in the compute dtype."""
    p = params["action_in_proj"]
    return x_t.astype(p["kernel"].dtype) @ p["kernel"] + p["bias"]


def action_velocity(params: Params, out: jax.Array) -> jax.Array:
    """Expert output [B, Ha, D] -> float32 velocity [B, Ha, A] (Euler steps stay float32)."""
    p = params["action_out_proj"]
    return (out @ p["kernel"] + p["bias"]).astype(jnp.float32)


def velocity(
    params: Params, cfg: ModelConfig, cache: PrefixCache, x_t: jax.Array, t: jax.Array
) -> jax.Array:
    """Flow-matching velocity [B, Ha, A] of noisy actions x_t at time t [B]."""
    cond = time_embedding(params, t, cfg.expert.width)
    mods = expert_mods(params["PaliGemma"]["llm"], cond)
    return conditioned_velocity(params, cfg, cache, x_t, mods)


def conditioned_velocity(
    params: Params, cfg: ModelConfig, cache: PrefixCache, x_t: jax.Array, mods: ExpertMods
) -> jax.Array:
    """`velocity` with the time conditioning already turned into adaRMS modulations."""
    b, horizon, _ = x_t.shape
    tokens = action_tokens(params, x_t)
    positions = cache.valid_len[:, None] + jnp.arange(horizon)[None, :]
    mask = jnp.concatenate(
        [
            jnp.broadcast_to(cache.mask[:, None, :], (b, horizon, cache.mask.shape[1])),
            jnp.ones((b, horizon, horizon), bool),
        ],
        axis=-1,
    )
    cached = [[kv] for kv in cache.kv]
    llm = params["PaliGemma"]["llm"]
    (_, out), _ = run_layers(llm, cfg, [None, tokens], [None, positions], cached, mask, mods)
    out = gemma.final_norm(llm, out, ACTION_EXPERT, mods.final)
    return action_velocity(params, out)


@functools.partial(jax.jit, static_argnames=("cfg", "steps"))
def denoise(
    params: Params, cfg: ModelConfig, cache: PrefixCache, noise: jax.Array, steps: int
) -> jax.Array:
    """Euler-integrate the flow from noise (t=1) to actions (t=0) in `steps` steps.

    noise: [B, Ha, A]; the prefix cache is only read. Returns actions [B, Ha, A].
    The time conditioning depends on the step alone: it is computed for all steps before
    the loop (one matmul per norm instead of one per norm and step), so each step runs
    only the work that reads the actions.
    """
    dt = -1.0 / steps
    t = 1.0 + jnp.arange(steps) * dt  # the loop's t at step i, in the same float32 ops
    cond = time_embedding(params, t, cfg.expert.width)
    cond = jnp.broadcast_to(cond[:, None], (steps, noise.shape[0], cond.shape[-1]))
    leaves, tree = jax.tree.flatten(expert_mods(params["PaliGemma"]["llm"], cond))
    stacked = jnp.stack(leaves, axis=1)  # [S, norms, B, 3D]: one slice per step, not nine

    def step(i: jax.Array, x_t: jax.Array) -> jax.Array:
        mods_i = jax.tree.unflatten(tree, list(stacked[i]))
        return x_t + dt * conditioned_velocity(params, cfg, cache, x_t, mods_i)

    return jax.lax.fori_loop(0, steps, step, noise)


def extend(
    params: Params,
    cfg: ModelConfig,
    rows: LayerKV,
    prefix_mask: jax.Array,
    ext_len: jax.Array,
    tokens: jax.Array,
    n_valid: jax.Array,
) -> tuple[LayerKV, jax.Array]:
    """Append tokens causally to language cache rows and return next-token logits.

    `extend_hidden` does the work; this keeps each row's last valid token (decoding needs
    only that one) and applies the LM head to it.

    rows: per layer (K, V) [R, C, K, H] with R >= B (a preallocated pool: only its first
    B rows are read and written, in place when the caller donates it); prefix_mask:
    [B, P]; ext_len: [B] extension slots already written; tokens: [B, T]; n_valid: [B]
    how many of the T are real.
    Writes K/V of the new tokens at slots P + ext_len + t (padding beyond a row's
    n_valid is written but stays masked and is overwritten later). Returns the updated
    rows and float32 logits [B, V] at each row's last valid new token.
    """
    new_rows, x = extend_hidden(params, cfg, rows, prefix_mask, ext_len, tokens)
    last = jnp.take_along_axis(x, (n_valid - 1)[:, None, None], axis=1)[:, 0]
    return new_rows, gemma.lm_logits(params["PaliGemma"]["llm"], last)


def extend_prefix(
    params: Params, cfg: ModelConfig, cache: PrefixCache, tokens: jax.Array, n_valid: jax.Array
) -> tuple[LayerKV, jax.Array]:
    """Append tokens causally to a prefix cache read in place: their K/V and the logits.

    A request's stream prompt starts its language row. Reading the prefix as one
    attention segment (as `denoise` does) needs no cache row to attend over, so the
    caller writes the prefix and these K/V straight into wherever the row lives (a pool
    row, in place) instead of building a row and copying it there.

    tokens: [B, T] after each prefix, the first n_valid [B] real (causal, so padding after
    them changes nothing). Returns the new tokens' K/V per layer [B, T, K, H] and float32
    logits [B, V] at each row's last valid token, as `extend` with ext_len 0 computes them.
    """
    positions, mask = prompt_geometry(cache, tokens.shape[1])
    llm = params["PaliGemma"]["llm"]
    x = gemma.embed_tokens(llm, tokens)
    cached = [[kv] for kv in cache.kv]
    (h, _), kv = run_layers(llm, cfg, [x, None], [positions, None], cached, mask, None)
    last = jnp.take_along_axis(h, (n_valid - 1)[:, None, None], axis=1)[:, 0]
    return kv, gemma.lm_logits(llm, last)


def extend_hidden(
    params: Params,
    cfg: ModelConfig,
    rows: LayerKV,
    prefix_mask: jax.Array,
    ext_len: jax.Array,
    tokens: jax.Array,
) -> tuple[LayerKV, jax.Array]:
    """`extend` before the LM head: updated rows and the hidden states [B, T, D] of every
    new token (training reads all T of them for teacher-forced next-token targets)."""
    geometry = RowGeometry.of(prefix_mask, ext_len, tokens.shape[1], rows[0][0].shape[1])
    llm = params["PaliGemma"]["llm"]
    x = gemma.embed_tokens(llm, tokens)
    new_rows: LayerKV = []
    for p, row in zip(llm["layers"], rows, strict=True):
        e = p[0]  # the VLM expert: language rows never run the action expert
        q, k, v = gemma.attention_inputs(e, x, geometry.positions, cfg.rope_max_wavelength)
        row = geometry.write(row, k, v)
        new_rows.append(row)
        x = gemma.after_attention(e, x, geometry.attend(q, row))
    return new_rows, x


@dataclasses.dataclass(frozen=True)
class RowGeometry:
    """Where T new tokens of B language rows go and what they see (`extend_hidden`).

    positions [B, T]; slots [B, T]: the cache slots their K/V are written to; mask
    [B, T, C]: the row's valid prefix keys, and extension slots up to each token's own.
    """

    positions: jax.Array
    slots: jax.Array
    mask: jax.Array

    @classmethod
    def of(cls, prefix_mask: jax.Array, ext_len: jax.Array, t: int, capacity: int) -> RowGeometry:
        b, p_len = prefix_mask.shape
        new = jnp.arange(t)[None, :]
        base = jnp.sum(prefix_mask, axis=-1).astype(jnp.int32) + ext_len
        # Clamped so the scatter can promise in-bounds indices (XLA then updates in place
        # instead of rewriting the whole pool with a select); only rows that are finished
        # or padding ever reach the last slot, and they are masked or overwritten later.
        slots = jnp.minimum(p_len + ext_len[:, None] + new, capacity - 1)
        ext_ok = jnp.arange(capacity - p_len)[None, None, :] <= (ext_len[:, None] + new)[..., None]
        prefix = jnp.broadcast_to(prefix_mask[:, None, :], (b, t, p_len))
        return cls(base[:, None] + new, slots, jnp.concatenate([prefix, ext_ok], axis=-1))

    def write(self, row: gemma.KV, k: jax.Array, v: jax.Array) -> gemma.KV:
        """The tokens' K, V [B, T, K, H] written into the rows (R >= B), in place when the
        caller donates them."""
        row_ix = jnp.arange(self.slots.shape[0])[:, None]

        def put(a: jax.Array, new: jax.Array) -> jax.Array:
            return a.at[row_ix, self.slots].set(new.astype(a.dtype), mode="promise_in_bounds")

        return put(row[0], k), put(row[1], v)

    def attend(self, q: jax.Array, row: gemma.KV) -> jax.Array:
        """The tokens' queries [B, T, N, H] over their own rows (the first B of R)."""
        b = q.shape[0]
        return gemma.attend(q, [(row[0][:b], row[1][:b])], self.mask)


def prompt_geometry(cache: PrefixCache, t: int) -> tuple[jax.Array, jax.Array]:
    """Positions [B, T] and mask [B, T, P + T] of T causal tokens right after each prefix of
    `cache`, which they attend to as one segment, then to each other (`extend_prefix`)."""
    b, p_len = cache.mask.shape
    positions = cache.valid_len[:, None] + jnp.arange(t)[None, :]
    causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
    mask = jnp.concatenate(
        [
            jnp.broadcast_to(cache.mask[:, None, :], (b, t, p_len)),
            jnp.broadcast_to(causal[None], (b, t, t)),
        ],
        axis=-1,
    )
    return positions, mask


def extend_and_start(
    params: Params,
    cfg: ModelConfig,
    rows: LayerKV,
    prefix_mask: jax.Array,
    ext_len: jax.Array,
    tokens: jax.Array,
    slot: jax.Array,
    cache: PrefixCache,
    prompt: jax.Array,
    n_prompt: jax.Array,
) -> tuple[LayerKV, jax.Array, jax.Array]:
    """`extend` of one token per row and `extend_prefix` of a new request's stream prompt,
    in one pass that reads every weight once for both.

    A batch-1 prompt pass reads all VLM weights as a decode step does, so on its own it
    costs about a step; riding in a step, its tokens are a few more rows of the same dots.
    The two token sets share every dense op (flattened into one sequence of B + E tokens)
    and differ only in attention: each row's token attends to its own row, written in
    place as `extend` does; the prompt attends to the prefix cache read in place and to
    itself causally, as `extend_prefix` does.

    rows, prefix_mask, ext_len, tokens [B, 1]: as `extend`; slot: the free row (of the
    first B, which are not live there) the request starts in; cache: the frame's prefix
    [1, P]; prompt [1, E] with n_prompt [1] real. Each layer writes every K/V it keeps
    (the rows' new tokens, and the prefix and the prompt into row `slot`, as `seed_row`
    does) before its attention reads them. Returns the updated rows, the rows' logits
    [B, V] and the prompt's [1, V] at its last real token.
    """
    b, e = tokens.shape[0], prompt.shape[1]
    p_len, capacity = prefix_mask.shape[1], rows[0][0].shape[1]
    rows_at = RowGeometry.of(prefix_mask, ext_len, 1, capacity)
    prompt_positions, prompt_mask = prompt_geometry(cache, e)
    # One scatter per array writes the rows' new K/V and the new row's prefix and prompt
    # (B + P + E entries): XLA keeps a single scatter in place, where a scatter followed
    # by a dynamic update of the same array made it copy the whole array (twice). The new
    # row's own step write, which it skips, goes to its last slot, outside the seeded
    # range, so no two entries collide.
    own = jnp.where(jnp.arange(b) == slot, capacity - 1, rows_at.slots[:, 0])
    at_row = jnp.concatenate([jnp.arange(b), jnp.full((p_len + e,), slot)])
    at_slot = jnp.concatenate([own, jnp.arange(p_len + e)])
    llm = params["PaliGemma"]["llm"]
    # One sequence [1, B + E]: the rows' tokens first, then the prompt's.
    x = gemma.embed_tokens(llm, jnp.concatenate([tokens.reshape(1, b), prompt], axis=1))
    positions = jnp.concatenate([rows_at.positions.reshape(1, b), prompt_positions], axis=1)

    def of_rows(a: jax.Array) -> jax.Array:  # [1, B + E, ...] -> the rows' [B, 1, ...]
        return a[0, :b, None]

    def put(a: jax.Array, new: jax.Array, prefix: jax.Array) -> jax.Array:
        """The sequence's K or V `new` [1, B + E, K, H] and the prefix's into the pool."""
        entries = jnp.concatenate([new[0, :b], prefix[0], new[0, b:]]).astype(a.dtype)
        return a.at[at_row, at_slot].set(entries, mode="promise_in_bounds")

    new_rows: LayerKV = []
    for p, row, prefix_kv in zip(llm["layers"], rows, cache.kv, strict=True):
        q, k, v = gemma.attention_inputs(p[0], x, positions, cfg.rope_max_wavelength)
        prompt_kv = (k[:, b:], v[:, b:])
        row = (put(row[0], k, prefix_kv[0]), put(row[1], v, prefix_kv[1]))
        new_rows.append(row)
        on_rows = rows_at.attend(of_rows(q), row)
        on_prompt = gemma.attend(q[:, b:], [prefix_kv, prompt_kv], prompt_mask)
        attended = jnp.concatenate([on_rows.reshape(1, b, *on_rows.shape[2:]), on_prompt], axis=1)
        x = gemma.after_attention(p[0], x, attended)
    last = jnp.concatenate([x[0, :b], x[0, b + n_prompt - 1]], axis=0)  # [B + 1, D]
    logits = gemma.lm_logits(llm, last)
    return new_rows, logits[:b], logits[b:]


def seed_row(rows: LayerKV, slot: jax.Array, prefix: LayerKV, prompt: LayerKV) -> LayerKV:
    """Row `slot` of `rows` [R, C, K, H] starts a request: prefix K/V [1, P, K, H] at slot
    0, the stream prompt's [1, E_p, K, H] right after it.

    In place when `rows` is donated: only P + E_p slots are written, in one update (two,
    the second fused with the prompt's slicing, made XLA copy the whole array). The slots
    past the prompt keep whatever an earlier request left there; the extension mask hides
    each one until decoding writes it, so nothing needs clearing.
    """

    def write(a: jax.Array, head: jax.Array, tail: jax.Array) -> jax.Array:
        both = jnp.concatenate([head, tail], axis=1).astype(a.dtype)
        return jax.lax.dynamic_update_slice(a, both, (slot, 0, 0, 0))

    return [
        (write(k, pk, qk), write(v, pv, qv))
        for (k, v), (pk, pv), (qk, qv) in zip(rows, prefix, prompt, strict=True)
    ]


def cache_rows(cache: PrefixCache, capacity: int) -> LayerKV:
    """Fresh language cache rows [B, capacity, K, H] holding `cache`'s prefix K/V."""

    def grow(a: jax.Array) -> jax.Array:
        pad = jnp.zeros((a.shape[0], capacity - a.shape[1], *a.shape[2:]), a.dtype)
        return jnp.concatenate([a, pad], axis=1)

    return [(grow(k), grow(v)) for k, v in cache.kv]


# ----------------------------------------------------------------------------- oracles


def make_attn_mask(valid: jax.Array, causal_start: jax.Array) -> jax.Array:
    """[B, S] validity and [B, S] 'starts a new causal block' flags -> bool [B, S, S].

    Token i attends to token j iff both are valid and j's block index <= i's.
    """
    block = jnp.cumsum(causal_start, axis=1)
    return (block[:, None, :] <= block[:, :, None]) & valid[:, None, :] & valid[:, :, None]


@functools.partial(jax.jit, static_argnames=("cfg", "steps"))
def sample_actions(
    params: Params,
    cfg: ModelConfig,
    inputs: PrefixInputs,
    noise: jax.Array,
    steps: int,
    plan: jax.Array | None = None,
    n_plan: jax.Array | None = None,
) -> jax.Array:
    """Reference: every Euler step recomputes prefix and actions together, no cache.

    plan: int32 [B, E] text tokens between prefix and actions, causal, the first n_plan
    [B] of them real (a two-stage robot's prompt and answer, `model/plan.py`).
    """
    prefix, pmask = embed_prefix(params, cfg, inputs)
    llm = params["PaliGemma"]["llm"]
    starts = jnp.zeros_like(pmask)
    if plan is not None:
        prefix = jnp.concatenate([prefix, gemma.embed_tokens(llm, plan)], axis=1)
        pmask = jnp.concatenate([pmask, jnp.arange(plan.shape[1]) < n_plan[:, None]], axis=1)
        starts = jnp.concatenate([starts, jnp.ones(plan.shape, bool)], axis=1)
    b, horizon, _ = noise.shape
    valid = jnp.concatenate([pmask, jnp.ones((b, horizon), bool)], axis=1)
    first = jnp.broadcast_to(jnp.arange(horizon) == 0, (b, horizon))  # one action block
    starts = jnp.concatenate([starts, first], axis=1)
    mask = make_attn_mask(valid, starts)
    positions = jnp.cumsum(valid, axis=1) - 1
    pos_p, pos_a = positions[:, : prefix.shape[1]], positions[:, prefix.shape[1] :]
    dt = -1.0 / steps
    no_cache = [[] for _ in llm["layers"]]

    def step(i: jax.Array, x_t: jax.Array) -> jax.Array:
        t = jnp.full((b,), 1.0 + i * dt, jnp.float32)
        mods = expert_mods(llm, time_embedding(params, t, cfg.expert.width))
        tokens = action_tokens(params, x_t)
        (_, out), _ = run_layers(llm, cfg, [prefix, tokens], [pos_p, pos_a], no_cache, mask, mods)
        out = gemma.final_norm(llm, out, ACTION_EXPERT, mods.final)
        return x_t + dt * action_velocity(params, out)

    return jax.lax.fori_loop(0, steps, step, noise)


@functools.partial(jax.jit, static_argnames=("cfg", "max_new"))
def full_logits(
    params: Params,
    cfg: ModelConfig,
    inputs: PrefixInputs,
    ext: jax.Array,
    n_ext: jax.Array,
    max_new: int,
) -> jax.Array:
    """Reference: next-token logits [B, V] after prefix + the first n_ext of ext [B, max_new]
    tokens, recomputing the whole sequence with the causal extension mask."""
    del max_new  # part of the static shape of `ext`; named for the jit cache
    prefix, pmask = embed_prefix(params, cfg, inputs)
    llm = params["PaliGemma"]["llm"]
    b, e = ext.shape
    x = jnp.concatenate([prefix, gemma.embed_tokens(llm, ext)], axis=1)
    valid = jnp.concatenate([pmask, jnp.arange(e)[None, :] < n_ext[:, None]], axis=1)
    starts = jnp.concatenate([jnp.zeros_like(pmask), jnp.ones((b, e), bool)], axis=1)
    positions = jnp.cumsum(valid, axis=1) - 1
    no_cache = [[] for _ in llm["layers"]]
    (h, _), _ = run_layers(
        llm,
        cfg,
        [x, None],
        [positions, None],
        no_cache,
        make_attn_mask(valid, starts),
        None,
    )
    last = jnp.take_along_axis(h, (prefix.shape[1] + n_ext - 1)[:, None, None], axis=1)[:, 0]
    return gemma.lm_logits(llm, last)


def generate_text(
    params: Params,
    cfg: ModelConfig,
    inputs: PrefixInputs,
    prompt: list[int],
    n: int,
    eos_id: int | None = None,
) -> list[int]:
    """Reference greedy generation for one observation (batch 1): recompute per token."""
    max_new = len(prompt) + n
    seq = list(prompt)
    out: list[int] = []
    for _ in range(n):
        ext = jnp.asarray([seq + [0] * (max_new - len(seq))], jnp.int32)
        logits = full_logits(params, cfg, inputs, ext, jnp.asarray([len(seq)]), max_new)
        token = int(jnp.argmax(logits[0]))
        out.append(token)
        if token == eos_id:
            break
        seq.append(token)
    return out
