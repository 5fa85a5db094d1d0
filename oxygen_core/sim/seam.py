"""The seam metric: how much consecutive action chunks disagree where they hand over.

At each take-over (`executor.Takeover`):

- jump: the largest joint difference between the position the old trajectory commanded at
  the tick before and the new trajectory's first executed point. It is the disagreement
  between two chunks about where the arm should be, whatever interpolation then smooths it.
  Also split: the arm's joints alone (rad), and the gripper's opening alone (0..1). The
  whole-robot figure mixes the two units, and a gripper commanded open or closed jumps by
  its full range whenever it switches, which says nothing about the arm's seam;
- jerk: the largest third difference of the commanded positions divided by the control
  period cubed, over the four ticks whose stencil (c[k-3..k]) contains the take-over tick.
  It is what the joints feel of the seam at this control rate.

Units are those of the commands (rad; the gripper's 0..1), jerk per s^3. A run's summary
gives the count and the mean and max of each. The meter is told which command is the
gripper; without one, every joint is the arm's.
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
    arm_jump_mean: float  # the jump over the arm's joints alone (rad)
    arm_jump_max: float
    gripper_jump_mean: float  # the gripper's opening alone (0..1; 0 without a gripper)
    gripper_jump_max: float

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)

    @classmethod
    def pooled(cls, parts: list[SeamSummary]) -> SeamSummary:
        """The summary of several runs (episodes) together, as one meter over all would give."""
        seams = sum(p.seams for p in parts)
        jerks = sum(p.jerks for p in parts)

        def mean(field: str, weight: str = "seams") -> float:
            total = sum(getattr(p, weight) for p in parts)
            return (
                sum(getattr(p, field) * getattr(p, weight) for p in parts) / total if total else 0.0
            )

        def top(field: str) -> float:
            return max((getattr(p, field) for p in parts), default=0.0)

        return cls(
            seams=seams,
            jerks=jerks,
            jump_mean=mean("jump_mean"),
            jump_max=top("jump_max"),
            jerk_mean=mean("jerk_mean", "jerks"),
            jerk_max=top("jerk_max"),
            arm_jump_mean=mean("arm_jump_mean"),
            arm_jump_max=top("arm_jump_max"),
            gripper_jump_mean=mean("gripper_jump_mean"),
            gripper_jump_max=top("gripper_jump_max"),
        )


@dataclasses.dataclass
class _Seam:
    jump: float
    arm: float
    gripper: float
    ticks_left: int = 4  # stencils still to see that contain the take-over tick
    jerk: float | None = None


class SeamMeter:
    """Accumulates seams over one episode (a new meter per episode: the jump to the reset
    pose is no seam); feed it every control tick's command."""

    def __init__(self, period: float, gripper: int | None = None) -> None:
        """gripper: the index of the gripper's command (None: every joint is the arm's)."""
        self.period = period
        self.gripper = gripper
        self._history: deque[np.ndarray] = deque(maxlen=4)
        self._open: list[_Seam] = []
        self._closed: list[_Seam] = []

    def observe(self, command: np.ndarray, takeover: Takeover | None = None) -> None:
        """One control tick: the command sent, and the take-over at this tick if any."""
        self._history.append(np.asarray(command, np.float64))
        if takeover is not None:
            self._open.append(self._seam(takeover))
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

    def _seam(self, takeover: Takeover) -> _Seam:
        jumps = takeover.jumps
        arm = np.delete(jumps, self.gripper) if self.gripper is not None else jumps
        gripper = jumps[self.gripper] if self.gripper is not None else 0.0
        return _Seam(float(np.max(jumps)), float(np.max(arm, initial=0.0)), float(gripper))

    def summary(self) -> SeamSummary:
        seams = self._closed + self._open
        jerks = [s.jerk for s in seams if s.jerk is not None]

        def mean_max(values: list[float]) -> tuple[float, float]:
            return (float(np.mean(values)) if values else 0.0), max(values, default=0.0)

        jump, arm, gripper = (
            mean_max([getattr(s, f) for s in seams]) for f in ("jump", "arm", "gripper")
        )
        jerk = mean_max(jerks)
        return SeamSummary(
            seams=len(seams),
            jerks=len(jerks),
            jump_mean=jump[0],
            jump_max=jump[1],
            jerk_mean=jerk[0],
            jerk_max=jerk[1],
            arm_jump_mean=arm[0],
            arm_jump_max=arm[1],
            gripper_jump_mean=gripper[0],
            gripper_jump_max=gripper[1],
        )
