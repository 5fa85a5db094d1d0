"""The chunk gate: what may reach a robot's controller of the chunk the model produced.

A chunk is a trajectory of position points, each at a time after the measured joint state
it must start from. The gate checks, in this order: the shape and the times (strictly
increasing, after the state), finite values, the jump from the measured state to the first
point, every point inside the position range, then the finite-difference velocity of every
segment (the first one runs from the measured state to the first point) and the
acceleration between consecutive segments. The robot's velocity at the state is not
measured here, so the first segment's acceleration is not judged; the start jump bounds it.

The policy says what to do with a chunk that breaks a bound, per kind of bound:

- `reject`: nothing is sent; the caller holds the robot where it is.
- `clamp`: positions go into their range; a chunk still too fast after that is rejected.
- `slow`: positions go into their range, then every segment's duration is stretched by one
  factor s >= 1 until every velocity (which falls as 1/s) and acceleration (1/s^2) bound
  holds. The points, and so the chunk's end, stay where the model put them.

A shape, time, non-finite or jump finding always rejects: no re-timing makes a chunk that
was computed for another pose, or is not a trajectory, safe. The verdict lists every kind
of bound the model's chunk broke (the worst point of each; speeds are those of the points
after clamping) whatever was done about it, so the caller can count them.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np

from oxygen_core.safety.limits import JointLimits

Policy = Literal["clamp", "slow", "reject"]
POLICIES: tuple[Policy, ...] = ("clamp", "slow", "reject")
Reason = Literal["shape", "non_finite", "jump", "position", "velocity", "acceleration"]
Outcome = Literal["passed", "clamped", "slowed", "rejected"]
_ALWAYS_REJECT = frozenset({"shape", "non_finite", "jump"})
_TOLERANCE = 1e-9  # relative slack for float rounding: a stretched chunk sits on its bounds


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
    """What the gate lets through: `positions` at `times` (None with outcome "rejected")."""

    outcome: Outcome
    positions: np.ndarray | None  # float64 [T, J]
    times: np.ndarray | None  # float64 [T], seconds after the measured state
    findings: tuple[Finding, ...]
    stretch: float = 1.0  # the factor every segment's duration was multiplied by

    @property
    def sent(self) -> bool:
        return self.positions is not None


class ChunkGate:
    """Checks chunks against one robot's `JointLimits` under one policy."""

    def __init__(self, limits: JointLimits, policy: Policy) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown gate policy {policy!r}; choose {', '.join(POLICIES)}")
        self.limits, self.policy = limits, policy

    def check(self, positions: np.ndarray, times: np.ndarray, state: np.ndarray) -> Verdict:
        """The verdict on `positions` [T, J] at `times` [T] (seconds after `state` [J], the
        measured joint positions, all in `limits.names` order)."""
        positions = np.asarray(positions, np.float64)
        times, state = np.asarray(times, np.float64), np.asarray(state, np.float64)
        early = self._shape(positions, times, state) or self._start(positions, state)
        if early is not None:
            return Verdict("rejected", None, None, (early,))
        clipped = np.clip(positions, self.limits.lower, self.limits.upper)
        findings = tuple(f for f in (self._position(positions),) if f is not None)
        findings += self._speed(clipped, times, state)
        return self._decide(clipped, times, state, findings)

    def _decide(
        self, clipped: np.ndarray, times: np.ndarray, state: np.ndarray, findings: tuple
    ) -> Verdict:
        reasons = {f.reason for f in findings}
        if not reasons:
            return Verdict("passed", clipped, times, ())
        speed = reasons & {"velocity", "acceleration"}
        if self.policy == "reject" or (self.policy == "clamp" and speed):
            return Verdict("rejected", None, None, findings)
        if not speed:
            return Verdict("clamped", clipped, times, findings)
        stretch = self._stretch(clipped, times, state)
        return Verdict("slowed", clipped, times * stretch, findings, stretch)

    def _shape(self, positions: np.ndarray, times: np.ndarray, state: np.ndarray) -> Finding | None:
        joints = len(self.limits.names)
        if positions.ndim != 2 or positions.shape[0] < 1 or positions.shape[1] != joints:
            return _whole("shape", f"chunk shape {positions.shape}, expected [>=1, {joints}]")
        if times.shape != positions.shape[:1] or state.shape != (joints,):
            return _whole(
                "shape",
                f"times {times.shape} and state {state.shape} for a chunk of {positions.shape}",
            )
        if not (np.all(np.isfinite(times)) and times[0] > 0 and np.all(np.diff(times) > 0)):
            return _whole("shape", "point times must be finite, after the state and increasing")
        return None

    def _start(self, positions: np.ndarray, state: np.ndarray) -> Finding | None:
        """Non-finite values anywhere, then the first point's jump from the state."""
        for array, what in ((state, "measured state"), (positions, "chunk")):
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

    def _speed(self, positions: np.ndarray, times: np.ndarray, state: np.ndarray) -> tuple:
        velocity, acceleration = _derivatives(positions, times, state)
        found = (
            self._worst("velocity", np.abs(velocity), self.limits.velocity, "velocity"),
            self._worst(
                "acceleration",
                np.abs(acceleration),
                self.limits.acceleration,
                "acceleration",
                first_point=1,
            ),
        )
        return tuple(f for f in found if f is not None)

    def _stretch(self, positions: np.ndarray, times: np.ndarray, state: np.ndarray) -> float:
        """The smallest s >= 1 with every |v| / s and |a| / s^2 inside its bound."""
        velocity, acceleration = _derivatives(positions, times, state)
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
    positions: np.ndarray, times: np.ndarray, state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per segment velocity [T, J] (segment 0: state -> point 0) and the acceleration
    between consecutive segments [T-1, J], over the mean of their two durations."""
    path = np.concatenate([state[None], positions])
    durations = np.diff(np.concatenate([[0.0], times]))
    velocity = np.diff(path, axis=0) / durations[:, None]
    spans = (durations[1:] + durations[:-1]) / 2
    return velocity, np.diff(velocity, axis=0) / spans[:, None]


def _whole(reason: Reason, detail: str) -> Finding:
    return Finding(reason, "", -1, float("nan"), 0.0, detail)
