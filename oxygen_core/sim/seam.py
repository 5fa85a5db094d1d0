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

- arrival: what a controller updating at ARRIVAL_HZ commands the arm's joints around the
  take-over (`arrival_peaks`): the old trajectory's samples up to the take-over update,
  then the new one's up to the point after the first point ahead, differenced into
  velocity, acceleration and jerk; the largest of each over the arm's joints, and whether
  a joint passed its velocity or acceleration limit (with the limits given). The sim's
  controller updates at the control rate; these are the same trajectories sampled as a
  robot's controller runs them, where the step into a linear segment is a velocity step
  of one update, not of one control period.

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

# A joint_trajectory_controller's update rate on a robot (ros2_control runs them at 100 to
# 1000 Hz): the rate at which the arrival is sampled.
ARRIVAL_HZ = 500.0
_SWITCH = 2  # the old trajectory's samples before its last: a jerk stencil over the switch


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
    arrivals: int = 0  # seams with the trajectories around them (arrival_peaks)
    arrival_velocity_mean: float = 0.0  # the arm's largest |velocity| at an arrival, rad/s
    arrival_velocity_max: float = 0.0
    arrival_acceleration_mean: float = 0.0  # rad/s^2
    arrival_acceleration_max: float = 0.0
    arrival_jerk_mean: float = 0.0  # rad/s^3
    arrival_jerk_max: float = 0.0
    arrivals_over: int = 0  # arrivals with an arm joint over its velocity or acceleration limit

    def as_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)

    @classmethod
    def pooled(cls, parts: list[SeamSummary]) -> SeamSummary:
        """The summary of several runs (episodes) together, as one meter over all would give."""
        seams = sum(p.seams for p in parts)
        jerks = sum(p.jerks for p in parts)
        arrivals = sum(p.arrivals for p in parts)

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
            arrivals=arrivals,
            arrival_velocity_mean=mean("arrival_velocity_mean", "arrivals"),
            arrival_velocity_max=top("arrival_velocity_max"),
            arrival_acceleration_mean=mean("arrival_acceleration_mean", "arrivals"),
            arrival_acceleration_max=top("arrival_acceleration_max"),
            arrival_jerk_mean=mean("arrival_jerk_mean", "arrivals"),
            arrival_jerk_max=top("arrival_jerk_max"),
            arrivals_over=sum(p.arrivals_over for p in parts),
        )


@dataclasses.dataclass(frozen=True)
class Peaks:
    """Per joint, the largest |velocity|, |acceleration| and |jerk| commanded around one
    arrival (`arrival_peaks`)."""

    velocity: np.ndarray
    acceleration: np.ndarray
    jerk: np.ndarray


def arrival_peaks(takeover: Takeover, period: float, update_hz: float = ARRIVAL_HZ) -> Peaks | None:
    """What a controller updating at `update_hz` commands around `takeover`: samples one
    update apart, the replaced trajectory's up to the new one's start (its `before`: the
    take-over update, or for a linear take-over the last command it leaves from), the new
    one's after it, up to its second point ahead (the segment into the first point and
    the one out of it; at least one control `period`). Differences of the samples give
    velocity, acceleration and jerk at every update whose stencil spans the switch or
    comes after it. None without the two trajectories."""
    old, new = takeover.replaced, takeover.run
    if old is None or new is None:
        return None
    u = 1.0 / update_hz
    ahead = new.times[new.times > new.before]
    end = ahead[1] if len(ahead) > 1 else new.before + period
    count = max(int(np.ceil((end - new.before) / u - 1e-9)), 3)
    ks = np.arange(-_SWITCH, count + 1)  # k <= 0 the replaced trajectory, k >= 1 the new
    q = np.array([(old if k <= 0 else new).at(new.before + k * u) for k in ks])
    v = np.diff(q, axis=0) / u
    a = np.diff(v, axis=0) / u
    j = np.diff(a, axis=0) / u
    # The differences whose stencil reaches the new trajectory's first sample, q[_SWITCH + 1].
    return Peaks(
        np.max(np.abs(v[_SWITCH:]), axis=0),
        np.max(np.abs(a[_SWITCH - 1 :]), axis=0),
        np.max(np.abs(j[_SWITCH - 2 :]), axis=0),
    )


@dataclasses.dataclass
class _Seam:
    jump: float
    arm: float
    gripper: float
    ticks_left: int = 4  # stencils still to see that contain the take-over tick
    jerk: float | None = None
    peaks: tuple[float, float, float, bool] | None = None  # the arm's (arrival_peaks), over


class SeamMeter:
    """Accumulates seams over one episode (a new meter per episode: the jump to the reset
    pose is no seam); feed it every control tick's command."""

    def __init__(
        self, period: float, gripper: int | None = None, limits: JointLimits | None = None
    ) -> None:
        """gripper: the index of the gripper's command (None: every joint is the arm's).
        limits: the commanded joints', for the arrivals over them (None: none counted)."""
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
        arm = self._arm(jumps)
        gripper = jumps[self.gripper] if self.gripper is not None else 0.0
        seam = _Seam(float(np.max(jumps)), float(np.max(arm, initial=0.0)), float(gripper))
        peaks = arrival_peaks(takeover, self.period)
        if peaks is not None:
            over = self.limits is not None and bool(
                np.any(self._arm(peaks.velocity / self.limits.velocity) > 1)
                or np.any(self._arm(peaks.acceleration / self.limits.acceleration) > 1)
            )
            velocity, acceleration, jerk = (
                float(np.max(self._arm(p), initial=0.0))
                for p in (peaks.velocity, peaks.acceleration, peaks.jerk)
            )
            seam.peaks = (velocity, acceleration, jerk, over)
        return seam

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
        peaks = [s.peaks for s in seams if s.peaks is not None]
        velocity, acceleration, arrival_jerk = (mean_max([p[i] for p in peaks]) for i in range(3))
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
            arrivals=len(peaks),
            arrival_velocity_mean=velocity[0],
            arrival_velocity_max=velocity[1],
            arrival_acceleration_mean=acceleration[0],
            arrival_acceleration_max=acceleration[1],
            arrival_jerk_mean=arrival_jerk[0],
            arrival_jerk_max=arrival_jerk[1],
            arrivals_over=sum(p[3] for p in peaks),
        )
