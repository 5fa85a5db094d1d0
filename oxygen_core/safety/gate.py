"""The chunk gate: what may reach a robot's controller of the chunk the model produced.

A chunk is a trajectory of position points on the control grid: point i is reached
(i + 1) control periods after its start, the position the robot is commanded one period
before the chunk's first row runs: the last row of the `lead`, the rows of the chunk it
is running then (what a trajectory controller moves from into a new trajectory's first
point), or, when none runs, the measured joint state (the robot stands there). The gate
checks, in this order: the shape, finite values, the jump from the measured state to the
first point (a chunk computed for another pose), every point inside the position range,
then the finite-difference velocity of every step (the first one from the start to the
first point) and the acceleration between consecutive steps, the seam's too when the
lead has two rows (its last step is the velocity the robot has at the start; without it
the first step's acceleration is not judged, and the start jump bounds it).

A controller that runs cubic segments (`segments="cubic"`: the Jazzy joint_trajectory_
controller given velocities, oxygen_core.controller.shaping) moves between the points
along Hermite cubics through the velocities shaping gives them (shaping.grid_velocities),
which can be faster between two points than either step: the velocity and acceleration
checked are then each segment's exact largest (shaping.segment_peaks), from the lead's
last row on.

The policy says what to do with a chunk that breaks a bound, per kind of bound:

- `reject`: nothing is sent; the caller holds the robot where it is.
- `clamp`: positions go into their range; a chunk still too fast after that is rejected.
- `slow`: positions go into their range, then the path is retimed: every step's duration
  is stretched by one factor s >= 1 and the path (linear between the points) resampled
  on the control grid, so the chunk has more rows, one per period as before. s starts at
  the least that meets every velocity (which falls as 1/s) and acceleration (1/s^2)
  bound and grows until the resampled rows meet them too, up to `max_stretch`; a chunk
  that needs more is rejected. The chunk still ends where the model said.

The rows the gate lets through are float32 values (what the chunk and the trajectory
carry, and what the timeline keeps), checked as such: a clamped position rounds inwards,
and a retimed chunk that rounding puts a hair over a rate bound is stretched 0.01 % more.

With a `seam_share` the seam is eased first (oxygen_core.safety.seam: the new chunk's
disagreement with the lead faded out within that share of each acceleration bound), after
the jump is judged on the model's first point, and every later check judges the eased
rows: easing must not hide a chunk computed for another pose.

A shape, non-finite or jump finding always rejects: no retiming makes a chunk that was
computed for another pose, or is not a chunk of this robot, safe. The verdict lists every
kind of bound the model's chunk broke (the worst point of each; speeds are those of the
points after clamping) whatever was done about it, so the caller can count them; the rows
it lets through have been checked against every bound.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Literal

import numpy as np

from oxygen_core.controller.shaping import Segments, grid_velocities, segment_peaks
from oxygen_core.safety.limits import JointLimits
from oxygen_core.safety.seam import ease

Policy = Literal["clamp", "slow", "reject"]
POLICIES: tuple[Policy, ...] = ("clamp", "slow", "reject")
Reason = Literal["shape", "non_finite", "jump", "position", "velocity", "acceleration"]
Outcome = Literal["passed", "clamped", "slowed", "rejected"]
_ALWAYS_REJECT = frozenset({"shape", "non_finite", "jump"})
# No slack: what the gate lets through must read 0 in the independent counts (the sim's
# executor, oxygen-bag limit-check), which allow 1e-9 per second absolute, less than 1e-9
# relative for a bound over 1 /s.
_TOLERANCE = 0.0
_MARGIN = 1e-4  # the extra stretch when float32 rounding puts a retimed row over a bound


@dataclasses.dataclass(frozen=True)
class Finding:
    """The worst point of one kind of broken bound: `value` against `limit` at `joint`."""

    reason: Reason
    joint: str  # "" where the finding is about the whole chunk (shape, times)
    point: int  # the chunk's point index; -1 where none applies
    value: float
    limit: float
    detail: str  # one line for a warning


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the gate lets through: `positions`, one row per control period from one period
    after the measured state (None with outcome "rejected")."""

    outcome: Outcome
    positions: np.ndarray | None  # float64 [rows, J]; slowed: more rows than the chunk's
    findings: tuple[Finding, ...]
    stretch: float = 1.0  # the factor every step's duration was multiplied by

    @property
    def sent(self) -> bool:
        return self.positions is not None


class ChunkGate:
    """Checks chunks against one robot's `JointLimits` on its control grid, under one policy."""

    def __init__(
        self,
        limits: JointLimits,
        policy: Policy,
        period_s: float,
        max_stretch: float = 10.0,
        segments: Segments = "linear",
        seam_share: float = 0.0,
    ) -> None:
        """segments: how the controller moves between the points; seam_share: the share of
        each acceleration bound a seam's easing may use, 0 for none (module docstring)."""
        if policy not in POLICIES:
            raise ValueError(f"unknown gate policy {policy!r}; choose {', '.join(POLICIES)}")
        if not period_s > 0 or not max_stretch >= 1 or not 0 <= seam_share <= 1:
            raise ValueError(
                "gate needs period_s > 0, max_stretch >= 1 and 0 <= seam_share <= 1, got "
                f"{period_s}, {max_stretch}, {seam_share}"
            )
        self.limits, self.policy, self.segments = limits, policy, segments
        self.period_s, self.max_stretch, self.seam_share = period_s, max_stretch, seam_share

    def check(
        self, positions: np.ndarray, state: np.ndarray, lead: np.ndarray | None = None
    ) -> Verdict:
        """The verdict on `positions` [H, J]: row i reached i + 1 periods after the start,
        the last row of `lead` [1 or 2, J] (the rows the robot runs one and two periods
        before row 0, oldest first; None: `state`, nothing running), `state` [J] the
        measured joint positions; all in `limits.names` order."""
        positions = np.asarray(positions, np.float64)
        state = np.asarray(state, np.float64)
        lead = state[None] if lead is None else np.asarray(lead, np.float64)
        early = self._shape(positions, state, lead) or self._start(positions, state, lead)
        if early is not None:
            return Verdict("rejected", None, (early,))
        if self.seam_share > 0:
            positions = ease(
                positions, lead, self.limits.acceleration, self.period_s, self.seam_share
            )
        clipped = _sent(positions, self.limits.lower, self.limits.upper)
        findings = tuple(f for f in (self._position(positions),) if f is not None)
        findings += self._speed(clipped, lead)
        reasons = {f.reason for f in findings}
        if not reasons:
            return Verdict("passed", clipped, ())
        speed = reasons & {"velocity", "acceleration"}
        if self.policy == "reject" or (self.policy == "clamp" and speed):
            return Verdict("rejected", None, findings)
        if not speed:
            return Verdict("clamped", clipped, findings)
        return self._slowed(clipped, lead, findings)

    def _slowed(self, clipped: np.ndarray, lead: np.ndarray, findings: tuple) -> Verdict:
        """The least stretch whose resampled float32 rows meet every bound: the bound's own,
        0.01 % more (rounding to float32 can put a row a hair over), then in steps of 10 %
        (a seam's acceleration falls only as 1/s, to what stopping costs); rejected past
        max_stretch."""
        least = self._stretch(clipped, lead[-1])
        stretches = itertools.chain([least], _grown(least * (1 + _MARGIN)))
        for stretch in itertools.takewhile(lambda s: s <= self.max_stretch, stretches):
            resampled = _resample(lead[-1], clipped, stretch)
            rows = _sent(resampled, self.limits.lower, self.limits.upper)
            if not self._speed(rows, lead):
                return Verdict("slowed", rows, findings, stretch)
        return Verdict("rejected", None, findings, least)

    def _shape(self, positions: np.ndarray, state: np.ndarray, lead: np.ndarray) -> Finding | None:
        joints = len(self.limits.names)
        if positions.ndim != 2 or positions.shape[0] < 1 or positions.shape[1] != joints:
            return _whole("shape", f"chunk shape {positions.shape}, expected [>=1, {joints}]")
        if state.shape != (joints,):
            return _whole("shape", f"measured state shape {state.shape}, expected ({joints},)")
        if lead.ndim != 2 or not 1 <= lead.shape[0] <= 2 or lead.shape[1] != joints:
            return _whole("shape", f"lead shape {lead.shape}, expected [1 or 2, {joints}]")
        return None

    def _start(self, positions: np.ndarray, state: np.ndarray, lead: np.ndarray) -> Finding | None:
        """Non-finite values anywhere, then the first point's jump from the state."""
        for array, what in ((state, "measured state"), (lead, "lead"), (positions, "chunk")):
            bad = np.argwhere(~np.isfinite(array))
            if len(bad):
                joint = self.limits.names[bad[0][-1]]
                point = int(bad[0][0]) if array.ndim == 2 else -1
                detail = f"{what} is not finite at {joint}"
                return Finding("non_finite", joint, point, float("nan"), 0.0, detail)
        return self._worst("jump", np.abs(positions[:1] - state), self.limits.jump, "start jump")

    def _position(self, positions: np.ndarray) -> Finding | None:
        lower, upper = self.limits.lower, self.limits.upper
        excess = np.maximum(lower - positions, positions - upper)
        if not np.any(excess > 0):
            return None
        point, j = np.unravel_index(np.argmax(excess), excess.shape)
        value = float(positions[point, j])
        bound = float(lower[j] if value < lower[j] else upper[j])
        name = self.limits.names[j]
        detail = f"{name} commanded {value:.4g} outside [{lower[j]:.4g}, {upper[j]:.4g}]"
        return Finding("position", name, int(point), value, bound, detail)

    def _speed(self, positions: np.ndarray, lead: np.ndarray) -> tuple[Finding, ...]:
        if self.segments == "cubic":
            velocity, acceleration = _cubic_peaks(positions, lead, self.period_s)
            first_acceleration = 0  # the segment into point 0 has one too
        else:
            velocity, acceleration = _derivatives(positions, lead, self.period_s)
            first_acceleration = 2 - len(lead)  # the seam's (point 0) with a 2-row lead
        found = (
            self._worst("velocity", np.abs(velocity), self.limits.velocity, "velocity"),
            self._worst(
                "acceleration",
                np.abs(acceleration),
                self.limits.acceleration,
                "acceleration",
                first_point=first_acceleration,
            ),
        )
        return tuple(f for f in found if f is not None)

    def _stretch(self, positions: np.ndarray, start: np.ndarray) -> float:
        """The least s >= 1 with every |v| / s and |a| / s^2 inside its bound (the chunk's
        own steps from `start`; the seam's acceleration is not of that form)."""
        velocity, acceleration = _derivatives(positions, start[None], self.period_s)
        by_velocity = np.max(np.abs(velocity) / self.limits.velocity, initial=0.0)
        by_acceleration = np.sqrt(
            np.max(np.abs(acceleration) / self.limits.acceleration, initial=0.0)
        )
        return float(max(1.0, by_velocity, by_acceleration))

    def _worst(
        self, reason: Reason, values: np.ndarray, bound: np.ndarray, what: str, first_point: int = 0
    ) -> Finding | None:
        """The point and joint where `values` [P, J] most exceed `bound` [J] (relative to it)."""
        if values.size == 0:
            return None
        ratio = values / bound
        if not np.any(ratio > 1 + _TOLERANCE):
            return None
        point, j = np.unravel_index(np.argmax(ratio), ratio.shape)
        value, name = float(values[point, j]), self.limits.names[j]
        detail = f"{name} {what} {value:.4g} over its limit {bound[j]:.4g}"
        return Finding(reason, name, int(point) + first_point, value, float(bound[j]), detail)


def _derivatives(
    positions: np.ndarray, lead: np.ndarray, period_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per step velocity [H, J] (step 0: the lead's last row -> row 0) and the acceleration
    between consecutive steps whose later one is the chunk's: [H, J] from the seam with a
    2-row lead, [H-1, J] from row 1 with one row."""
    steps = np.diff(np.concatenate([lead, positions]), axis=0) / period_s
    return steps[len(lead) - 1 :], np.diff(steps, axis=0) / period_s


def _cubic_peaks(
    positions: np.ndarray, lead: np.ndarray, period_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per point [H, J], the largest |velocity| and |acceleration| of the cubic segment into
    it, from the lead's last row, through the path's velocities as shaping gives them."""
    path = np.concatenate([lead, positions])
    velocities = grid_velocities(path, period_s, None)[len(lead) - 1 :]
    knots = path[len(lead) - 1 :]
    return segment_peaks(knots[:-1], velocities[:-1], knots[1:], velocities[1:], period_s)


def _grown(stretch: float) -> Iterator[float]:
    """stretch, then 10 % more each time."""
    while True:
        yield stretch
        stretch *= 1.1


def _sent(positions: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """`positions` clamped into [lower, upper] as the float32 values that go out (float64
    arrays of them): a value that rounds past a bound moves one float32 step inwards."""
    rows = np.clip(positions, lower, upper).astype(np.float32)
    low, high = lower.astype(np.float32), upper.astype(np.float32)
    rows = np.where(rows < lower, np.nextafter(low, np.float32(np.inf)), rows)
    rows = np.where(rows > upper, np.nextafter(high, np.float32(-np.inf)), rows)
    return rows.astype(np.float64)


def _resample(state: np.ndarray, positions: np.ndarray, stretch: float) -> np.ndarray:
    """The path state -> rows (linear between them), each step lasting `stretch` periods,
    sampled once a period from one period after the state; its last row is the chunk's."""
    knots = np.arange(len(positions) + 1) * stretch
    rows = int(np.ceil(len(positions) * stretch - 1e-9))
    grid = np.minimum(np.arange(1, rows + 1), knots[-1])
    path = np.concatenate([state[None], positions])
    return np.stack([np.interp(grid, knots, path[:, j]) for j in range(path.shape[1])], axis=1)


def _whole(reason: Reason, detail: str) -> Finding:
    return Finding(reason, "", -1, float("nan"), 0.0, detail)
