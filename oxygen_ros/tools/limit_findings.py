"""What oxygen-bag limit-check reports, and the two tests it makes of one row of values.

Both counts (per point, oxygen_ros.tools.limit_check; per controller update,
oxygen_ros.tools.limit_sampling) report `Finding`s made here: a value counts when it
exceeds its limit by more than TOLERANCE (float noise on a limit is not a violation), once
per row and kind, the worst joint named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from oxygen_core.safety.limits import JointLimits

TOLERANCE = 1e-9


@dataclasses.dataclass(frozen=True)
class Finding:
    """One point (or sample) over a limit: the worst joint of it."""

    kind: str
    trajectory: int  # its index on the topic (-1: none runs yet)
    point: int  # per point: of the trajectory (-1: the previous one's last, a seam);
    # per update: the updates since the trajectory took over
    time_ns: int
    joint: str
    value: float
    limit: float


def over(
    kind: str,
    index: int,
    point: int,
    time_ns: int,
    values: np.ndarray,
    bound: np.ndarray,
    names: Sequence[str],
) -> list[Finding]:
    """The worst joint of one row when any is over its bound (|value| > bound)."""
    beyond = np.abs(values) > bound + TOLERANCE
    if not beyond.any():
        return []
    with np.errstate(divide="ignore"):
        j = int(np.argmax(np.where(beyond, np.abs(values) / bound, -1.0)))
    return [Finding(kind, index, point, time_ns, names[j], float(values[j]), float(bound[j]))]


def outside(
    index: int, point: int, time_ns: int, positions: np.ndarray, limits: JointLimits
) -> list[Finding]:
    """The joint of one row of positions furthest outside its range, with the bound it
    crossed, when any is."""
    low, high = limits.lower, limits.upper
    excess = np.maximum(low - positions, positions - high)  # > 0: outside, by that much
    if not np.any(excess > TOLERANCE):
        return []
    j = int(np.argmax(excess))
    bound = low[j] if positions[j] < low[j] else high[j]
    value = float(positions[j])
    return [Finding("position", index, point, time_ns, limits.names[j], value, float(bound))]
