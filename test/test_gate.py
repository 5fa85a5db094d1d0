"""The chunk gate on hand-made chunks: exact verdicts for each policy and each bound.

Two joints, limits chosen so each number below can be checked by hand: positions in
[-1, 1], velocity 2/s, acceleration 10/s^2, start jump 0.5, a control period of 0.1 s
(row i is reached (i + 1) periods after the measured state).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from oxygen_core.safety import bench
from oxygen_core.safety.gate import ChunkGate
from oxygen_core.safety.limits import JointLimits

LIMITS = JointLimits(
    names=("a", "b"),
    lower=np.array([-1.0, -1.0]),
    upper=np.array([1.0, 1.0]),
    velocity=np.array([2.0, 2.0]),
    acceleration=np.array([10.0, 10.0]),
    jump=np.array([0.5, 0.5]),
    source="test limits",
)
STATE = np.zeros(2)
PERIOD_S = 0.1


def gate(policy: str, period_s: float = PERIOD_S) -> ChunkGate:
    return ChunkGate(LIMITS, policy, period_s)


@pytest.mark.parametrize("policy", ["clamp", "slow", "reject"])
def test_a_chunk_inside_every_bound_passes_unchanged(policy):
    chunk = np.array([[0.1, 0.0], [0.2, -0.05], [0.3, -0.1]])  # 1 /s; b 0.5 /s, 5 /s^2
    verdict = gate(policy).check(chunk, STATE)
    assert verdict.outcome == "passed" and verdict.findings == ()
    np.testing.assert_array_equal(verdict.positions, chunk.astype(np.float32))  # as sent


def test_clamp_puts_positions_into_their_range_and_names_the_worst():
    # b creeps past its upper bound at 1 /s (velocity fine after clamping).
    state = np.array([0.0, 0.95])
    chunk = np.array([[0.0, 1.0], [0.0, 1.05], [0.0, 1.15]])
    verdict = gate("clamp").check(chunk, state)
    assert verdict.outcome == "clamped"
    np.testing.assert_allclose(verdict.positions, [[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    (finding,) = verdict.findings
    assert (finding.reason, finding.joint, finding.point) == ("position", "b", 2)
    assert finding.value == pytest.approx(1.15) and finding.limit == 1.0


def test_clamp_rejects_a_chunk_still_too_fast_and_slow_stretches_it():
    # a moves 0.4 per 0.1 s = 4 /s, twice its bound, and ends past its range.
    chunk = np.array([[0.4, 0.0], [0.8, 0.0], [1.2, 0.0]])
    clamped = gate("clamp").check(chunk, STATE)
    assert clamped.outcome == "rejected" and clamped.positions is None
    assert [f.reason for f in clamped.findings] == ["position", "velocity", "acceleration"]
    slowed = gate("slow").check(chunk, STATE)
    assert slowed.outcome == "slowed"
    # After clamping the last point to 1.0 the steps are 0.4, 0.4, 0.2: velocity 4 -> s = 2,
    # and the acceleration (4 -> 2 /s over 0.1 s = -20 /s^2) needs s = sqrt(2) only. Each
    # step would last two periods: resampled, the path runs at 2 /s, then 1 /s (the change,
    # -10 /s^2, right at its bound), and ends where the clamped chunk ends. In float32 (what
    # goes out) a row of that lands a hair over 2 /s, so the steps last 0.01 % longer, and
    # the path takes a seventh row to reach its end.
    assert slowed.stretch == pytest.approx(2.0 * 1.0001)
    np.testing.assert_allclose(
        slowed.positions[:, 0], [0.19998, 0.39996, 0.59994, 0.79992, 0.89995, 0.99994, 1.0],
        atol=1e-7,
    )  # fmt: skip
    np.testing.assert_allclose(slowed.positions[:, 1], 0.0)


def test_slow_stretches_for_acceleration_and_its_rows_meet_every_bound():
    # a: 0.1, 0.3 from rest: velocities 1 then 2 /s (within 2), acceleration 10/s^2 (ok);
    # then 0.6: velocity 3 /s (1.5x), acceleration (3 - 2) / 0.1 = 10 (ok). One more step
    # back to 0.55: velocity -0.5, acceleration -35 /s^2: 3.5x -> s >= sqrt(3.5).
    chunk = np.array([[0.1, 0.0], [0.3, 0.0], [0.6, 0.0], [0.55, 0.0]])
    verdict = gate("slow").check(chunk, STATE)
    assert verdict.outcome == "slowed"
    assert {f.reason: f.point for f in verdict.findings} == {"velocity": 2, "acceleration": 3}
    # Resampling puts the turn inside one period, so it takes more than the analytic bound.
    assert math.sqrt(3.5) <= verdict.stretch <= 10
    assert len(verdict.positions) == math.ceil(4 * verdict.stretch - 1e-9)
    np.testing.assert_allclose(verdict.positions[-1], chunk[-1])
    assert gate("reject").check(verdict.positions, STATE).outcome == "passed"


def test_slow_rejects_a_chunk_that_needs_more_than_max_stretch():
    chunk = np.array([[0.45, 0.0], [-0.45, 0.0]])  # 9 /s back: acceleration -180 /s^2
    verdict = ChunkGate(LIMITS, "slow", PERIOD_S, max_stretch=3.0).check(chunk, STATE)
    assert verdict.outcome == "rejected" and verdict.stretch > 3.0


@pytest.mark.parametrize("policy", ["clamp", "slow", "reject"])
def test_a_start_jump_rejects_under_every_policy(policy):
    chunk = np.array([[0.6, 0.0], [0.6, 0.0], [0.6, 0.0]])  # 0.6 from the state, bound 0.5
    verdict = gate(policy, period_s=1.0).check(chunk, STATE)
    assert verdict.outcome == "rejected" and verdict.positions is None
    (finding,) = verdict.findings
    assert (finding.reason, finding.joint, finding.point) == ("jump", "a", 0)
    assert finding.value == pytest.approx(0.6) and finding.limit == 0.5
    assert "a start jump 0.6 over its limit 0.5" == finding.detail


@pytest.mark.parametrize(
    ("chunk", "state", "reason", "words"),
    [
        (np.array([[0.0, np.nan]]), STATE, "non_finite", "not finite at b"),
        (np.zeros((1, 2)), np.array([np.inf, 0]), "non_finite", "measured state"),
        (np.zeros((1, 3)), STATE, "shape", "expected [>=1, 2]"),
        (np.zeros((0, 2)), STATE, "shape", "chunk shape (0, 2)"),
        (np.zeros((2, 2)), np.zeros(3), "shape", "measured state shape (3,)"),
        (np.zeros((1, 2)), (STATE, np.array([[0.0, np.nan]])), "non_finite", "lead is not"),
        (np.zeros((1, 2)), (STATE, np.zeros(2)), "shape", "lead shape (2,)"),
        (np.zeros((1, 2)), (STATE, np.zeros((3, 2))), "shape", "lead shape (3, 2)"),
    ],
)
def test_malformed_chunks_reject_with_a_reason(chunk, state, reason, words):
    state, lead = state if isinstance(state, tuple) else (state, None)
    verdict = gate("slow").check(chunk, state, lead)
    assert verdict.outcome == "rejected"
    assert verdict.findings[0].reason == reason and words in verdict.findings[0].detail


def test_the_steps_start_from_the_running_row_and_the_jump_from_the_state():
    """What a trajectory controller moves from into the first point is the row it runs
    then (the lead's last row), not the measured state: a first point 0.1 from the state
    but 0.4 from that row is a 4 /s step; one 0.1 from the row but 0.4 from the state
    (the servo lags, within the jump bound) is a 1 /s step."""
    chunk = np.array([[0.4, 0.0], [0.5, 0.0], [0.6, 0.0]])  # 1 /s after its first point
    fast = gate("reject").check(chunk, np.array([0.3, 0.0]), lead=np.zeros((1, 2)))
    assert fast.outcome == "rejected"
    (velocity,) = [f for f in fast.findings if f.reason == "velocity"]
    assert (velocity.joint, velocity.point, velocity.value) == ("a", 0, pytest.approx(4.0))
    calm = gate("reject").check(chunk, np.zeros(2), lead=np.array([[0.3, 0.0]]))
    assert calm.outcome == "passed"
    slowed = gate("slow").check(chunk, np.array([0.3, 0.0]), lead=np.zeros((1, 2)))
    # from the start, steps 0.4, 0.1, 0.1: velocity 4 /s needs s = 2, but resampled at 2
    # (and 0.01 % more) the change from 2 /s to 0.5 /s is -15 /s^2; 10 % more still fails,
    # 21 % more holds: the path runs from the start (0.4 / s after a period), not the state
    assert (slowed.outcome, slowed.stretch) == ("slowed", pytest.approx(2.0002 * 1.21))
    assert slowed.positions[0, 0] == pytest.approx(0.4 / slowed.stretch)
    assert len(slowed.positions) == 8 and slowed.positions[-1, 0] == pytest.approx(0.6)
    far = gate("slow").check(chunk, np.array([-0.2, 0.0]), lead=np.array([[0.35, 0.0]]))
    assert [f.reason for f in far.findings] == ["jump"]  # 0.6 from the measured state


def test_a_two_row_lead_judges_the_seams_acceleration():
    """The robot runs at 1.5 /s (lead 0.0 -> 0.15); a chunk that stops dead at 0.15 changes
    that by 15 /s^2 at the seam (bound 10), which a one-row lead cannot see. slow eases
    the first step (the seam's change falls as 1/s only) until it holds."""
    lead = np.array([[0.0, 0.0], [0.15, 0.0]])
    stop = np.array([[0.15, 0.0], [0.15, 0.0], [0.15, 0.0]])
    assert gate("reject").check(stop, np.zeros(2), lead[1:]).outcome == "passed"
    rejected = gate("reject").check(stop, np.zeros(2), lead)
    (finding,) = rejected.findings
    assert (finding.reason, finding.joint, finding.point) == ("acceleration", "a", 0)
    assert finding.value == pytest.approx(15.0)
    onward = np.array([[0.3, 0.0], [0.45, 0.0], [0.6, 0.0]])  # the same speed: no change
    assert gate("reject").check(onward, np.zeros(2), lead).outcome == "passed"
    # Stopping from 1.5 /s within a period needs 15 /s^2 whatever the stretch: rejected.
    assert gate("slow").check(stop, np.zeros(2), lead).outcome == "rejected"
    lead = np.array([[0.1, 0.0], [0.15, 0.0]])  # 0.5 /s: a stop costs 5 /s^2
    turn = np.array([[0.05, 0.0], [-0.05, 0.0], [-0.15, 0.0]])  # 0.5 -> -1 /s: -15 /s^2
    slowed = gate("slow").check(turn, np.zeros(2), lead)
    assert slowed.outcome == "slowed" and slowed.stretch >= 2.0  # -1/s - 0.5 within 1 /s
    steps = np.diff(np.vstack([lead, slowed.positions]), axis=0) / PERIOD_S
    assert np.all(np.abs(np.diff(steps[:, 0])) / PERIOD_S <= 10.0)


def test_clamped_rows_go_out_as_float32_values_inside_the_bounds():
    """-0.8 has no float32 value: the nearest (-0.800000012) lies outside [-0.8, 0.8], so
    a row clamped there goes out one float32 step inside."""
    limits = JointLimits(("a",), *np.array([[-0.8], [0.8], [99.0], [9e3], [9.0]]), "test")
    verdict = ChunkGate(limits, "clamp", PERIOD_S).check(np.array([[-0.9], [0.9]]), np.zeros(1))
    assert verdict.outcome == "clamped"
    low, high = verdict.positions[:, 0]
    assert -0.8 < low == float(np.nextafter(np.float32(-0.8), np.float32(0)))
    assert high <= 0.8 and high == float(np.float32(high))


def test_reject_sends_nothing_for_a_position_out_of_range():
    chunk = np.array([[0.0, -0.95], [0.0, -1.01], [0.0, -1.01]])
    state = np.array([0.0, -0.9])
    verdict = gate("reject").check(chunk, state)
    assert verdict.outcome == "rejected" and verdict.positions is None
    assert verdict.findings[0].limit == -1.0 and verdict.findings[0].point == 1


def test_switched_off_bounds_never_fire():
    free = JointLimits(
        names=("a",),
        lower=np.array([-np.inf]),
        upper=np.array([np.inf]),
        velocity=np.array([np.inf]),
        acceleration=np.array([np.inf]),
        jump=np.array([np.inf]),
        source="free",
    )
    chunk = np.array([[100.0], [-100.0]])
    assert ChunkGate(free, "reject", PERIOD_S).check(chunk, np.zeros(1)).sent


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown gate policy 'hold'; choose clamp, slow, reject"):
        ChunkGate(LIMITS, "hold", PERIOD_S)


def test_random_chunks_that_slow_lets_through_break_no_bound():
    """Whatever slow sends lies inside every bound: re-checked by the reject policy."""
    rng = np.random.default_rng(0)
    strict = gate("reject")
    sent = 0
    for _ in range(200):
        chunk = np.cumsum(rng.normal(0, 0.2, (10, 2)), axis=0) + rng.normal(0, 0.1, 2)
        verdict = gate("slow").check(chunk, STATE)
        if verdict.sent:
            sent += 1
            assert strict.check(verdict.positions, STATE).outcome == "passed"
    assert sent > 100  # most start within the jump bound


def test_the_cost_benchmark_takes_each_path_on_every_shipped_robot(monkeypatch):
    """`oxygen-bench gate` builds one chunk per path from each config's
    limits; measure() raises when a chunk takes another path (the figures, not the
    times, are what this checks)."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    for config in bench.CONFIGS:
        rows = bench.measure(config, calls=2)
        assert [r["path"] for r in rows] == list(bench.PATHS)
        assert all(r["p99_us"] >= r["median_us"] > 0 for r in rows)


def test_cubic_segments_are_judged_by_their_exact_peaks():
    """Still, then 0.5, then 1.5 rad/s: on the grid 5 and 10 rad/s^2, but the cubic through
    the central-difference velocities (0, 0.25, 1, 1.5) peaks at 10, 15 and 20 rad/s^2
    into points 0, 1 and 2 (its velocity at 1.67 rad/s into point 2)."""
    limits = JointLimits(("a",), *np.array([[-9.0], [9.0], [2.0], [16.0], [9.0]]), "test")
    rows = np.array([[0.0], [0.05], [0.2]])
    linear = ChunkGate(limits, "reject", PERIOD_S).check(rows, np.zeros(1))
    assert linear.outcome == "passed"
    cubic = ChunkGate(limits, "reject", PERIOD_S, segments="cubic").check(rows, np.zeros(1))
    (finding,) = cubic.findings
    assert cubic.outcome == "rejected" and finding.reason == "acceleration"
    assert (finding.point, finding.value) == (2, pytest.approx(20.0))
    slowed = ChunkGate(limits, "slow", PERIOD_S, segments="cubic").check(rows, np.zeros(1))
    assert slowed.outcome == "slowed"
    recheck = ChunkGate(limits, "reject", PERIOD_S, segments="cubic")
    assert recheck.check(slowed.positions, np.zeros(1)).outcome == "passed"
