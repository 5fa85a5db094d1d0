"""The seam metric: how much consecutive action chunks disagree where they hand over.

At each take-over (`executor.Takeover`):

- jump: the largest joint difference between the position the old trajectory commanded at
  the tick before and the new trajectory's first executed point. It is the disagreement
  between two chunks about where the arm should be, whatever interpolation then smooths it;
- jerk: the largest third difference of the commanded positions divided by the control
  period cubed, over the four ticks whose stencil (c[k-3..k]) contains the take-over tick.
  It is what the joints feel of the seam at this control rate.

Units are those of the commands (rad; the gripper's 0..1), jerk per s^3. A run's summary
gives the count and the mean and max of each.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from oxygen_core.sim.executor import Takeover


@dataclasses.dataclass(frozen=True)
class SeamSummary:
    seams: int
    jerks: int  # seams with a jerk value (a full stencil); jerk_mean is over these
    jump_mean: float
    jump_max: float
    jerk_mean: float  # over the seams with at least one full stencil
    jerk_max: float

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)

    @classmethod
    def pooled(cls, parts: list[SeamSummary]) -> SeamSummary:
        """The summary of several runs (episodes) together, as one meter over all would give."""
        seams = sum(p.seams for p in parts)
        jerks = sum(p.jerks for p in parts)
        return cls(
            seams=seams,
            jerks=jerks,
            jump_mean=sum(p.jump_mean * p.seams for p in parts) / seams if seams else 0.0,
            jump_max=max((p.jump_max for p in parts), default=0.0),
            jerk_mean=sum(p.jerk_mean * p.jerks for p in parts) / jerks if jerks else 0.0,
            jerk_max=max((p.jerk_max for p in parts), default=0.0),
        )


@dataclasses.dataclass
class _Seam:
    jump: float
    ticks_left: int = 4  # stencils still to see that contain the take-over tick
    jerk: float | None = None


class SeamMeter:
    """Accumulates seams over one episode (a new meter per episode: the jump to the reset
    pose is no seam); feed it every control tick's command."""

    def __init__(self, period: float) -> None:
        self.period = period
        self._history: deque[np.ndarray] = deque(maxlen=4)
        self._open: list[_Seam] = []
        self._closed: list[_Seam] = []

    def observe(self, command: np.ndarray, takeover: Takeover | None = None) -> None:
        """One control tick: the command sent, and the take-over at this tick if any."""
        self._history.append(np.asarray(command, np.float64))
        if takeover is not None:
            self._open.append(_Seam(takeover.jump))
        if len(self._history) == 4 and self._open:
            c = self._history
            third = (c[3] - 3 * c[2] + 3 * c[1] - c[0]) / self.period**3
            jerk = float(np.max(np.abs(third)))
            for seam in self._open:
                seam.jerk = jerk if seam.jerk is None else max(seam.jerk, jerk)
        for seam in self._open:
            seam.ticks_left -= 1
        self._closed += [s for s in self._open if s.ticks_left == 0]
        self._open = [s for s in self._open if s.ticks_left > 0]

    def summary(self) -> SeamSummary:
        seams = self._closed + self._open
        jumps = [s.jump for s in seams]
        jerks = [s.jerk for s in seams if s.jerk is not None]
        return SeamSummary(
            seams=len(seams),
            jerks=len(jerks),
            jump_mean=float(np.mean(jumps)) if jumps else 0.0,
            jump_max=max(jumps, default=0.0),
            jerk_mean=float(np.mean(jerks)) if jerks else 0.0,
            jerk_max=max(jerks, default=0.0),
        )
