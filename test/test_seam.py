"""Seam easing (oxygen_core.safety.seam) and the gate that eases before it judges.

One joint at 50 Hz with the ALOHA arms' bounds (20 rad/s^2, 3 rad/s), so every figure
can be checked by hand: a kink of 8 mrad between 20 ms rows is 20 rad/s^2.
"""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_core.safety.gate import ChunkGate
from oxygen_core.safety.limits import JointLimits
from oxygen_core.safety.seam import ease

PERIOD_S = 0.02
ACCELERATION = np.array([20.0, 20.0])
LIMITS = JointLimits(
    names=("a", "b"),
    lower=np.array([-3.0, -3.0]),
    upper=np.array([3.0, 3.0]),
    velocity=np.array([3.0, 3.0]),
    acceleration=ACCELERATION,
    jump=np.array([0.2, 0.2]),
    source="test limits",
)
# The robot runs joint a at 0.5 rad/s (10 mrad a period) up to 0.1 rad; b stands at 0.
LEAD = np.array([[0.09, 0.0], [0.1, 0.0]])


def _acceleration(lead: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Second differences over lead + rows, rad/s^2: the seam's first."""
    return np.diff(np.concatenate([lead, rows]), n=2, axis=0) / PERIOD_S**2


def _chunk(offset: float, rows: int = 10) -> np.ndarray:
    """The robot's motion continued, joint a off by `offset` from row 0 on, b at rest."""
    a = 0.1 + 0.01 * np.arange(1, rows + 1) + offset
    return np.stack([a, np.zeros(rows)], axis=1)


def test_a_chunk_that_continues_the_robot_is_left_as_it_is():
    chunk = _chunk(0.0)
    np.testing.assert_allclose(ease(chunk, LEAD, ACCELERATION, PERIOD_S, 0.5), chunk, atol=1e-15)


def test_an_offset_is_faded_out_within_the_share_and_the_chunk_rejoins_the_model():
    chunk = _chunk(0.03)  # 30 mrad off: a kink of 1500 rad/s^2 as made
    assert np.max(np.abs(_acceleration(LEAD, chunk))) == pytest.approx(75.0)
    eased = ease(chunk, LEAD, ACCELERATION, PERIOD_S, 0.5)
    # The cubic's peak 6 e0 / D^2 within 10 rad/s^2: D = 7 periods (6 * 0.03 / 49 / 4e-4
    # = 9.2), so rows 6 on are the model's.
    np.testing.assert_array_equal(eased[6:], chunk[6:])
    assert not np.allclose(eased[5], chunk[5])
    # Every second difference from the lead on within the bound (the cubic's own peak at
    # its ends, sampled on the grid), and the first row where the robot's motion goes.
    assert np.max(np.abs(_acceleration(LEAD, eased))) <= 10.0
    assert eased[0, 0] == pytest.approx(0.11, abs=0.002)  # not 0.14


def test_a_velocity_disagreement_is_faded_out_too():
    # b: the robot stands, the chunk starts moving at 0.25 rad/s (5 mrad a period) at once:
    # 12.5 rad/s^2 at the seam as made; the cubic's 4 e1 / D within 10: D = 5 periods.
    chunk = np.stack([0.1 + 0.01 * np.arange(1, 11), 0.005 * np.arange(1, 11)], axis=1)
    eased = ease(chunk, LEAD, ACCELERATION, PERIOD_S, 0.5)
    assert np.max(np.abs(_acceleration(LEAD, eased)[:, 1])) <= 10.0
    np.testing.assert_array_equal(eased[4:, 1], chunk[4:, 1])
    assert eased[0, 1] < 0.5 * chunk[0, 1]  # starts from rest
    assert eased[-1, 1] == chunk[-1, 1]


def test_a_disagreement_too_large_for_the_chunk_is_spread_over_all_of_it():
    chunk = _chunk(0.5, rows=5)
    eased = ease(chunk, LEAD, ACCELERATION, PERIOD_S, 0.5)
    assert eased[-1, 0] == chunk[-1, 0]  # still ends where the model said
    assert np.max(np.abs(_acceleration(LEAD, eased))) > 10.0  # for the gate to judge


def test_a_one_row_lead_is_a_robot_at_rest():
    chunk = _chunk(0.0)
    eased = ease(chunk, LEAD[1:], ACCELERATION, PERIOD_S, 0.5)
    assert eased[0, 0] == pytest.approx(0.1, abs=0.002)  # starts near 0.1 at rest
    assert np.max(np.abs(_acceleration(np.repeat(LEAD[1:], 2, axis=0), eased))) <= 10.0


def test_the_share_must_be_a_share():
    with pytest.raises(ValueError, match="share"):
        ease(_chunk(0.0), LEAD, ACCELERATION, PERIOD_S, 0.0)
    with pytest.raises(ValueError, match="seam_share"):
        ChunkGate(LIMITS, "slow", PERIOD_S, seam_share=1.5)


def test_the_gate_eases_a_kinked_chunk_through_that_it_would_slow_otherwise():
    chunk, state = _chunk(0.03), LEAD[-1]
    plain = ChunkGate(LIMITS, "slow", PERIOD_S).check(chunk, state, LEAD)
    assert plain.outcome in ("slowed", "rejected")
    assert {f.reason for f in plain.findings} == {"acceleration"}
    eased = ChunkGate(LIMITS, "slow", PERIOD_S, seam_share=0.5).check(chunk, state, LEAD)
    assert eased.outcome == "passed" and len(eased.positions) == len(chunk)
    np.testing.assert_allclose(eased.positions[-1], chunk[-1], atol=1e-6)


def test_the_jump_is_judged_on_the_models_first_point_not_the_eased_one():
    chunk = _chunk(0.25)  # 260 mrad from the measured state at row 0: another pose
    verdict = ChunkGate(LIMITS, "slow", PERIOD_S, seam_share=1.0).check(chunk, LEAD[-1], LEAD)
    assert verdict.outcome == "rejected"
    assert [f.reason for f in verdict.findings] == ["jump"]
