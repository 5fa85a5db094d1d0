"""The KV pool: rows written in place, per-row masks and positions, one packed result.

Requests of different ages and prefixes share one decode batch, so every row must behave
as if it were decoded alone. The reference is `pi05.generate_text`, which recomputes the
whole sequence (prefix, stream prompt, tokens so far) without any cache for every token.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from engine_harness import MAX_NEW, NARRATE, REMEMBER, ROWS, spread_eos, tiny_policy

from oxygen_core.config import EOS_ID, ModelConfig
from oxygen_core.engine import kv_pool
from oxygen_core.engine.verify import synthetic_observations
from oxygen_core.model import gemma, pi05

K_MAX = 2
N = 6  # tokens per request unless a test says otherwise
ORACLE_N = 10  # reference length: one compilation per stream prompt


@dataclasses.dataclass
class Bench:
    """A tiny model, four observations' prefix caches, and the pool geometry."""

    params: dict
    cfg: ModelConfig
    inputs: list[pi05.PrefixInputs]
    caches: list[pi05.PrefixCache]
    prompts: dict[str, list[int]]

    @property
    def prompt_len(self) -> int:
        return max(len(p) for p in self.prompts.values())

    @property
    def capacity(self) -> int:
        return self.cfg.prefix_len + self.prompt_len + MAX_NEW

    def pool(self) -> kv_pool.PoolState:
        return kv_pool.init_pool(self.cfg, ROWS, self.capacity)

    def request(self, prompt=NARRATE, max_tokens=N, stop_eos=True, temperature=0.0, key=0):
        ids = self.prompts[prompt]
        padded = np.zeros(self.prompt_len, np.int32)
        padded[: len(ids)] = ids
        return kv_pool.RowRequest(
            prompt=padded,
            n_prompt=np.int32(len(ids)),
            max_tokens=np.int32(max_tokens),
            stop_eos=np.bool_(stop_eos),
            temperature=np.float32(temperature),
            key=np.array([0, key], np.uint32),
        )

    def admit(self, pool, slot, frame, params=None, **request):
        params = self.params if params is None else params
        cache = self.caches[frame] if params is self.params else self.prefill(frame, params)
        req = self.request(**request)
        return kv_pool.admit(params, self.cfg, pool, np.int32(slot), cache, req)

    def decode(self, pool, k, params=None):
        params = self.params if params is None else params
        pool, packed = kv_pool.decode(params, self.cfg, pool, np.int32(k), ROWS, K_MAX)
        return pool, kv_pool.DecodeOutput.unpack(packed)

    def decode_starting(self, pool, k, slot, frame, **request):
        """A decode call in whose first step a new request starts in row `slot`."""
        start = kv_pool.RowStart(np.int32(slot), self.request(**request), self.caches[frame])
        pool, packed = kv_pool.decode(self.params, self.cfg, pool, np.int32(k), ROWS, K_MAX, start)
        return pool, kv_pool.DecodeOutput.unpack(packed)

    def prefill(self, frame, params):
        return pi05.prefill(params, self.cfg, self.inputs[frame])

    def oracle(self, frame, prompt=NARRATE, params=None, eos=None) -> list[int]:
        """Greedy tokens from the no-cache reference, stopping at `eos` if given."""
        params = self.params if params is None else params
        ids = self.prompts[prompt]
        return pi05.generate_text(params, self.cfg, self.inputs[frame], ids, ORACLE_N, eos)


@pytest.fixture(scope="module")
def bench() -> Bench:
    policy = tiny_policy()
    inputs = [policy.prefix_inputs(o) for o in synthetic_observations(policy, 4, seed=4)]
    return Bench(
        params=policy.params,
        cfg=policy.config,
        inputs=inputs,
        caches=[pi05.prefill(policy.params, policy.config, i) for i in inputs],
        prompts={s: policy.tokenizer.encode(s) for s in (NARRATE, REMEMBER)},
    )


def host(pool: kv_pool.PoolState) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Host copies of the per-row fields and of every layer's K and V (in that order).

    Copies, because the device buffers are donated to the next pool call."""
    fields = {f.name: np.array(getattr(pool, f.name)) for f in dataclasses.fields(pool)}
    del fields["kv"]
    return fields, [np.array(a) for kv in pool.kv for a in kv]


def emitted(out: kv_pool.DecodeOutput) -> dict[int, list[int]]:
    """Tokens per row from one decode output: the admission token, then the k steps."""
    return {row: out.emitted(row) for row in range(len(out.first))}


def layer0_keys(bench: Bench, frame: int, tokens: list[int]) -> np.ndarray:
    """K of `tokens` appended after frame's prefix, at layer 0, computed from scratch.

    At layer 0 a key depends only on the token and its position (valid prefix + index),
    so this checks where admit wrote the prompt and at which RoPE positions.
    """
    llm = bench.params["PaliGemma"]["llm"]
    layer = llm["layers"][0]
    x = gemma.embed_tokens(llm, jnp.asarray([tokens]))
    y, _ = gemma.rms_norm(x, layer[0]["attn_norm"], None)
    start = int(bench.caches[frame].valid_len[0])
    positions = start + jnp.arange(len(tokens))[None]
    _, k, _ = gemma.project_qkv(y, layer[0], positions, bench.cfg.rope_max_wavelength)
    return np.asarray(k[0])


# --------------------------------------------------------------------------- admit


def test_admit_replaces_one_row_and_leaves_the_others_alone(bench):
    pool = bench.pool()
    pool = bench.admit(pool, 0, frame=0, prompt=REMEMBER)
    pool = bench.admit(pool, 3, frame=2)
    pool = bench.admit(pool, 1, frame=1, prompt=REMEMBER)
    pool, _ = bench.decode(pool, 2)  # the old occupant of row 1 writes past its prompt
    fields_before, kv_before = host(pool)
    pool = bench.admit(pool, 1, frame=3, max_tokens=9, temperature=0.5, key=7, stop_eos=False)
    fields, kv = host(pool)

    others = [0, 2, 3]
    for name, value in fields_before.items():
        np.testing.assert_array_equal(fields[name][others], value[others], err_msg=name)
    for old, new in zip(kv_before, kv, strict=True):
        np.testing.assert_array_equal(new[others], old[others])
    p, n = bench.cfg.prefix_len, len(bench.prompts[NARRATE])
    cache = bench.caches[3]
    prefix_kv = [a for layer in cache.kv for a in layer]
    tail = p + bench.prompt_len
    for new, old, prefix in zip(kv, kv_before, prefix_kv, strict=True):
        np.testing.assert_array_equal(new[1, :p], np.asarray(prefix[0]))
        # Written in place: past the new prompt the old occupant's slots stay (masked).
        np.testing.assert_array_equal(new[1, tail:], old[1, tail:])
    expected_keys = layer0_keys(bench, 3, bench.prompts[NARRATE])
    np.testing.assert_allclose(kv[0][1, p : p + n], expected_keys, atol=1e-5)
    row = {name: value[1] for name, value in fields.items()}
    np.testing.assert_array_equal(row["prefix_mask"], np.asarray(cache.mask[0]))
    assert (row["ext_len"], row["n_gen"], row["max_tokens"]) == (n, 1, 9)
    assert (row["done"], row["fresh"], row["stop_eos"]) == (False, True, False)
    assert (row["temperature"], row["key"].tolist()) == (np.float32(0.5), [0, 7])


def test_admit_takes_the_first_token_from_the_last_prompt_position(bench):
    pool = bench.pool()
    rows = [(0, NARRATE), (1, NARRATE), (0, REMEMBER)]
    for slot, (frame, prompt) in enumerate(rows):
        pool = bench.admit(pool, slot, frame, prompt=prompt)
    expected = [bench.oracle(f, s)[0] for f, s in rows]
    assert np.asarray(pool.last_token)[:3].tolist() == expected
    # Rows with different prefixes or prompts see different first tokens in this model.
    assert len(set(expected)) > 1


def test_a_row_admitted_over_an_old_occupant_decodes_as_if_alone(bench):
    """The old occupant's longer prompt and decoded tokens stay in the row's slots past
    the new prompt; the extension mask must hide each until decoding overwrites it."""
    pool = bench.admit(bench.pool(), 0, frame=0, prompt=REMEMBER)
    pool, _ = bench.decode(pool, K_MAX)
    pool = bench.admit(pool, 0, frame=1)
    got: list[int] = []
    for _ in range(3):
        pool, out = bench.decode(pool, K_MAX)
        got += out.emitted(0)
    assert got == bench.oracle(1)[:N]


# --------------------------------------------------------------------------- decode


def test_rows_of_different_ages_decode_as_if_each_were_alone(bench):
    pool = bench.pool()
    got: dict[int, list[int]] = {row: [] for row in range(ROWS)}
    schedule = [  # (admissions this frame as (slot, frame, max_tokens), k)
        ([(0, 0, 6)], 2),
        ([(1, 1, 6), (2, 2, 4)], 2),
        ([], 2),
        ([], 2),
    ]
    for admissions, k in schedule:
        for slot, frame, n in admissions:
            pool = bench.admit(pool, slot, frame, max_tokens=n)
        pool, packed = bench.decode(pool, k)
        for row, tokens in emitted(packed).items():
            got[row] += tokens
    assert got == {0: bench.oracle(0)[:N], 1: bench.oracle(1)[:N], 2: bench.oracle(2)[:4], 3: []}
    assert len({tuple(t) for t in got.values() if t}) == 3
    # Positions advanced only while live: prompt (2) + fed tokens (all but the last).
    assert np.asarray(pool.ext_len).tolist()[:3] == [2 + 5, 2 + 5, 2 + 3]
    assert packed.done.tolist() == [True] * 4  # every row done or free
    assert np.asarray(pool.n_gen).tolist()[:3] == [6, 6, 4]


def test_a_request_started_in_the_first_step_decodes_as_if_admitted_apart(bench):
    """Rows of other frames and ages keep decoding while new ones start inside the step:
    every row's tokens are the oracle's, each new row's first one arriving from the step
    it rode in (reported as its admission token), then one per later step."""
    pool = bench.admit(bench.pool(), 0, frame=0, prompt=REMEMBER, max_tokens=ORACLE_N)
    got: dict[int, list[int]] = {row: [] for row in range(ROWS)}
    for slot, frame, k in [(1, 1, 2), (2, 2, 1), (3, 3, 2)]:
        pool, out = bench.decode_starting(pool, k, slot, frame, max_tokens=N)
        assert out.first[slot] >= 0 and out.tokens[0, slot] == -1  # it sat out step 1
        for row, tokens in emitted(out).items():
            got[row] += tokens
    assert len(got[0]) == 1 + 2 + 1 + 2  # admitted apart: its token, then k per call
    assert [len(got[row]) for row in (1, 2, 3)] == [2 + 1 + 2, 1 + 2, 2]  # k from its call
    for _ in range(3):
        pool, out = bench.decode(pool, K_MAX)
        for row, tokens in emitted(out).items():
            got[row] += tokens
    assert got[0] == bench.oracle(0, REMEMBER)
    assert {row: got[row] for row in (1, 2, 3)} == {f: bench.oracle(f)[:N] for f in (1, 2, 3)}


def test_a_start_with_no_step_leaves_the_other_rows_alone(bench):
    """k = 0: the new request starts and reports its first token; no row decodes."""
    pool = bench.admit(bench.pool(), 0, frame=0)
    pool, out = bench.decode_starting(pool, 0, 1, frame=1)
    assert out.first.tolist() == [bench.oracle(0)[0], bench.oracle(1)[0], -1, -1]
    assert (out.tokens == -1).all()
    assert np.asarray(pool.n_gen).tolist()[:2] == [1, 1]
    pool, out = bench.decode(pool, 1)
    assert [out.emitted(0), out.emitted(1)] == [bench.oracle(0)[1:2], bench.oracle(1)[1:2]]


def test_decode_output_of_one_decode(bench):
    pool = bench.admit(bench.pool(), 0, frame=0)
    oracle = bench.oracle(0)
    pool, out = bench.decode(pool, 1)  # k < K_MAX: the second step row stays empty
    tokens = np.full((K_MAX, ROWS), -1)
    tokens[0, 0] = oracle[1]
    np.testing.assert_array_equal(out.tokens, tokens)
    assert out.first.tolist() == [oracle[0], -1, -1, -1]  # the admission token, reported once
    assert out.done.tolist() == [False, True, True, True]  # free rows count as done
    assert np.asarray(pool.n_gen).tolist() == [2, 0, 0, 0]  # tokens generated
    pool, out = bench.decode(pool, 2)
    tokens[:2, 0] = oracle[2:4]
    np.testing.assert_array_equal(out.tokens, tokens)
    assert out.first.tolist() == [-1] * ROWS
    assert np.asarray(pool.n_gen).tolist() == [4, 0, 0, 0]


def test_released_rows_emit_nothing_and_the_rest_continue(bench):
    pool = bench.admit(bench.pool(), 0, frame=0)
    pool = bench.admit(pool, 1, frame=1)
    pool, first = bench.decode(pool, 2)
    pool = kv_pool.release(bench.cfg, pool, np.array([0, 9], np.int32))  # 9: dropped
    pool, second = bench.decode(pool, 2)
    assert emitted(second)[0] == []
    assert second.done[0] and np.asarray(pool.n_gen)[0] == 3  # done, count frozen
    assert emitted(first)[1] + emitted(second)[1] == bench.oracle(1)[:5]


def test_decode_stops_once_every_row_is_done(bench):
    """No step runs over finished rows: the pool comes back bit for bit (a step would
    write the unfed last token's K/V and cost a full batch step)."""
    pool = bench.admit(bench.pool(), 0, frame=0, max_tokens=3)  # done at the call's last step
    pool, packed = bench.decode(pool, 2)
    assert emitted(packed)[0] == bench.oracle(0)[:3] and packed.done.tolist() == [True] * ROWS
    before = host(pool)
    pool, packed = bench.decode(pool, 2)
    after = host(pool)
    assert emitted(packed) == {row: [] for row in range(ROWS)}
    assert before[0].keys() == after[0].keys()
    assert all(np.array_equal(before[0][f], after[0][f]) for f in before[0])
    assert all(np.array_equal(a, b) for a, b in zip(before[1], after[1], strict=True))


def test_a_busy_pool_decodes_every_row_for_timing(bench):
    pool, packed = bench.decode(kv_pool.busy(bench.pool()), 2)
    assert packed.tokens[:2].min() >= 0 and not packed.done.any()  # all live


def test_eos_ends_each_row_at_its_own_step(bench):
    candidates = [(frame, prompt) for frame in range(4) for prompt in (NARRATE, REMEMBER)]

    def with_eos(params):
        return {row: bench.oracle(*row, params=params, eos=EOS_ID) for row in candidates}

    def eos_lengths(params):
        return [len(seq) for seq in with_eos(params).values() if seq[-1] == EOS_ID]

    params = spread_eos(bench.params, [bench.oracle(*row) for row in candidates], eos_lengths)
    expected = with_eos(params)
    stops = sorted((len(seq), row) for row, seq in expected.items() if seq[-1] == EOS_ID)
    early, late = stops[0][1], stops[-1][1]  # EOS at two different steps
    rows = [early, late, next(r for r in candidates if r not in (early, late))]
    run_on = bench.oracle(*early, params=params)  # stop_eos=False: EOS is just a token
    assert EOS_ID in run_on[:-1]

    pool = bench.pool()
    for slot, (frame, prompt) in enumerate(rows):
        pool = bench.admit(pool, slot, frame, params=params, prompt=prompt, max_tokens=ORACLE_N)
    pool = bench.admit(
        pool, 3, early[0], params=params, prompt=early[1], max_tokens=ORACLE_N, stop_eos=False
    )
    got: dict[int, list[int]] = {row: [] for row in range(ROWS)}
    for _ in range(ORACLE_N // 2):
        pool, packed = bench.decode(pool, 2, params=params)
        for row, tokens in emitted(packed).items():
            got[row] += tokens
    want = [expected[r] for r in rows] + [run_on]
    assert got == dict(enumerate(want))
    assert np.asarray(pool.n_gen).tolist() == [len(seq) for seq in want]


# --------------------------------------------------------------------------- misuse


def test_admit_outside_the_pool_raises(bench):
    pool = bench.admit(bench.pool(), ROWS - 1, frame=0)
    with pytest.raises(ValueError, match=f"slot {ROWS}"):
        bench.admit(pool, ROWS, frame=1)
