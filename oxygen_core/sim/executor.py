"""Joint trajectories executed at the control rate, as a trajectory controller does.

The node under test publishes `trajectory_msgs/JointTrajectory` chunks, and a real robot
would run them with ros2_control's joint_trajectory_controller. Two models of it:

- `controller="jtc"` (the default): the controller as released for Jazzy and Kilted (rules
  and sources in `oxygen_core.controller.jtc`): a message replaces what ran at the first
  update after it arrives, starting from the measured joints (`command(t, measured)`, and
  their velocities with a velocity state interface), or from its last command with
  `interpolate_from_desired_state`, a zero stamp meaning that update;
  segments are linear, cubic or quintic by what the points carry; each update commands
  the sample one period ahead;
- `controller="jtc_replacement"`: the ROS 1 controller's trajectory replacement, as
  ros2_controllers documents it (doc/trajectory.rst, kilted 123-173; master implemented it
  as a deferral in PR 2401 and now splices at arrival, PR 2419, see
  `oxygen_core.controller.jtc`). It ignores `measured` and
  any velocities or accelerations:

  - a trajectory starts at its `start` time (the message's header stamp; the ROS side maps
    a zero stamp to "now"); `replace` queues it, and the trajectory it supersedes keeps
    running until that time (any queued trajectory starting at or after it is dropped);
  - when a trajectory takes over, points whose time is already past are skipped; from the
    position last commanded, the command moves linearly to the first point still ahead,
    then linearly from point to point, and holds the last point after the end.

Under both, a malformed trajectory (joint names that are not the robot's, no points, a
wrong number of values, NaN or inf, times that do not strictly increase, or every point
already in the past; under "jtc" as `oxygen_core.controller.jtc` says) is rejected and changes
nothing, so the caller holds position. The `Refused` says what kind of problem it is
(to count by) and, in one line, what exactly.

Each take-over is reported as a `Takeover` (the last command before it and the new
trajectory's first executed point: under "jtc", the first command, on its way from the
measured state), which the seam metric consumes.

The executor also counts, as a controller that checks its goals would, the commanded
points outside the arm's limits (`LimitViolations`): at each take-over, over the points
it will run (not those skipped or already past), a point whose position lies outside
POSITION_LIMITS, and a step whose finite-difference velocity exceeds VELOCITY_LIMITS: from
one point to the next over their time difference, and into the first point over the time
to it. Under "jtc_replacement" the step into the first point is from the last command
over the time since that command (not counted when there is no earlier command time: after
a reset at the same tick, a first point due then has no step to measure); under "jtc" it is
from where the controller starts at the take-over tick (the measured state, or the
segment's value when the first points are past). The gripper's command is a setpoint (open
or closed) that its servo moves to at its own rate, as a gripper controller takes a goal: a
fast step in it is no violation, only a position outside its range (the node's sim configs
switch its rate bounds off for the same reason). It only counts: the servos
(`arm.limit_step`) clip what they execute, so counting changes no episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

import numpy as np

from oxygen_core.controller.jtc import END_VELOCITY_EPSILON, Goal, JtcParams, Spline, take_over
from oxygen_core.sim.arm import GRIPPER, JOINT_NAMES, POSITION_LIMITS, VELOCITY_LIMITS
from oxygen_core.worlds import Refused

_TOLERANCE = 1e-9  # float noise at a limit (a float32 message of a value on it) is not over

Controller = Literal["jtc", "jtc_replacement"]
CONTROLLERS: tuple[Controller, ...] = ("jtc", "jtc_replacement")
# Every closed-loop figure so far was measured under it; "jtc" becomes the default with
# the re-measurement (docs/DESIGN.md section 13).
DEFAULT_CONTROLLER: Controller = "jtc"


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """A joint trajectory: point k (`positions[k]`, and `velocities[k]`, `accelerations[k]`
    when given, in `joint_names` order) is due at start + times[k]."""

    joint_names: tuple[str, ...]
    start: float  # sim seconds; under "jtc", 0.0 is the zero stamp (the take-over's update)
    times: Sequence[float]  # time_from_start of each point, seconds
    positions: Sequence[Sequence[float]]
    velocities: Sequence[Sequence[float]] | None = None  # "jtc": cubic segments
    accelerations: Sequence[Sequence[float]] | None = None  # "jtc", with velocities: quintic


@dataclasses.dataclass(frozen=True)
class Takeover:
    """One trajectory taking over from another at a control tick."""

    time: float  # the tick at which the new trajectory took over
    previous: np.ndarray  # the position commanded at the tick before
    first_point: np.ndarray  # the new trajectory's first executed point (module docstring)
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


# Per-point fields a trajectory may carry: (name, one value's name).
_FIELDS = (("positions", "position"), ("velocities", "velocity"), ("accelerations", "acceleration"))


def _carried(traj: Trajectory) -> list[tuple[str, str, Sequence[Sequence[float]]]]:
    return [(f, one, getattr(traj, f)) for f, one in _FIELDS if getattr(traj, f) is not None]


def _shape_problem(traj: Trajectory, width: int) -> str | None:
    if len(traj.positions) == 0 or len(traj.times) != len(traj.positions):
        return f"{len(traj.positions)} points with {len(traj.times)} times"
    for field, _, rows in _carried(traj):
        if len(rows) != len(traj.positions):
            return f"{len(rows)} rows of {field} for {len(traj.positions)} points"
        for k, row in enumerate(rows):
            if len(row) != width:
                return f"point {k} has {len(row)} {field}, expected {width}"
    if traj.accelerations is not None and traj.velocities is None:
        return "accelerations without velocities (upstream would command zero positions)"
    return None


def _finite_problem(traj: Trajectory) -> str | None:
    if not np.isfinite(traj.start) or not np.all(np.isfinite(np.asarray(traj.times, float))):
        return "start time or time_from_start is not finite"
    for _, one, rows in _carried(traj):
        bad = np.flatnonzero(~np.all(np.isfinite(np.asarray(rows, np.float64)), axis=1))
        if bad.size:
            return f"point {int(bad[0])} has a non-finite {one}"
    return None


class TrajectoryExecutor:
    """Turns received trajectories into joint position targets at any sim time."""

    def __init__(
        self,
        initial: np.ndarray,
        joint_names: tuple[str, ...] = JOINT_NAMES,
        limits: tuple[np.ndarray, np.ndarray] | None = None,
        *,
        controller: Controller,
        jtc: JtcParams | None = None,
    ) -> None:
        """limits: (position [D, 2] low/high, velocity [D]) in `joint_names` order; None: the
        arm's (arm.py) for the joints it has, the gripper's rate and any other name's
        unbounded. controller: the model (module docstring); jtc: its parameters, which
        "jtc" needs (the control period at least) and "jtc_replacement" does not take."""
        if (controller == "jtc") != (jtc is not None):
            raise ValueError(f"controller {controller!r}, jtc={jtc}: JtcParams go with 'jtc' only")
        self.joint_names = tuple(joint_names)
        self.jtc = jtc
        self._lead = 0.0 if jtc is None else jtc.period  # "jtc" commands a period ahead
        self._position_limits, self._velocity_limits = self._limits(limits)
        self.reset(initial)

    @classmethod
    def of(cls, initial: np.ndarray, controller: Controller, period: float) -> TrajectoryExecutor:
        """The arm's executor under `controller`, updated every `period` seconds (the sim's
        and the in-process loop's one way to make it)."""
        if controller not in CONTROLLERS:
            raise ValueError(f"controller {controller!r} is not one of {CONTROLLERS}")
        jtc = JtcParams(period) if controller == "jtc" else None
        return cls(initial, controller=controller, jtc=jtc)

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
        self._queue: list[Goal] = []
        self._run: Spline | None = None
        self._last = np.array(position, np.float64)
        self._last_time = time
        self.last_takeover: Takeover | None = None
        self.violations = LimitViolations()  # since the reset
        # Trajectories taken over with a point already due (since the reset): the message
        # reached the controller after the time its sender meant a point for.
        self.late_takeovers = 0

    def replace(self, trajectory: Trajectory, now: float) -> Refused | None:
        """Hand `trajectory` to the controller at sim time `now` (its arrival). Returns None
        when accepted, else why it was rejected (nothing changes then), of the kinds
        joint_names, points, non_finite, times, late and end_velocity."""
        goal = self._parse(trajectory, now)
        if isinstance(goal, Refused):
            return goal
        if self.jtc is None:
            self._queue = [q for q in self._queue if q.start < goal.start] + [goal]
        else:
            self._queue = [goal]  # one real-time buffer: the latest message is taken
        return None

    def command(
        self,
        t: float,
        measured: np.ndarray | None = None,
        measured_velocity: np.ndarray | None = None,
    ) -> np.ndarray:
        """The joint targets at sim time t; call once per control tick, t increasing.
        measured: the joint positions now, from which "jtc" starts a trajectory that takes
        over at this tick (needed then; "jtc_replacement" ignores it); measured_velocity:
        the joint velocities now, for a controller with a velocity state interface (None:
        without one). `last_takeover` tells whether a new trajectory took over at this
        tick."""
        self.last_takeover = None
        goal = self._due(t)
        if goal is not None:
            self._take_over(goal, t, measured, measured_velocity)
        if self._run is not None:
            self._last = self._run.at(t + self._lead)
        self._last_time = t
        return self._last.copy()

    def _due(self, t: float) -> Goal | None:
        """The goal that takes over at t: under "jtc" the latest one received, else the
        latest queued whose start has come."""
        if self.jtc is not None:
            due, self._queue = self._queue, []
        else:
            due = [q for q in self._queue if q.start <= t]
            self._queue = [q for q in self._queue if q.start > t]
        return due[-1] if due else None

    def _take_over(
        self, goal: Goal, t: float, measured: np.ndarray | None, velocity: np.ndarray | None
    ) -> None:
        if self.jtc is None:
            run, first, skipped, counted = self._linear(goal, t)
        else:
            run, first, skipped, counted = self._spline(goal, t, measured, velocity)
        if self._run is not None:
            self.last_takeover = Takeover(t, self._last.copy(), first, skipped)
        self._run = run
        self.violations += counted
        self.late_takeovers += skipped > 0

    def _linear(self, goal: Goal, t: float) -> tuple[Spline, np.ndarray, int, LimitViolations]:
        absolute = goal.start + goal.times
        ahead = int(np.searchsorted(absolute, t, side="left"))  # points at or after t
        skip = min(ahead, len(absolute) - 1)  # all past (a late tick): keep the last point
        times, points = absolute[skip:], goal.positions[skip:]
        anchor_time = goal.start if self._last_time is None else max(goal.start, self._last_time)
        run = Spline(anchor_time, self._last, None, times, points, None, None)  # linear segments
        knot_times, knots = times, points
        if self._last_time is not None and times[0] > self._last_time:
            knot_times = np.concatenate([[self._last_time], times])
            knots = np.vstack([self._last, points])
        return run, points[0].copy(), skip, self._count(points, knot_times, knots)

    def _spline(
        self, goal: Goal, t: float, measured: np.ndarray | None, velocity: np.ndarray | None
    ) -> tuple[Spline, np.ndarray, int, LimitViolations]:
        if self.jtc.interpolate_from_desired_state:
            state, velocity = self.desired(t)
            spline = take_over(goal, t, state, self._last, velocity)
        elif measured is None:
            raise ValueError(
                "controller 'jtc' starts from the measured joints: command(t, measured)"
            )
        else:
            spline = take_over(goal, t, measured, self._last, velocity)
        times, points = spline.times, spline.positions
        skip = min(int(np.searchsorted(times, t, side="left")), len(times) - 1)
        after = int(np.searchsorted(times, t, side="right"))
        knot_times = np.concatenate([[t], times[after:]])
        knots = np.vstack([spline.at(t), points[after:]])
        counted = self._count(points[skip:], knot_times, knots)
        return spline, spline.at(t + self._lead), skip, counted

    def desired(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Where the command is at t and how fast it moves, which a controller with
        `interpolate_from_desired_state` starts a trajectory taken over at t from: the
        running trajectory's value (the last command when none runs, at rest). Upstream
        places the previous update's command (its sample one period ahead) at that update's
        time, 2 ms back at the real controllers' 500 Hz; sampled once a control tick, the
        model takes that period's limit, the command itself at t (oxygen_core.controller.jtc)."""
        if self._run is None:
            return self._last.copy(), np.zeros_like(self._last)
        return self._run.at(t), self._run.velocity(t)

    def _count(
        self, points: np.ndarray, knot_times: np.ndarray, knots: np.ndarray
    ) -> LimitViolations:
        """The limit violations of the points about to run, and of the steps between the
        knots the command passes through (module docstring)."""
        low, high = self._position_limits[:, 0], self._position_limits[:, 1]
        outside = np.any((points < low - _TOLERANCE) | (points > high + _TOLERANCE), axis=1)
        steps, spans = np.diff(knots, axis=0), np.diff(knot_times)
        speeding = np.any(
            np.abs(steps) > (self._velocity_limits + _TOLERANCE) * spans[:, None], axis=1
        )
        position, velocity = int(outside.sum()), int(speeding.sum())
        return LimitViolations(int(position + velocity > 0), position, velocity)

    def _parse(self, traj: Trajectory, now: float) -> Goal | Refused:
        names = tuple(traj.joint_names)
        rejection = self._problem(traj, names, now)
        if rejection is not None:
            return rejection
        order = [self.joint_names.index(n) for n in names]
        named = np.zeros(len(self.joint_names), bool)
        named[order] = True

        def columns(rows: Sequence[Sequence[float]] | None) -> np.ndarray | None:
            if rows is None:
                return None
            out = np.zeros((len(traj.times), len(self.joint_names)))
            out[:, order] = np.asarray(rows, np.float64)
            return out

        times = np.asarray(traj.times, np.float64)
        positions, velocities, accelerations = (columns(getattr(traj, f)) for f, _ in _FIELDS)
        return Goal(float(traj.start), times, positions, velocities, accelerations, named)

    def _problem(self, traj: Trajectory, names: tuple[str, ...], now: float) -> Refused | None:
        """The first rule `traj` breaks: the structural ones, then the controller's."""
        missing = [n for n in self.joint_names if n not in names]
        unknown = [n for n in names if n not in self.joint_names]
        partial = self.jtc is not None and self.jtc.allow_partial_joints_goal
        if len(set(names)) != len(names) or unknown or not names or (missing and not partial):
            return Refused(
                "joint_names",
                f"joint names {list(names)} do not match: missing {missing}, unknown {unknown}",
            )
        shape = _shape_problem(traj, len(names))
        if shape is not None:
            return Refused("points", shape)
        finite = _finite_problem(traj)
        if finite is not None:
            return Refused("non_finite", finite)
        times = np.asarray(traj.times, np.float64)
        if times[0] < 0 or np.any(np.diff(times) <= 0):
            return Refused(
                "times",
                f"time_from_start must start >= 0 and strictly increase: {times.tolist()}",
            )
        return self._end_velocity(traj, names) or self._late(traj, now)

    def _end_velocity(self, traj: Trajectory, names: tuple[str, ...]) -> Refused | None:
        """Under "jtc", a last point still moving (jtc.py), unless its parameter allows it."""
        jtc = self.jtc
        if jtc is None or jtc.allow_nonzero_velocity_at_trajectory_end or traj.velocities is None:
            return None
        last = np.asarray(traj.velocities[-1], np.float64)
        moving = np.flatnonzero(np.abs(last) > END_VELOCITY_EPSILON)
        if not moving.size:
            return None
        j = int(moving[0])
        return Refused(
            "end_velocity", f"the last point's velocity of {names[j]} is {last[j]:g}, not zero"
        )

    def _late(self, traj: Trajectory, now: float) -> Refused | None:
        """A trajectory that ends before it arrives; under "jtc" a zero stamp never does."""
        last = traj.start + float(traj.times[-1])
        if last >= now or (self.jtc is not None and traj.start == 0.0):
            return None
        return Refused(
            "late", f"all points are in the past (the last at {last:.3f} s, now {now:.3f} s)"
        )
