"""The controller's command as the node expects it (oxygen_core.controller.expected), exact
numbers on hand-made trajectories: one joint, a cubic from rest at 0 to rest at 0.3 over
0.3 s is at 0.3 (3 s^2 - 2 s^3) with velocity 0.3 * 6 s (1 - s) / 0.3, s = t / 0.3."""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_core.controller.expected import ExpectedCommand
from oxygen_core.controller.shaping import Shaped

MS = 1_000_000
REST = (np.zeros(1), np.zeros(1))


def flat(stamp_ms: int, value: float, points: int = 3) -> Shaped:
    """Points at `value`, at rest, 20 ms apart from `stamp_ms` (0: on arrival)."""
    times = np.arange(points) * 0.02
    return Shaped(stamp_ms * MS, times, np.full((points, 1), value), np.zeros((points, 1)))


def test_nothing_sent_is_nothing_running():
    assert ExpectedCommand((0,)).states(0) == []


def test_the_first_trajectory_runs_from_the_measured_state_to_its_first_point():
    expected = ExpectedCommand((0,))
    expected.sent(flat(1300, 0.3), 1000 * MS, REST)
    assert expected.states(999 * MS) == []  # before its take-over nothing runs
    ((position, velocity),) = expected.states(1120 * MS)  # s = 0.4
    assert position == pytest.approx([0.1056], abs=1e-12)
    assert velocity == pytest.approx([1.44], abs=1e-6)
    ((position, velocity),) = expected.states(1400 * MS)  # past its last point: holds it
    assert position == pytest.approx([0.3]) and velocity == pytest.approx([0.0])


def test_the_next_trajectory_runs_from_the_command_at_its_take_over():
    expected = ExpectedCommand((0,))
    expected.sent(flat(300, 0.3), 0, REST)
    expected.sent(flat(420, 0.1056), 120 * MS, (np.full(1, 9.0), np.zeros(1)))  # not used
    # From (0.1056, 1.44) at 120 ms to (0.1056, 0) at 420 ms: the cubic's position is
    # p0 + v0 (t - 2 t^2 / h + t^3 / h^2), h = 0.3: at t = 0.15, 0.1056 + 1.44 * 0.0375.
    # (1.44 is a difference over 0.1 ms, exact to a few 1e-7.)
    ((position, velocity),) = expected.states(270 * MS)
    assert position == pytest.approx([0.1056 + 1.44 * 0.0375], abs=1e-7)
    assert velocity == pytest.approx([1.44 * (1 - 2 + 0.75)], abs=1e-6)  # 1 - 4t/h + 3t^2/h^2


def test_a_zero_stamp_is_due_at_the_take_over():
    expected = ExpectedCommand((0,))
    expected.sent(flat(0, 0.3, points=1), 500 * MS, REST)  # a hold's one point
    ((position, velocity),) = expected.states(500 * MS)
    assert position == pytest.approx([0.3]) and velocity == pytest.approx([0.0])


def test_each_end_of_the_take_over_window_has_its_chain_until_forgotten():
    expected = ExpectedCommand((0, 60 * MS))
    expected.sent(flat(300, 0.3), 0, REST)
    assert len(expected.states(30 * MS)) == 1  # the later take-over has not come yet
    # Taken over at 60 ms from rest: 0.24 s to the first point, s = 0.25 at 120 ms.
    positions = [p for p, _ in expected.states(120 * MS)]
    assert positions == [pytest.approx([0.1056]), pytest.approx([0.046875])]
    expected.forget()
    assert expected.states(120 * MS) == []
