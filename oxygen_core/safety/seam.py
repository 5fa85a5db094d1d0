"""Seam easing: a new chunk's disagreement with the rows the robot runs, faded out within
each joint's acceleration bound.

Consecutive chunks of a small flow policy disagree: the new chunk's first row sits a few
to tens of mrad from where the running chunk has the robot at the take-over, and at 50 Hz
a kink of 8 mrad between 20 ms rows is already 20 rad/s^2. Retiming cannot cure a kink
(stretched by s, a seam's acceleration falls only as 1/s), so the chunk gate slows or
rejects nearly every such chunk, and the robot runs slower than the policy was trained
to, into states it never saw.

Easing moves the seam instead of the chunk's timing. Extend the new chunk back one period
along its first step; its offset there from the robot's last commanded row, e0, and its
first step's difference from the robot's last step, e1 (per period), are the
disagreement. A cubic c(t) that starts at (e0, e1) one period before row 0 and reaches
zero with zero slope D periods later is subtracted from the rows, so the eased chunk
continues the robot's position and velocity and rejoins the model's rows after D - 1 of
them. Per joint, D is the fewest periods whose cubic's largest acceleration (at one of
its ends: |6 e0 + 4 D e1| and |6 e0 + 2 D e1|, over D^2 periods^2) stays within `share`
of the joint's bound, and at most the chunk's length, so the chunk still ends where the
model said. The chunk gate judges the eased rows like any others (`ChunkGate`'s
`seam_share`).
"""

from __future__ import annotations

import numpy as np


def ease(
    positions: np.ndarray,
    lead: np.ndarray,
    acceleration: np.ndarray,
    period_s: float,
    share: float,
) -> np.ndarray:
    """`positions` [H, J] with the seam to `lead` [1 or 2, J] (the rows the robot runs one
    and two periods before row 0, oldest first; one row: the robot at rest there) eased
    within `share` of `acceleration` [J] (rad/s^2; module docstring). float64 [H, J]."""
    positions = np.asarray(positions, np.float64)
    lead = np.asarray(lead, np.float64)
    if not 0.0 < share <= 1.0:
        raise ValueError(f"seam easing share must be in (0, 1], got {share}")
    step = positions[1] - positions[0] if len(positions) > 1 else np.zeros(positions.shape[1])
    robot_step = lead[-1] - lead[0]  # zero with one row: at rest
    e0 = positions[0] - step - lead[-1]
    e1 = step - robot_step
    periods = _periods(e0, e1, acceleration * share * period_s**2, len(positions))
    tau = np.minimum(np.arange(1, len(positions) + 1)[:, None] / periods, 1.0)
    h00 = 2 * tau**3 - 3 * tau**2 + 1
    h10 = tau**3 - 2 * tau**2 + tau
    return positions - (h00 * e0 + h10 * periods * e1)


def _periods(e0: np.ndarray, e1: np.ndarray, bound: np.ndarray, most: int) -> np.ndarray:
    """Per joint, the fewest periods D in 1..most whose cubic peaks within `bound` (rad per
    period^2); `most` where none does."""
    d = np.arange(1, most + 1, dtype=np.float64)[:, None]
    peak = np.maximum(np.abs(6 * e0 + 4 * d * e1), np.abs(6 * e0 + 2 * d * e1)) / d**2
    fits = peak <= bound
    return np.where(fits.any(axis=0), d[np.argmax(fits, axis=0), 0], float(most))
