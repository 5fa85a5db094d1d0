"""Joint trajectories executed at the control rate, as a trajectory controller does.

The semantics follow ros2_control's joint_trajectory_controller for position-only points,
because the node under test publishes `trajectory_msgs/JointTrajectory` chunks and a real
robot would run them that way:

- a trajectory starts at its `start` time (the message's header stamp; the ROS side maps a
  zero stamp to "now"); `replace` queues it, and the trajectory it supersedes keeps running
  until that time (any queued trajectory starting at or after it is dropped);
- when a trajectory takes over, points whose time is already past are skipped; from the
  position last commanded, the command moves linearly to the first point still ahead, then
  linearly from point to point, and holds the last point after the end;
- a malformed trajectory (joint names that are not the robot's, no points, a wrong number
  of positions, NaN or inf, times that do not strictly increase, or every point already in
  the past) is rejected and changes nothing, so the caller holds position. The
  `Rejection` says what kind of problem it is (to count by) and, in one line, what exactly.

Each take-over is reported as a `Takeover` (the last command before it and the new
trajectory's first executed point), which the seam metric consumes.

The executor also counts, as a controller that checks its goals would, the commanded
points outside the arm's limits (`LimitViolations`): at each take-over, over the points
it will run (not those skipped), a point whose position lies outside POSITION_LIMITS, and
a step whose finite-difference velocity exceeds VELOCITY_LIMITS: from one point to the
next over their time difference, and into the first point from the last command over the
time since that command (not counted when there is no earlier command time: after a
reset at the same tick, a first point due then has no step to measure). The gripper's
command is a setpoint (open or closed) that its servo moves to at its own rate, as a
gripper controller takes a goal: a fast step in it is no violation, only a position
outside its range (the node's sim configs switch its rate bounds off for the same
reason). It only counts: the servos (`arm.limit_step`) clip what they execute, so
counting changes no episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import numpy as np

from oxygen_core.sim.arm import GRIPPER, JOINT_NAMES, POSITION_LIMITS, VELOCITY_LIMITS

_TOLERANCE = 1e-9  # float noise at a limit (a float32 message of a value on it) is not over


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """A joint trajectory: `positions[k]` in `joint_names` order, reached at start + times[k]."""

    joint_names: tuple[str, ...]
    start: float  # sim seconds
    times: Sequence[float]  # time_from_start of each point, seconds
    positions: Sequence[Sequence[float]]


RejectKind = Literal["joint_names", "points", "non_finite", "times", "late"]


@dataclasses.dataclass(frozen=True)
class Rejection:
    """Why `replace` refused a trajectory: a kind to count by, and the one-line detail."""

    kind: RejectKind
    reason: str


@dataclasses.dataclass(frozen=True)
class Takeover:
    """One trajectory taking over from another at a control tick."""

    time: float  # the tick at which the new trajectory took over
    previous: np.ndarray  # the position commanded at the tick before
    first_point: np.ndarray  # the new trajectory's first point that was not skipped
    skipped: int  # points already in the past at take-over

    @property
    def jumps(self) -> np.ndarray:
        """Each joint's difference between the old command and the new first point."""
        return np.abs(self.first_point - self.previous)


@dataclasses.dataclass(frozen=True)
class LimitViolations:
    """Commanded points outside the arm's limits, counted at take-over (module docstring)."""

    trajectories: int = 0  # trajectories that took over with at least one point over
    position: int = 0  # points with a joint outside its position range
    velocity: int = 0  # steps into a point with a joint over its velocity limit

    def __add__(self, other: LimitViolations) -> LimitViolations:
        return LimitViolations(
            self.trajectories + other.trajectories,
            self.position + other.position,
            self.velocity + other.velocity,
        )

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Active:
    start: float
    times: np.ndarray  # absolute times of the points still to run
    positions: np.ndarray  # (K, D) in the executor's joint order
    anchor: np.ndarray  # where the command was when this trajectory took over
    anchor_time: float


class TrajectoryExecutor:
    """Turns received trajectories into joint position targets at any sim time."""

    def __init__(
        self,
        initial: np.ndarray,
        joint_names: tuple[str, ...] = JOINT_NAMES,
        limits: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """limits: (position [D, 2] low/high, velocity [D]) in `joint_names` order; None: the
        arm's (arm.py) for the joints it has, the gripper's rate and any other name's
        unbounded."""
        self.joint_names = tuple(joint_names)
        self._position_limits, self._velocity_limits = self._limits(limits)
        self.reset(initial)

    def _limits(self, limits: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, ...]:
        joints = len(self.joint_names)
        if limits is None:
            index = [JOINT_NAMES.index(n) if n in JOINT_NAMES else None for n in self.joint_names]
            unbounded = (-np.inf, np.inf)
            return (
                np.array([unbounded if i is None else POSITION_LIMITS[i] for i in index]),
                np.array([np.inf if i in (None, GRIPPER) else VELOCITY_LIMITS[i] for i in index]),
            )
        position, velocity = (np.asarray(limit, np.float64) for limit in limits)
        if position.shape != (joints, 2) or velocity.shape != (joints,):
            raise ValueError(
                f"limits must be position [{joints}, 2] and velocity [{joints}], got "
                f"{position.shape} and {velocity.shape}"
            )
        return position, velocity

    def reset(self, position: np.ndarray, time: float | None = None) -> None:
        """Forget every trajectory and hold `position` (an episode reset)."""
        self._queue: list[tuple[float, np.ndarray, np.ndarray]] = []  # (start, times, points)
        self._active: _Active | None = None
        self._last = np.array(position, np.float64)
        self._last_time = time
        self.last_takeover: Takeover | None = None
        self.violations = LimitViolations()  # since the reset

    def replace(self, trajectory: Trajectory, now: float) -> Rejection | None:
        """Queue `trajectory` to take over at its start time. Returns None when accepted,
        else why it was rejected (nothing changes then)."""
        parsed = self._parse(trajectory, now)
        if isinstance(parsed, Rejection):
            return parsed
        start, times, positions = parsed
        self._queue = [q for q in self._queue if q[0] < start]
        self._queue.append((start, times, positions))
        return None

    def command(self, t: float) -> np.ndarray:
        """The joint targets at sim time t; call once per control tick, t increasing.
        `last_takeover` tells whether a new trajectory took over at this tick."""
        self.last_takeover = None
        due = [q for q in self._queue if q[0] <= t]
        if due:
            self._queue = [q for q in self._queue if q[0] > t]
            self._take_over(*due[-1], t)
        if self._active is not None:
            self._last = self._sample(self._active, t)
        self._last_time = t
        return self._last.copy()

    def _take_over(self, start: float, times: np.ndarray, positions: np.ndarray, t: float):
        absolute = start + times
        ahead = int(np.searchsorted(absolute, t, side="left"))  # points at or after t
        skip = min(ahead, len(times) - 1)  # all past (a late tick): keep the last point
        if self._active is not None:
            self.last_takeover = Takeover(t, self._last.copy(), positions[skip].copy(), skip)
        anchor_time = start if self._last_time is None else max(start, self._last_time)
        self._active = _Active(start, absolute[skip:], positions[skip:], self._last, anchor_time)
        self.violations += self._count(absolute[skip:], positions[skip:])

    def _count(self, times: np.ndarray, points: np.ndarray) -> LimitViolations:
        """The limit violations of the points about to run (module docstring)."""
        low, high = self._position_limits[:, 0], self._position_limits[:, 1]
        outside = np.any((points < low - _TOLERANCE) | (points > high + _TOLERANCE), axis=1)
        steps, spans = np.diff(points, axis=0), np.diff(times)
        if self._last_time is not None and times[0] > self._last_time:
            steps = np.vstack([points[:1] - self._last, steps])
            spans = np.concatenate([[times[0] - self._last_time], spans])
        speeding = np.any(
            np.abs(steps) > (self._velocity_limits + _TOLERANCE) * spans[:, None], axis=1
        )
        position, velocity = int(outside.sum()), int(speeding.sum())
        return LimitViolations(int(position + velocity > 0), position, velocity)

    @staticmethod
    def _sample(active: _Active, t: float) -> np.ndarray:
        times, points = active.times, active.positions
        if t >= times[-1]:
            return points[-1].copy()
        if t < times[0]:
            span = times[0] - active.anchor_time
            fraction = 1.0 if span <= 0 else (t - active.anchor_time) / span
            return active.anchor + fraction * (points[0] - active.anchor)
        k = int(np.searchsorted(times, t, side="right")) - 1
        fraction = (t - times[k]) / (times[k + 1] - times[k])
        return points[k] + fraction * (points[k + 1] - points[k])

    def _parse(
        self, traj: Trajectory, now: float
    ) -> tuple[float, np.ndarray, np.ndarray] | Rejection:
        names = tuple(traj.joint_names)
        if len(set(names)) != len(names) or set(names) != set(self.joint_names):
            missing = [n for n in self.joint_names if n not in names]
            unknown = [n for n in names if n not in self.joint_names]
            return Rejection(
                "joint_names",
                f"joint names {list(names)} do not match: missing {missing}, unknown {unknown}",
            )
        if len(traj.positions) == 0 or len(traj.times) != len(traj.positions):
            return Rejection("points", f"{len(traj.positions)} points with {len(traj.times)} times")
        for k, point in enumerate(traj.positions):
            if len(point) != len(names):
                return Rejection(
                    "points", f"point {k} has {len(point)} positions, expected {len(names)}"
                )
        times = np.asarray(traj.times, np.float64)
        positions = np.asarray(traj.positions, np.float64)
        if not np.isfinite(traj.start) or not np.all(np.isfinite(times)):
            return Rejection("non_finite", "start time or time_from_start is not finite")
        bad = np.flatnonzero(~np.all(np.isfinite(positions), axis=1))
        if bad.size:
            return Rejection("non_finite", f"point {int(bad[0])} has a non-finite position")
        if times[0] < 0 or np.any(np.diff(times) <= 0):
            return Rejection(
                "times",
                f"time_from_start must start >= 0 and strictly increase: {times.tolist()}",
            )
        if traj.start + times[-1] < now:
            last = traj.start + times[-1]
            return Rejection(
                "late", f"all points are in the past (the last at {last:.3f} s, now {now:.3f} s)"
            )
        order = [names.index(n) for n in self.joint_names]
        return float(traj.start), times, positions[:, order]
