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

- the take-over's commands: the arm's commands around it, as the controller sent them at the
  control rate: the largest |first difference| / period (velocity), second difference /
  period^2 (acceleration) and third difference / period^3 (jerk) over the arm's joints,
  among the stencils that contain the take-over tick, and whether a joint passed its
  velocity or acceleration limit (with the limits given). A position step at the take-over
  is a velocity of step / period here.

Units are those of the commands (rad; the gripper's 0..1), jerk per s^3. A run's summary
gives the count and the mean and max of each. The meter is told which command is the
gripper; without one, every joint is the arm's.
"""

from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from oxygen_core.safety.limits import JointLimits
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
    takeover_velocity_mean: float = 0.0  # the arm's largest |velocity| at a take-over, rad/s
    takeover_velocity_max: float = 0.0
    takeover_acceleration_mean: float = 0.0  # rad/s^2
    takeover_acceleration_max: float = 0.0
    takeover_jerk_mean: float = 0.0  # rad/s^3
    takeover_jerk_max: float = 0.0
    takeovers_over: int = 0  # take-overs with an arm joint over its velocity or acceleration limit

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
            takeover_velocity_mean=mean("takeover_velocity_mean"),
            takeover_velocity_max=top("takeover_velocity_max"),
            takeover_acceleration_mean=mean("takeover_acceleration_mean"),
            takeover_acceleration_max=top("takeover_acceleration_max"),
            takeover_jerk_mean=mean("takeover_jerk_mean"),
            takeover_jerk_max=top("takeover_jerk_max"),
            takeovers_over=sum(p.takeovers_over for p in parts),
        )


@dataclasses.dataclass
class _Seam:
    jump: float
    arm: float
    gripper: float
    ticks_left: int = 4  # stencils still to see that contain the take-over tick
    jerk: float | None = None
    # The arm's largest velocity, acceleration and jerk over the stencils seen so far.
    peaks: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    over: bool = False  # an arm joint past its velocity or acceleration limit


class SeamMeter:
    """Accumulates seams over one episode (a new meter per episode: the jump to the reset
    pose is no seam); feed it every control tick's command."""

    def __init__(
        self, period: float, gripper: int | None = None, limits: JointLimits | None = None
    ) -> None:
        """gripper: the index of the gripper's command (None: every joint is the arm's).
        limits: the commanded joints', for the take-overs over them (None: none counted)."""
        self.period = period
        self.gripper = gripper
        self.limits = limits
        self._history: deque[np.ndarray] = deque(maxlen=4)
        self._open: list[_Seam] = []
        self._closed: list[_Seam] = []

    def observe(self, command: np.ndarray, takeover: Takeover | None = None) -> None:
        """One control tick: the command sent, and the take-over at this tick if any."""
        self._history.append(np.asarray(command, np.float64))
        if takeover is not None:
            self._open.append(self._seam(takeover))
        if self._open:
            differences = self._differences()
            for seam in self._open:
                self._see(seam, differences)
        for seam in self._open:
            seam.ticks_left -= 1
        self._closed += [s for s in self._open if s.ticks_left == 0]
        self._open = [s for s in self._open if s.ticks_left > 0]

    def _differences(self) -> list[np.ndarray | None]:
        """The m-th difference of the last m + 1 commands / period^m for m = 1, 2, 3 (velocity,
        acceleration, jerk); None while the history is shorter."""
        c = list(self._history)
        return [
            np.diff(c[-m - 1 :], n=m, axis=0)[0] / self.period**m if len(c) > m else None
            for m in (1, 2, 3)
        ]

    def _see(self, seam: _Seam, differences: list[np.ndarray | None]) -> None:
        """This tick's stencils that contain `seam`'s take-over tick (the m-th difference
        does while the seam is at most m ticks old)."""
        age = 4 - seam.ticks_left
        for m, d in enumerate(differences, start=1):
            if d is None or age > m:
                continue
            arm = np.abs(self._arm(d))
            seam.peaks[m - 1] = max(seam.peaks[m - 1], float(np.max(arm, initial=0.0)))
            if m == 3:
                jerk = float(np.max(np.abs(d)))
                seam.jerk = jerk if seam.jerk is None else max(seam.jerk, jerk)
            elif self.limits is not None:
                bound = self._arm(self.limits.velocity if m == 1 else self.limits.acceleration)
                seam.over |= bool(np.any(arm > bound))

    def _seam(self, takeover: Takeover) -> _Seam:
        jumps = takeover.jumps
        arm = self._arm(jumps)
        gripper = jumps[self.gripper] if self.gripper is not None else 0.0
        return _Seam(float(np.max(jumps)), float(np.max(arm, initial=0.0)), float(gripper))

    def _arm(self, values: np.ndarray) -> np.ndarray:
        """The arm's joints of per-joint `values` (all but the gripper)."""
        return np.delete(values, self.gripper) if self.gripper is not None else values

    def summary(self) -> SeamSummary:
        seams = self._closed + self._open
        jerks = [s.jerk for s in seams if s.jerk is not None]

        def mean_max(values: list[float]) -> tuple[float, float]:
            return (float(np.mean(values)) if values else 0.0), max(values, default=0.0)

        jump, arm, gripper = (
            mean_max([getattr(s, f) for s in seams]) for f in ("jump", "arm", "gripper")
        )
        jerk = mean_max(jerks)
        velocity, acceleration, takeover_jerk = (
            mean_max([float(s.peaks[i]) for s in seams]) for i in range(3)
        )
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
            takeover_velocity_mean=velocity[0],
            takeover_velocity_max=velocity[1],
            takeover_acceleration_mean=acceleration[0],
            takeover_acceleration_max=acceleration[1],
            takeover_jerk_mean=takeover_jerk[0],
            takeover_jerk_max=takeover_jerk[1],
            takeovers_over=sum(s.over for s in seams),
        )
