"""Chunk hand-over in the engine: replace is today's path, rtc continues the old chunk.

`act(obs, handover)` is shared by every engine mode, so the tiny engine of the engine
tests serves: "replace" must give the very bits it gave before handovers existed, "rtc"
must bring the new chunk's first d rows measurably closer to the previous chunk than
"replace" does, the same in OxyGen and isolated, and never compile after warm-up whatever
d and the executed steps are; "blend" is checked row by row against its ramp.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from engine_harness import engine_config, tiny_policy

from oxygen_core.bench.rtc import main as rtc_bench
from oxygen_core.engine import Handover, make_engine
from oxygen_core.engine.verify import Trace, drain, synthetic_observations
from oxygen_core.model import rtc

FRAMES = 6
PERIOD = 0.02


@pytest.fixture(scope="module")
def policy():
    return tiny_policy()


@pytest.fixture(scope="module")
def observations(policy):
    return synthetic_observations(policy, FRAMES, seed=4)


def chained(engine, observations, executed: int = 1) -> tuple[Trace, list]:
    """Every frame hands over the previous frame's chunk with `executed` rows run."""
    trace, results, previous = Trace(), [], None
    for obs in observations:
        handover = None if previous is None else Handover(previous, executed, PERIOD)
        result = engine.act(obs, handover)
        trace.actions.append(result.actions)
        trace.record(engine.language())
        results.append(result)
        previous = result.actions
    return trace, results


def test_replace_is_bit_identical_to_acting_without_a_handover(policy, observations):
    plain = make_engine(policy, engine_config())
    today = [plain.act(obs).actions for obs in observations]
    _, results = chained(make_engine(policy, engine_config(chunk_handover="replace")), observations)
    for got, want in zip(results, today, strict=True):
        np.testing.assert_array_equal(got.actions, want)
    assert {r.handover for r in results} == {"replace"}
    # rtc without a handover is the plain path too.
    rtc_engine = make_engine(policy, engine_config(chunk_handover="rtc"))
    np.testing.assert_array_equal(rtc_engine.act(observations[0]).actions, today[0])


@pytest.mark.parametrize("delay", [1, 2])
def test_rtc_pulls_the_first_d_rows_onto_the_previous_chunk(policy, observations, delay):
    errors = {}
    for mode in ("replace", "rtc"):
        engine = make_engine(policy, engine_config(chunk_handover=mode, rtc_delay_steps=delay))
        _, results = chained(engine, observations, executed=1)
        errors[mode] = [
            np.abs(new.actions[:delay] - rtc.shift_chunk(old.actions, 1, 4)[:delay]).max()
            for old, new in zip(results, results[1:], strict=False)
        ]
        assert {r.delay_steps for r in results[1:]} == {delay}
    assert {r.handover for r in results[1:]} == {"rtc"}
    # Random weights put the chunks 2.2-4.7 apart at the seam; guidance: within 0.07-0.27.
    assert max(errors["rtc"]) < 0.4 < 2.0 < min(errors["replace"])
    assert np.mean(errors["rtc"]) < np.mean(errors["replace"]) / 8


def test_oxygen_and_isolated_give_the_same_guided_actions(policy, observations):
    traces = {}
    for mode in ("oxygen", "isolated"):
        cfg = engine_config(
            engine_mode=mode, chunk_handover="rtc", rtc_delay_steps=1, steps_per_frame=2
        )
        engine = make_engine(policy, cfg)
        traces[mode], results = chained(engine, observations, executed=2)
        drain(engine, traces[mode])
        assert [r.handover for r in results] == ["replace"] + ["rtc"] * (FRAMES - 1)
        assert all(r.queued == r.rejected == 0 for r in traces[mode].language)
    for a, b in zip(traces["oxygen"].actions, traces["isolated"].actions, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
    requests = traces["isolated"].requests
    assert len(requests) == FRAMES + 2  # narration every frame, memory twice
    assert {i: r.outcome() for i, r in traces["oxygen"].requests.items()} == {
        i: r.outcome() for i, r in requests.items()
    }
    _, plain = chained(
        make_engine(policy, engine_config(steps_per_frame=2)), observations, executed=2
    )
    assert np.abs(traces["oxygen"].actions[1] - plain[1].actions).max() > 0.1  # not vacuous


def test_no_compilation_after_warmup_with_rtc_whatever_d_and_the_executed_steps(
    policy, observations
):
    engine = make_engine(policy, engine_config(chunk_handover="rtc"))  # auto delay
    engine.warmup(observations[0])
    compiled = engine.compile_count()
    previous, seen = engine.act(observations[0]).actions, set()
    # Neither warm-up (compilation) nor act writes d: only a published chunk's latency
    # does (`ChunkTimeline.commit`), here one of 3 ms.
    assert engine.delay.steps(1e-4) == 0
    engine.delay.observe(0.003)
    for frame, (executed, period) in enumerate([(0, 1.0), (1, 1e-4), (2, 0.01), (3, 1.0)]):
        result = engine.act(observations[1 + frame], Handover(previous, executed, period))
        seen.add((result.handover, result.delay_steps > 1))
        previous = result.actions
    assert engine.compile_count() == compiled
    assert seen >= {("rtc", True), ("rtc", False)}


def test_blend_keeps_the_frozen_rows_and_fades_into_the_new_chunk(policy, observations):
    engines = {
        m: make_engine(policy, engine_config(chunk_handover=m, rtc_delay_steps=1))
        for m in ("replace", "blend")
    }
    previous = engines["blend"].act(observations[0]).actions
    engines["replace"].act(observations[0])
    handover = Handover(previous, 1, PERIOD)
    new = engines["replace"].act(observations[1], handover).actions
    got = engines["blend"].act(observations[1], handover)
    shifted = rtc.shift_chunk(previous, 1, 4)  # s = 1, d = 1: ramp 1, 2/3, 1/3, 0
    ramp = np.array([1.0, 2 / 3, 1 / 3, 0.0])[:, None]
    np.testing.assert_allclose(got.actions, ramp * shifted + (1 - ramp) * new, rtol=1e-6)
    np.testing.assert_array_equal(got.actions[0], shifted[0])
    np.testing.assert_array_equal(got.actions[3], new[3])
    assert (got.handover, got.delay_steps) == ("blend", 1)


def test_a_fully_executed_chunk_leaves_nothing_to_meet(policy, observations):
    engine = make_engine(policy, engine_config(chunk_handover="rtc", rtc_delay_steps=1))
    previous = engine.act(observations[0]).actions
    result = engine.act(observations[1], Handover(previous, 4, PERIOD))
    assert result.handover == "replace"
    plain = make_engine(policy, engine_config())
    plain.act(observations[0])
    np.testing.assert_array_equal(result.actions, plain.act(observations[1]).actions)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"previous": np.zeros((5, 7))}, r"\[1..4, 7\], got \(5, 7\)"),
        ({"previous": np.zeros((4, 6))}, r"got \(4, 6\)"),
        ({"previous": np.full((4, 7), np.nan)}, "non-finite"),
        ({"executed": -1}, "executed steps must be an integer >= 0"),
        ({"executed": 1.5}, "executed steps must be an integer >= 0, got 1.5"),
        ({"control_period_s": 0.0}, "control period must be > 0"),
    ],
)
def test_a_bad_handover_raises_and_the_frame_does_not_advance(
    policy, observations, changes, message
):
    engine = make_engine(policy, engine_config(chunk_handover="rtc"))
    good = Handover(np.zeros((4, 7), np.float32), 1, PERIOD)
    with pytest.raises(ValueError, match=message):
        engine.act(observations[0], dataclasses.replace(good, **changes))
    assert engine.frame == -1
    assert engine.act(observations[0], good).frame == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"chunk_handover": "fade"}, "unknown chunk_handover 'fade'"),
        ({"rtc_max_guidance": 0.0}, "rtc_max_guidance must be > 0"),
        ({"rtc_delay_steps": -1}, "rtc_delay_steps must be 'auto' or an integer >= 0"),
        ({"rtc_delay_steps": "soon"}, "rtc_delay_steps must be 'auto'"),
    ],
)
def test_bad_handover_settings_are_refused(policy, changes, message):
    with pytest.raises(ValueError, match=message):
        make_engine(policy, engine_config(**changes))


@pytest.mark.slow
def test_benchmark_cli_reports_cost_and_fidelity(capsys):
    assert rtc_bench(["--preset", "tiny", "--frames", "2", "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)["presets"]["tiny"]
    assert sorted(entry["cost"]) == sorted(entry["fidelity"]) == ["blend", "replace", "rtc"]
    fid = entry["fidelity"]
    assert fid["blend"]["first_d_max_abs_worst"] == 0.0  # the frozen rows are the old ones
    assert fid["rtc"]["first_d_max_abs_worst"] < fid["replace"]["first_d_max_abs_mean"] / 5
    for c in entry["cost"].values():
        assert c["act_s"] >= c["prefill_s"] + c["denoise_s"] > 0
        assert c["budget_share"] == pytest.approx(c["act_s"] / 0.1)
