"""A velocity robot's rows scaled into its joints' bounds, each row's direction kept."""

from __future__ import annotations

import numpy as np

from oxygen_core.safety.velocity import VelocityCap

CAP = VelocityCap(np.array([1.0, 2.0, np.inf]))  # two joints and a gripper


def test_a_row_within_its_bounds_passes_unchanged():
    rows = np.array([[0.5, -2.0, 0.8], [-1.0, 1.0, 0.0]], np.float32)
    capped, factor = CAP.cap(rows)
    np.testing.assert_array_equal(capped, rows)
    assert factor == 1.0


def test_a_fast_row_is_scaled_as_a_whole_onto_its_tightest_bound():
    rows = np.array([[3.0, 3.0, 0.8], [0.5, 0.5, 0.0], [-1.0, -5.0, 0.0]], np.float32)
    capped, factor = CAP.cap(rows)
    # Row 0: joint 0 is at 3x its bound, joint 1 at 1.5x: the row is scaled by 1/3.
    np.testing.assert_allclose(capped[0], [1.0, 1.0, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(capped[1], rows[1])
    # Row 2: joint 1 at 2.5x: scaled by 0.4, the direction (1:5) kept.
    np.testing.assert_allclose(capped[2], [-0.4, -2.0, 0.0], rtol=1e-6)
    assert factor == np.float32(1 / 3) or abs(factor - 1 / 3) < 1e-9
    assert np.all(np.abs(capped[:, :2]) <= CAP.bounds[:2] + 1e-6)
