"""The chunk gate on hand-made chunks: exact verdicts for each policy and each bound.

Two joints, limits chosen so each number below can be checked by hand: positions in
[-1, 1], velocity 2/s, acceleration 10/s^2, start jump 0.5, points 0.1 s apart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

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
TIMES = np.array([0.1, 0.2, 0.3])


def gate(policy: str) -> ChunkGate:
    return ChunkGate(LIMITS, policy)


@pytest.mark.parametrize("policy", ["clamp", "slow", "reject"])
def test_a_chunk_inside_every_bound_passes_unchanged(policy):
    chunk = np.array([[0.1, 0.0], [0.2, -0.1], [0.3, -0.2]])  # 1 /s, no acceleration
    verdict = gate(policy).check(chunk, TIMES, STATE)
    assert verdict.outcome == "passed" and verdict.findings == ()
    np.testing.assert_array_equal(verdict.positions, chunk)
    np.testing.assert_array_equal(verdict.times, TIMES)


def test_clamp_puts_positions_into_their_range_and_names_the_worst():
    # b creeps past its upper bound at 1 /s (velocity fine after clamping).
    state = np.array([0.0, 0.95])
    chunk = np.array([[0.0, 1.0], [0.0, 1.05], [0.0, 1.15]])
    verdict = gate("clamp").check(chunk, TIMES, state)
    assert verdict.outcome == "clamped"
    np.testing.assert_allclose(verdict.positions, [[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    np.testing.assert_array_equal(verdict.times, TIMES)
    (finding,) = verdict.findings
    assert (finding.reason, finding.joint, finding.point) == ("position", "b", 2)
    assert finding.value == pytest.approx(1.15) and finding.limit == 1.0


def test_clamp_rejects_a_chunk_still_too_fast_and_slow_stretches_it():
    # a moves 0.4 per 0.1 s = 4 /s, twice its bound, and ends past its range.
    chunk = np.array([[0.4, 0.0], [0.8, 0.0], [1.2, 0.0]])
    clamped = gate("clamp").check(chunk, TIMES, STATE)
    assert clamped.outcome == "rejected" and clamped.positions is None
    assert [f.reason for f in clamped.findings] == ["position", "velocity", "acceleration"]
    slowed = gate("slow").check(chunk, TIMES, STATE)
    assert slowed.outcome == "slowed"
    # After clamping the last point to 1.0 the steps are 0.4, 0.4, 0.2: velocity 4 -> s = 2,
    # and the acceleration (4 -> 2 /s over 0.1 s = -20 /s^2) needs s = sqrt(2) only.
    assert slowed.stretch == pytest.approx(2.0)
    np.testing.assert_allclose(slowed.times, [0.2, 0.4, 0.6])
    np.testing.assert_allclose(slowed.positions[:, 0], [0.4, 0.8, 1.0])


def test_slow_meets_the_acceleration_bound_by_the_square_root():
    # a: 0.1, 0.3 from rest: velocities 1 then 2 /s (within 2), acceleration 10/s^2 (ok);
    # then 0.6: velocity 3 /s (1.5x), acceleration (3 - 2) / 0.1 = 10 (ok). One more step
    # back to 0.55: velocity -0.5, acceleration -35 /s^2: 3.5x -> s = sqrt(3.5).
    chunk = np.array([[0.1, 0.0], [0.3, 0.0], [0.6, 0.0], [0.55, 0.0]])
    times = np.array([0.1, 0.2, 0.3, 0.4])
    verdict = gate("slow").check(chunk, times, STATE)
    assert verdict.outcome == "slowed"
    assert verdict.stretch == pytest.approx(math.sqrt(3.5))
    assert {f.reason: f.point for f in verdict.findings} == {"velocity": 2, "acceleration": 3}
    assert ChunkGate(LIMITS, "reject").check(chunk, verdict.times, STATE).outcome == "passed"


@pytest.mark.parametrize("policy", ["clamp", "slow", "reject"])
def test_a_start_jump_rejects_under_every_policy(policy):
    chunk = np.array([[0.6, 0.0], [0.6, 0.0], [0.6, 0.0]])  # 0.6 from the state, bound 0.5
    verdict = gate(policy).check(chunk, np.array([1.0, 2.0, 3.0]), STATE)
    assert verdict.outcome == "rejected" and verdict.positions is None
    (finding,) = verdict.findings
    assert (finding.reason, finding.joint, finding.point) == ("jump", "a", 0)
    assert finding.value == pytest.approx(0.6) and finding.limit == 0.5
    assert "a start jump 0.6 over its limit 0.5" == finding.detail


@pytest.mark.parametrize(
    ("chunk", "times", "state", "reason", "words"),
    [
        (np.array([[0.0, np.nan]]), np.array([0.1]), STATE, "non_finite", "not finite at b"),
        (np.zeros((1, 2)), np.array([0.1]), np.array([np.inf, 0]), "non_finite", "measured state"),
        (np.zeros((1, 3)), np.array([0.1]), STATE, "shape", "expected [>=1, 2]"),
        (np.zeros((0, 2)), np.zeros(0), STATE, "shape", "chunk shape (0, 2)"),
        (np.zeros((2, 2)), np.array([0.1]), STATE, "shape", "times (1,)"),
        (np.zeros((2, 2)), np.array([0.2, 0.1]), STATE, "shape", "increasing"),
        (np.zeros((1, 2)), np.array([0.0]), STATE, "shape", "after the state"),
    ],
)
def test_malformed_chunks_reject_with_a_reason(chunk, times, state, reason, words):
    verdict = gate("slow").check(chunk, times, state)
    assert verdict.outcome == "rejected"
    assert verdict.findings[0].reason == reason and words in verdict.findings[0].detail


def test_reject_sends_nothing_for_a_position_out_of_range():
    chunk = np.array([[0.0, -0.95], [0.0, -1.01], [0.0, -1.01]])
    state = np.array([0.0, -0.9])
    verdict = gate("reject").check(chunk, TIMES, state)
    assert verdict.outcome == "rejected" and verdict.times is None
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
    assert ChunkGate(free, "reject").check(chunk, np.array([0.1, 0.2]), np.zeros(1)).sent


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown gate policy 'hold'; choose clamp, slow, reject"):
        ChunkGate(LIMITS, "hold")


def test_random_chunks_that_slow_lets_through_break_no_bound():
    """Whatever slow sends lies inside every bound: re-checked by the reject policy."""
    rng = np.random.default_rng(0)
    strict = gate("reject")
    sent = 0
    for _ in range(200):
        chunk = np.cumsum(rng.normal(0, 0.2, (10, 2)), axis=0) + rng.normal(0, 0.1, 2)
        verdict = gate("slow").check(chunk, np.arange(1, 11) * 0.1, STATE)
        if verdict.sent:
            sent += 1
            assert strict.check(verdict.positions, verdict.times, STATE).outcome == "passed"
    assert sent > 100  # most start within the jump bound
