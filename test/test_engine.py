"""The engine end to end: OxyGen computes what its baselines compute, at a flat cost.

The three modes share phase 1 and differ only in how language work is scheduled, so on the
same observations they must give the same action chunks (to float32 rounding) and, per
request id, the same tokens, texts and finish reasons. The other tests hold the engine to
its operational promises: no compilation after warm-up whatever the batch does, flat
memory over hundreds of frames, a step budget that follows the latency model, a full pool
handled by policy, and recovery from reset and from bad input.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import psutil
import pytest
from engine_harness import MAX_NEW, ROWS, engine_config, spread_eos, streams
from engine_harness import tiny_policy as make_policy

from oxygen_core.engine import make_engine
from oxygen_core.engine.verify import RequestTrace, Trace, compare, drain, main, run_engine
from oxygen_core.engine.verify import synthetic_observations as make_observations
from oxygen_core.observation import ObservationError

FRAMES = 8  # the instruction changes at frame 4
MODES = ("oxygen", "shared", "isolated")


@pytest.fixture(scope="module")
def policy():
    return make_policy()


@pytest.fixture(scope="module")
def observations(policy):
    return make_observations(policy, FRAMES, seed=4)


def run(policy, observations, mode, **changes) -> Trace:
    return run_engine(make_engine(policy, engine_config(engine_mode=mode, **changes)), observations)


def run_all(policy, observations, **changes) -> dict[str, Trace]:
    traces = {mode: run(policy, observations, mode, **changes) for mode in MODES}
    for mode, trace in traces.items():
        # A request that waited for a slot would start from a later prefix: not comparable.
        assert all(r.queued == r.rejected == 0 for r in trace.language), mode
    return traces


def assert_same(test: Trace, reference: Trace) -> None:
    assert sorted(test.requests) == sorted(reference.requests)
    for rid, req in reference.requests.items():
        assert test.requests[rid].outcome() == req.outcome(), f"request {rid}"
    for a, b in zip(test.actions, reference.actions, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


def streamed_text(trace: Trace) -> dict[int, str]:
    """What a subscriber that appends every text delta ends up with, per request."""
    text: dict[int, str] = {}
    for result in trace.language:
        for event in result.events:
            text[event.request_id] = text.get(event.request_id, "") + event.text_delta
    return text


def lifetime(n_tokens: int, k: int) -> int:
    """Language phases an OxyGen request spans: first token at admission, then k per phase."""
    return max(1, math.ceil((n_tokens - 1) / k))


# --------------------------------------------------------------------------- equivalence


@pytest.mark.parametrize(
    ("k", "n", "steps"),
    [
        pytest.param(1, 3, 10, id="k1-N3-S10-memory-N12-outlives-11-frames"),
        pytest.param(2, 5, 4, id="k2-N5-S4"),
        pytest.param(3, 8, 10, id="k3-N8-S10-partial-last-frame"),
        pytest.param(3, 2, 2, id="k3-N2-S2-k-above-N"),
        pytest.param(2, 1, 10, id="k2-N1-S10-admission-only"),
    ],
)
def test_oxygen_shared_and_isolated_agree(policy, observations, k, n, steps):
    traces = run_all(
        policy, observations, steps_per_frame=k, denoise_steps=steps, streams=streams(n)
    )
    assert_same(traces["oxygen"], traces["isolated"])
    assert_same(traces["shared"], traces["isolated"])
    requests = traces["oxygen"].requests
    assert [r.stream for r in requests.values()].count("narration") == FRAMES
    assert [r.stream for r in requests.values()].count("memory") == 2
    assert len({tuple(r.token_ids) for r in requests.values()}) > 2  # real, varied text
    for rid, req in requests.items():
        assert req.events == lifetime(len(req.token_ids), k), f"request {rid}"
    assert streamed_text(traces["oxygen"]) == {rid: r.text for rid, r in requests.items()}
    assert all(r.events == 1 for r in traces["isolated"].requests.values())
    if k == 1:
        memory = requests[1]
        assert (memory.stream, len(memory.token_ids), memory.events) == ("memory", MAX_NEW, 11)


@pytest.mark.parametrize(
    ("k", "n"),
    [
        pytest.param(1, 3, id="k1-N3"),
        pytest.param(2, 5, id="k2-N5"),
        pytest.param(3, 2, id="k3-N2-k-above-N"),
        pytest.param(2, 1, id="k2-N1"),
    ],
)
def test_requests_started_in_the_first_step_agree_with_isolated(policy, observations, k, n):
    """admit_in_step: each frame's first new request rides in the decode call's first
    step (k tokens in its first frame), any other is admitted apart (1 + k): the same
    tokens as the baselines either way."""
    rows = ROWS + 2  # requests live a frame longer at k = 1
    traces = run_all(
        policy,
        observations,
        steps_per_frame=k,
        streams=streams(n),
        admit_in_step=True,
        max_active_requests=rows,
        batch_buckets=(rows,),
    )
    assert_same(traces["oxygen"], traces["isolated"])
    requests = traces["oxygen"].requests
    frames = {r.origin_frame for r in requests.values()}
    riders = {min(i for i, r in requests.items() if r.origin_frame == f) for f in frames}
    assert len(riders) == FRAMES and len(requests) == FRAMES + 2  # two admitted apart
    for rid, req in requests.items():
        n_tokens = len(req.token_ids)
        expected = math.ceil(n_tokens / k) if rid in riders else lifetime(n_tokens, k)
        assert req.events == expected, f"request {rid}"


def test_an_engine_without_streams_acts_the_same_in_every_mode(policy, observations):
    """Actions only (no language stream configured): same chunks as with streams."""
    reference = run(policy, observations, "isolated")
    for mode in MODES:
        trace = run(policy, observations, mode, streams=())
        assert not trace.requests
        for a, b in zip(trace.actions, reference.actions, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


def test_sampling_draws_the_same_tokens_in_every_mode(policy, observations):
    sampled = streams(7, temperature=0.8)
    traces = run_all(policy, observations, steps_per_frame=3, streams=sampled)
    assert_same(traces["oxygen"], traces["isolated"])
    assert_same(traces["shared"], traces["isolated"])
    greedy = run(policy, observations, "shared", steps_per_frame=3, streams=streams(7)).requests
    differs = [
        rid
        for rid, req in traces["isolated"].requests.items()
        if req.stream == "narration" and req.token_ids != greedy[rid].token_ids
    ]
    assert len(differs) >= FRAMES // 2


def test_eos_mid_batch(policy, observations):
    def shared(params):
        on = dataclasses.replace(policy, params=params)
        return run(on, observations, "shared", streams=streams(10)).requests.values()

    def eos_lengths(params):
        return [len(r.token_ids) for r in shared(params) if r.finish_reason == "eos"]

    plain = [r.token_ids for r in shared(policy.params)]
    eos_policy = dataclasses.replace(policy, params=spread_eos(policy.params, plain, eos_lengths))
    traces = run_all(eos_policy, observations, steps_per_frame=3, streams=streams(10))
    assert_same(traces["oxygen"], traces["isolated"])
    assert_same(traces["shared"], traces["isolated"])
    requests = traces["oxygen"].requests.values()
    ends = {len(r.token_ids) for r in requests if r.finish_reason == "eos"}
    assert len(ends) >= 2, f"EOS at one length only: {ends}"
    assert any(r.finish_reason == "max_tokens" for r in requests)
    # Some phase finished a request at EOS while another row of its batch decoded on.
    assert any(
        {e.finish_reason for e in res.events} >= {"eos", None} for res in traces["oxygen"].language
    )


# --------------------------------------------------------------------------- steady state


def drive(engine, observations, demands) -> Trace:
    """Frames with `demands[i]` on-demand narration requests in frame i, then drain."""
    trace = Trace()
    for frame, demand in enumerate(demands):
        engine.act(observations[frame % FRAMES])
        for _ in range(demand):
            engine.request("narration")
        trace.record(engine.language())
    drain(engine, trace)
    return trace


def test_no_compilation_after_warmup_while_the_batch_grows_and_shrinks(policy, observations):
    on_demand = streams(4, narration="on_demand", memory="on_demand")
    cfg = engine_config(steps_per_frame=2, batch_buckets=(1, 2, 4), streams=on_demand)
    engine = make_engine(policy, cfg)
    engine.warmup(observations[0])
    compiled = engine.compile_count()
    demands = [3, 0, 1, 0, 2, 0, 0, 1] * 4
    trace = drive(engine, observations, demands)
    assert engine.compile_count() == compiled
    buckets = [result.bucket for result in trace.language]
    assert set(buckets) == {0, 1, 2, 4}
    assert any(a > b > 0 for a, b in zip(buckets, buckets[1:], strict=False))  # shrinks too
    # Rows keep their tokens whichever bucket they decode in.
    shared = make_engine(policy, dataclasses.replace(cfg, engine_mode="shared"))
    assert_same(trace, drive(shared, observations, demands))


def test_memory_stays_flat_over_hundreds_of_frames(policy, observations):
    engine = make_engine(policy, engine_config(steps_per_frame=2, streams=streams(5)))
    process = psutil.Process()

    def frames(count: int) -> None:
        for frame in range(count):
            engine.act(observations[frame % FRAMES])
            result = engine.language()
            assert result.queued == result.rejected == 0
            assert len(engine.text.tokens) <= ROWS

    frames(40)  # warm-up: compilation, allocator pools
    before = process.memory_info().rss
    frames(400)
    growth = process.memory_info().rss - before
    # Measured: ~0.1 MiB. Keeping one frame's prefix cache (~25 KiB here) would add 10 MiB.
    assert growth < 3 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB over 400 frames"


# --------------------------------------------------------------------------- step budget


def auto_engine(policy, observations, **changes):
    """A warmed-up k='auto' engine with on-demand streams and k_max=3."""
    on_demand = streams(MAX_NEW, narration="on_demand", memory="on_demand")
    engine = make_engine(
        policy,
        engine_config(steps_per_frame="auto", max_decode_tokens=3, streams=on_demand, **changes),
    )
    engine.warmup(observations[0])
    assert set(engine.latency.step_s) == {ROWS} and engine.latency.admit_s > 0
    return engine


def test_auto_k_decodes_k_min_while_the_pool_keeps_up(policy, observations):
    """Same tokens in the long run, fewer steps per frame: the batch stays large."""
    engine = auto_engine(policy, observations)
    engine.act(observations[1])
    engine.request("narration")
    engine.request("memory")
    first = engine.language(time_left_s=10.0)
    assert (first.k, [len(e.token_ids) for e in first.events]) == (1, [2, 2])


def test_auto_k_drains_a_backlog_with_the_largest_k_that_fits(policy, observations):
    engine = auto_engine(policy, observations)
    engine.latency.calibrate(ROWS, step_s=1 / 16, call_s=0.0)
    engine.latency.admit_s, engine.latency.slack = 1 / 8, 0.0  # exact arithmetic below
    engine.act(observations[1])
    for _ in range(ROWS + 2):  # two more requests than rows: a backlog
        engine.request("narration")
    first = engine.language(time_left_s=ROWS / 8 + 2 / 16)  # four admissions + two steps
    assert (first.k, first.queued, len(first.events)) == (2, 2, ROWS)
    assert [len(e.token_ids) for e in first.events] == [3] * ROWS
    assert engine.latency.step_s[ROWS] != 1 / 16  # refined from the measured phase
    engine.latency.step_s[ROWS] = 1 / 16
    starved = engine.language(time_left_s=1 / 32)
    assert starved.k == 1  # k_min: language never starves, even with no time left
    assert engine.language(time_left_s=10.0).k == 3  # capped at k_max


def test_auto_k_uses_the_frame_budget_minus_phase_one(policy, observations):
    for budget, expected in [(1e-6, 1), (1e3, 3)]:
        engine = auto_engine(policy, observations, frame_budget_s=budget)
        engine.act(observations[1])
        for _ in range(ROWS + 1):
            engine.request("narration")
        assert engine.language().k == expected


def test_k_never_exceeds_the_tokens_any_live_row_still_needs(policy, observations):
    on_demand = streams(2, narration="on_demand", memory="on_demand")
    engine = make_engine(policy, engine_config(steps_per_frame=3, streams=on_demand))
    engine.warmup(observations[0])
    engine.act(observations[1])
    engine.request("narration")
    result = engine.language()  # one token from admission, one more is all it needs
    assert (result.k, [len(e.token_ids) for e in result.events]) == (1, [2])
    assert result.events[0].finished


# --------------------------------------------------------------------------- pool full


def burst(engine, observations, frame, count, max_tokens):
    engine.act(observations[frame])
    for _ in range(count):
        engine.request("narration", max_tokens=max_tokens)
    return engine.language()


def pool_full_engine(policy, pool_full):
    on_demand = streams(MAX_NEW, narration="on_demand", memory="on_demand")
    cfg = engine_config(
        steps_per_frame=1, pool_full_policy=pool_full, max_queued_requests=1, streams=on_demand
    )
    return make_engine(policy, cfg)


def counts(result):
    return result.admitted, result.rejected, result.queued, result.pool_used


def test_pool_full_queue(policy, observations):
    engine = pool_full_engine(policy, "queue")
    first = burst(engine, observations, 0, 6, max_tokens=2)
    assert counts(first) == (4, 1, 1, 0)  # all four finished within the phase
    assert [(e.request_id, len(e.token_ids), e.finish_reason) for e in first.events] == [
        (i, 2, "max_tokens") for i in range(4)
    ]
    second = burst(engine, observations, 1, 0, max_tokens=2)
    assert counts(second) == (1, 0, 0, 0)
    assert [(e.request_id, e.origin_frame) for e in second.events] == [(4, 1)]


def test_pool_full_skip(policy, observations):
    engine = pool_full_engine(policy, "skip")
    assert counts(burst(engine, observations, 0, 6, max_tokens=2)) == (4, 2, 0, 0)
    assert counts(burst(engine, observations, 1, 0, max_tokens=2)) == (0, 0, 0, 0)


def test_pool_full_evict_oldest(policy, observations):
    engine = pool_full_engine(policy, "evict_oldest")
    first = burst(engine, observations, 0, 4, max_tokens=MAX_NEW)
    texts = {e.request_id: e.text for e in first.events}
    second = burst(engine, observations, 1, 2, max_tokens=MAX_NEW)
    assert counts(second) == (2, 0, 0, 4)
    evicted = [e for e in second.events if e.finish_reason == "evicted"]
    assert [(e.request_id, e.token_ids, e.finished) for e in evicted] == [
        (0, (), True),
        (1, (), True),
    ]
    # The final text; a streamed text may have held back an incomplete UTF-8 character.
    assert all(e.text.startswith(texts[e.request_id]) for e in evicted)
    live = {e.request_id: len(e.token_ids) for e in second.events if not e.finished}
    assert live == {2: 1, 3: 1, 4: 2, 5: 2}  # survivors decode on; newcomers start


# --------------------------------------------------------------------------- lifecycle


def test_reset_drops_every_request_and_the_next_frame_starts_clean(policy, observations):
    engine = make_engine(policy, engine_config(steps_per_frame=1, streams=streams(MAX_NEW)))
    engine.act(observations[0])
    engine.language()
    engine.request("narration")
    engine.reset()
    assert (engine.scheduler.active, len(engine.scheduler.queue)) == ({}, 0)
    assert engine.text.tokens == {} and bool(np.asarray(engine.pool.done).all())
    with pytest.raises(RuntimeError, match="call act"):  # no request on a pre-reset prefix
        engine.language()
    engine.act(observations[1])
    after = engine.language()
    fresh = make_engine(policy, engine_config(steps_per_frame=1, streams=streams(MAX_NEW)))
    fresh.act(observations[1])
    clean = fresh.language()
    # Narration and memory (the forgotten instruction counts as new) start over.
    assert [(e.request_id, e.stream) for e in after.events] == [(2, "narration"), (3, "memory")]
    assert [e.token_ids for e in after.events] == [e.token_ids for e in clean.events]


@pytest.mark.parametrize("mode", ["oxygen", "isolated"])
def test_restart_runs_like_a_new_engine(policy, observations, mode):
    """What an evaluation worker relies on to reuse one compiled engine across bags: after
    restart, frames and request ids count from 0 again, so sampled tokens (their keys are
    (seed, request id)) are those of a new engine."""
    cfg = engine_config(
        engine_mode=mode, steps_per_frame=1, streams=streams(MAX_NEW, temperature=0.8)
    )

    def frames(engine) -> list:
        out = []
        for obs in observations[:3]:
            action = engine.act(obs)
            events = engine.language().events
            out.append((action.frame, [(e.request_id, e.stream, e.token_ids) for e in events]))
        return out

    engine = make_engine(policy, cfg)
    first = frames(engine)
    engine.restart()
    again = frames(engine)
    assert again == first == frames(make_engine(policy, cfg))
    assert [f for f, _ in again] == [0, 1, 2] and again[0][1][0][0] == 0
    engine.reset()  # reset alone keeps counting, as a reactivated node does
    assert frames(engine)[0][0] == 3


def test_buckets_larger_than_the_pool_are_clipped_to_it(policy, observations):
    """A robot config may keep power-of-two buckets over a pool of any size."""
    engine = make_engine(
        policy, engine_config(steps_per_frame=1, max_active_requests=3, batch_buckets=(1, 2, 3))
    )
    assert engine.scheduler.buckets == (1, 2, 3)
    engine.warmup(observations[0])
    engine.act(observations[1])
    for _ in range(3):
        engine.request("narration")
    result = engine.language()
    assert (result.bucket, result.batch, len(result.events)) == (3, 3, 3)


def test_auto_k_without_any_deadline_decodes_and_loses_no_request(policy, observations):
    """No time_left_s and no frame_budget_s (verify's drain): an unbounded budget."""
    engine = auto_engine(policy, observations)
    engine.act(observations[1])
    for _ in range(ROWS + 1):  # a backlog: the largest k that fits, here k_max
        engine.request("narration")
    result = engine.language()
    assert (result.k, len(result.events)) == (3, ROWS)
    assert all(len(e.token_ids) == 4 for e in result.events)  # admission's token + 3


def test_bad_observation_raises_and_the_engine_carries_on(policy, observations):
    engine = make_engine(policy, engine_config(steps_per_frame=1, streams=streams(MAX_NEW)))
    engine.act(observations[0])
    engine.language()
    good = observations[1]
    bad = [
        (dataclasses.replace(good, state=good.state[:3]), r"state must have shape \(7,\)"),
        (dataclasses.replace(good, state=good.state * np.nan), "non-finite"),
        (dataclasses.replace(good, prompt="  "), "prompt is empty"),
    ]
    for obs, message in bad:
        with pytest.raises(ObservationError, match=message):
            engine.act(obs)
    assert engine.frame == 0
    assert engine.act(good).frame == 1
    events = engine.language().events
    assert [(e.request_id, len(e.token_ids)) for e in events] == [(0, 1), (1, 1), (2, 2)]


def test_language_before_any_frame_raises_and_admits_nothing(policy):
    engine = make_engine(policy, engine_config(steps_per_frame=1))
    engine.request("narration")
    with pytest.raises(RuntimeError, match="act"):
        engine.language()
    assert engine.scheduler.active == {}


def test_auto_k_without_warmup_raises_and_admits_nothing(policy, observations):
    engine = make_engine(policy, engine_config(steps_per_frame="auto", streams=streams(5)))
    engine.act(observations[0])
    with pytest.raises(ValueError, match="warm it up first"):
        engine.language(time_left_s=0.1)
    assert engine.scheduler.active == {}


def test_request_validates_stream_and_budget(policy):
    engine = make_engine(policy, engine_config())
    with pytest.raises(ValueError, match=r"max_tokens 13 outside \[1, 12\]"):
        engine.request("narration", max_tokens=MAX_NEW + 1)
    with pytest.raises(ValueError, match="unknown stream 'chat'"):
        engine.request("chat")


def test_a_bucket_larger_than_the_pool_is_refused(policy):
    """A decode over more rows than the pool has cannot run: refused when built."""
    with pytest.raises(ValueError, match=r"batch bucket 8 is larger than the KV pool \(6 rows\)"):
        make_engine(policy, engine_config(max_active_requests=6, batch_buckets=(1, 2, 4, 8)))


# --------------------------------------------------------------------------- oxygen-verify


@pytest.mark.parametrize("in_step", [True, False], ids=["admit-in-step", "admitted-apart"])
def test_verify_cli_reports_a_perfect_match(capsys, in_step):
    flags = [] if in_step else ["--admit-apart"]
    code = main(["--preset", "tiny", "--frames", "6", "--k", "2", "--N", "5", *flags])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["admit_in_step"] is in_step
    assert report["token_match"] == report["outcome_match"] == 1.0
    assert report["action_max_abs_diff"] <= 1e-4
    assert {k: report[k] for k in ("preset", "frames", "k", "N", "S", "requests")} == {
        "preset": "tiny",
        "frames": 6,
        "k": 2,
        "N": 5,
        "S": 10,
        "requests": 8,  # narration every frame, memory at frames 0 and 3
    }


def test_compare_counts_mismatched_and_missing_requests():
    def trace(actions, tokens):
        requests = {rid: RequestTrace("narration", 0, list(t)) for rid, t in tokens.items()}
        return Trace(actions=[np.asarray(a, np.float32) for a in actions], requests=requests)

    test = trace([[0.0, 1.0], [2.0, 2.5]], {0: [5, 6], 1: [7], 2: [8]})
    reference = trace([[0.0, 1.0], [2.0, 3.0]], {0: [5, 6], 1: [7, 1], 3: [9]})
    result = compare(test, reference)
    assert result["action_max_abs_diff"] == 0.5
    assert (result["requests"], result["token_match"]) == (4, 0.25)
    assert result["mismatched_requests"] == [1, 2, 3]


def test_compare_also_checks_texts_and_finish_reasons():
    same = {"stream": "memory", "origin_frame": 0, "token_ids": [5, 6]}
    test = Trace(requests={0: RequestTrace(**same, text="a b", finish_reason="eos")})
    reference = Trace(requests={0: RequestTrace(**same, text="a b", finish_reason="max_tokens")})
    result = compare(test, reference)
    assert (result["token_match"], result["outcome_match"]) == (1.0, 0.0)
    assert result["mismatched_requests"] == [0]


def test_verify_cli_rejects_a_zero_k(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--k", "0"])
    assert exit_info.value.code == 2
    assert "--k must be at least 1, got 0" in capsys.readouterr().err


def test_start_noise_scale_scales_the_seeded_draw_and_at_zero_acts_on_the_mean_path(
    policy, observations
):
    """start_noise_scale s: the frame acts as on s times its seeded draw, given; at 0 every
    seed gives the same chunk, the flow's path from the zero start."""
    half = make_engine(policy, engine_config(start_noise_scale=0.5))
    given = make_engine(policy, engine_config())
    draw = policy.noise((given.cfg.seed, given.frame + 1))
    np.testing.assert_array_equal(
        half.act(observations[0]).actions, given.act(observations[0], noise=draw[0] * 0.5).actions
    )
    zero = [make_engine(policy, engine_config(start_noise_scale=0.0, seed=s)) for s in (0, 7)]
    first, second = (engine.act(observations[0]).actions for engine in zero)
    np.testing.assert_array_equal(first, second)
    assert not np.allclose(first, make_engine(policy, engine_config()).act(observations[0]).actions)


def test_given_noise_replaces_the_seeded_draw_and_bad_noise_is_refused(policy, observations):
    """Engine.act(noise=...), as openpi's Policy.infer takes it: the seeded draw passed in
    acts exactly as no noise does; another draw acts otherwise; a misshapen one is refused
    before the frame counts."""
    seeded = make_engine(policy, engine_config())
    given = make_engine(policy, engine_config())
    h, a = policy.config.action_horizon, policy.config.action_dim
    draw = policy.noise((given.cfg.seed, given.frame + 1))
    np.testing.assert_array_equal(
        given.act(observations[0], noise=draw[0]).actions, seeded.act(observations[0]).actions
    )
    other = given.act(observations[1], noise=np.zeros((h, a), np.float32)).actions
    assert not np.allclose(other, seeded.act(observations[1]).actions)
    frame = given.frame
    with pytest.raises(ValueError, match=rf"noise of shape \(1, {h}\), expected \({h}, {a}\)"):
        given.act(observations[2], noise=np.zeros((1, h), np.float32))
    assert given.frame == frame
