"""ros2_control's joint_trajectory_controller as released for ROS 2 Jazzy and Kilted.

`TrajectoryExecutor(controller="jtc")` runs trajectories by these rules, read from
ros-controls/ros2_controllers, branch jazzy (jtc = joint_trajectory_controller/src/
joint_trajectory_controller.cpp, traj = .../src/trajectory.cpp, yaml = .../src/
joint_trajectory_controller_parameters.yaml, doc = .../doc/trajectory.rst):

- a valid message replaces whatever ran at the controller's first update after it arrives,
  whatever its stamp ("the current implementation just forgets the old trajectory": doc
  112-117); of several that arrive between two updates, only the latest runs (jtc 273-284,
  1385-1399, 1818-1822: one real-time buffer);
- at that update the trajectory starts from the measured joint positions (jtc 286-289,
  296-315: `interpolate_from_desired_state` defaults to false, yaml 86-100), and from the
  measured velocities where the controller reads a velocity state interface
  (`state_interfaces: [position, velocity]`, as arms' configurations list it; jtc 623-628).
  Without one, and for accelerations always, the state's derivatives are zero where the
  points carry them (traj 58-70): the segment from the state then starts at rest;
- with `interpolate_from_desired_state: true` (yaml 86-100: "useful if hardware states are
  not following commands ... necessary if you have a reference trajectory that you send
  over multiple messages") it starts instead from the last command, placed at the last
  update's time: `last_commanded_state_` is the previous update's command, the sample one
  period ahead with its velocities, and `last_commanded_time_` that update's time (jtc
  300-307, 452-453); before any update has commanded, the take-over's own time (302-305)
  and the state read at activation (1208). The model, updated once a control tick where
  the real controllers update every 2 ms, takes that rule's limit: the trajectory starts
  from the running command's value and velocity at the take-over
  (`TrajectoryExecutor.desired`), not from a sample 20 ms stale;
- a zero stamp is the time of that update (traj 125-134); otherwise point k is due at
  stamp + time_from_start[k]. Before point 0 the command moves from the measured state to
  it; once point 0 is due it follows the points, so a trajectory whose first points are
  already past starts mid-segment, a position step (traj 136-206); after the last point
  it holds that point (traj 208-253);
- each update writes the trajectory's value one period ahead, at t + period (jtc 321-329,
  430-433; ros2_controllers PR 1306), so `command(t)` returns the sample at t + period;
- a segment's type follows the fields both its ends carry (traj 279-280): positions only,
  linear (velocity steps at the waypoints, traj 315-333); with velocities, cubic Hermite
  (traj 334-364); with velocities and accelerations, quintic Hermite (traj 365-406);
- refused at arrival (validate_trajectory_msg, jtc 1671-1816): a joint the controller does
  not own (1701-1714); fewer joints than its own unless `allow_partial_joints_goal` (yaml
  75-79; jtc 1674-1685), and then each missing joint is held at its last commanded
  position, with zero velocity and acceleration where the points carry them (jtc
  1522-1601, fill_partial_goal, run at the take-over update: jtc 280); a last point whose
  velocity exceeds float epsilon unless `allow_nonzero_velocity_at_trajectory_end` (yaml
  129-133; jtc 1716-1730); a non-zero stamp whose last point is already past (jtc
  1732-1749); times that do not strictly increase (1751-1765); a field of the wrong size
  (1797-1804).

Stricter than upstream, as the executor always was: duplicate joint names, NaN or inf,
a negative first time_from_start, and accelerations without velocities are refused.
Upstream would command NaN, and for accelerations without velocities it takes no
interpolation branch and commands zero positions (traj 264-268, 315-406). Not modelled:
speed scaling, path and goal tolerances (off by default), cmd_timeout, integration of
velocity-only points, angle wrap-around, effort.

kilted: the same rules. trajectory.cpp is identical, and joint_trajectory_controller.cpp
differs only in parameters and logging (validate_trajectory_msg 1667-1812,
fill_partial_goal 1518-1597, command at t + period 334). Its doc/trajectory.rst 112-121
still says that the old trajectory is just forgotten. master: `allow_trajectory_replacement`
(yaml 80-87, default true, PRs 2401 and 2419) splices the new trajectory into the running
one at its arrival update instead (jtc 281-300, 1706-1896): the old waypoints up to the new
stamp, a bridge sampled from the old trajectory at that stamp, then the new points; a past
stamp is moved to that update. Omitted joints keep following the old trajectory.
`positions_upsampling` (off by default, yaml 131-151) fits C2 velocities to positions-only
points. Neither is modelled here (see `TrajectoryExecutor`'s "jtc_replacement").
"""

from __future__ import annotations

import dataclasses

import numpy as np

# validate_trajectory_msg's bound on the last point's velocity: std::numeric_limits<float>
END_VELOCITY_EPSILON = float(np.finfo(np.float32).eps)


@dataclasses.dataclass(frozen=True)
class JtcParams:
    """The controller's parameters the model uses, with upstream's names and defaults."""

    period: float  # 1 / update_rate, seconds: each update commands the sample this far ahead
    allow_partial_joints_goal: bool = False
    allow_nonzero_velocity_at_trajectory_end: bool = False
    interpolate_from_desired_state: bool = False


@dataclasses.dataclass(frozen=True)
class Goal:
    """An accepted trajectory in the controller's joint order, waiting for its take-over."""

    start: float  # absolute seconds; under "jtc", 0.0 is the zero stamp (the take-over)
    times: np.ndarray  # (K,) time_from_start
    positions: np.ndarray  # (K, D); a column the message did not name is a placeholder
    velocities: np.ndarray | None  # (K, D), 0 for joints not named; None: not carried
    accelerations: np.ndarray | None
    named: np.ndarray  # (D,) bool: the joints the message names


# A segment end: time, position, velocity, acceleration (None: the point does not carry it).
Knot = tuple[float, np.ndarray, np.ndarray | None, np.ndarray | None]


@dataclasses.dataclass(frozen=True)
class Spline:
    """What the controller samples after a take-over: the state before point 0, then the
    points, each segment as the fields they carry allow. "jtc" starts from the measured
    state at the take-over (or its last command, `interpolate_from_desired_state`);
    "jtc_replacement" from its last command, without derivatives (linear segments
    throughout)."""

    before: float  # when the command leaves `state`
    state: np.ndarray  # (D,) positions then
    state_velocity: np.ndarray | None  # (D,) then; None: no velocity interface
    times: np.ndarray  # (K,) absolute
    positions: np.ndarray  # (K, D)
    velocities: np.ndarray | None
    accelerations: np.ndarray | None

    def at(self, t: float) -> np.ndarray:
        """The position at t >= `before` (traj 109-254)."""
        if t >= self.times[-1]:
            return self.positions[-1].copy()
        k = int(np.searchsorted(self.times, t, side="right")) - 1  # -1: before point 0
        return _interpolate(self._knot(k), self._knot(k + 1), t)

    def velocity(self, t: float) -> np.ndarray:
        """The velocity at t >= `before`, as the sample's velocities (traj 109-254): zero
        after the last point, where the command holds it."""
        if t >= self.times[-1]:
            return np.zeros_like(self.positions[-1])
        k = int(np.searchsorted(self.times, t, side="right")) - 1
        return _derivative(self._knot(k), self._knot(k + 1), t)

    def _knot(self, k: int) -> Knot:
        """Point k; k = -1 is the state before, whose derivatives are the measured velocity
        (or zero) and zero acceleration where the points carry them (traj 58-70)."""
        if k < 0:
            zero = np.zeros_like(self.state)
            velocity = zero if self.state_velocity is None else self.state_velocity
            return (
                self.before,
                self.state,
                None if self.velocities is None else velocity,
                None if self.accelerations is None else zero,
            )
        return (
            float(self.times[k]),
            self.positions[k],
            None if self.velocities is None else self.velocities[k],
            None if self.accelerations is None else self.accelerations[k],
        )


def _interpolate(a: Knot, b: Knot, t: float) -> np.ndarray:
    """The segment a -> b at t: linear, cubic or quintic Hermite by the derivatives both ends
    carry (traj 279-406; the same polynomials, written in Hermite basis form)."""
    (t0, p0, v0, a0), (t1, p1, v1, a1) = a, b
    h = t1 - t0
    s = (t - t0) / h
    if v0 is None or v1 is None:
        return p0 + (p1 - p0) * s
    s2, s3 = s * s, s * s * s
    if a0 is None or a1 is None:
        return (
            (1 - 3 * s2 + 2 * s3) * p0
            + (s - 2 * s2 + s3) * h * v0
            + (3 * s2 - 2 * s3) * p1
            + (s3 - s2) * h * v1
        )
    s4, s5 = s3 * s, s3 * s2
    return (
        (1 - 10 * s3 + 15 * s4 - 6 * s5) * p0
        + (s - 6 * s3 + 8 * s4 - 3 * s5) * h * v0
        + (s2 - 3 * s3 + 3 * s4 - s5) * h * h * a0 / 2
        + (10 * s3 - 15 * s4 + 6 * s5) * p1
        + (-4 * s3 + 7 * s4 - 3 * s5) * h * v1
        + (s3 - 2 * s4 + s5) * h * h * a1 / 2
    )


def _derivative(a: Knot, b: Knot, t: float) -> np.ndarray:
    """The velocity of the segment a -> b at t (`_interpolate`'s polynomials differentiated)."""
    (t0, p0, v0, a0), (t1, p1, v1, a1) = a, b
    h = t1 - t0
    s = (t - t0) / h
    if v0 is None or v1 is None:
        return (p1 - p0) / h
    s2 = s * s
    if a0 is None or a1 is None:
        return (
            (6 * s2 - 6 * s) * p0 / h
            + (1 - 4 * s + 3 * s2) * v0
            + (6 * s - 6 * s2) * p1 / h
            + (3 * s2 - 2 * s) * v1
        )
    s3, s4 = s2 * s, s2 * s2
    return (
        (-30 * s2 + 60 * s3 - 30 * s4) * p0 / h
        + (1 - 18 * s2 + 32 * s3 - 15 * s4) * v0
        + (2 * s - 9 * s2 + 12 * s3 - 5 * s4) * h * a0 / 2
        + (30 * s2 - 60 * s3 + 30 * s4) * p1 / h
        + (-12 * s2 + 28 * s3 - 15 * s4) * v1
        + (3 * s2 - 8 * s3 + 5 * s4) * h * a1 / 2
    )


def take_over(
    goal: Goal,
    t: float,
    measured: np.ndarray,
    commanded: np.ndarray,
    measured_velocity: np.ndarray | None = None,
) -> Spline:
    """The goal as the controller runs it from its update at t: joints it does not name at
    `commanded` (fill_partial_goal), a zero stamp at t, the state before point 0 at
    `measured` (`measured_velocity` None: a controller without a velocity state interface;
    with `interpolate_from_desired_state`, the command's own state)."""
    positions = goal.positions.copy()
    positions[:, ~goal.named] = commanded[~goal.named]
    start = t if goal.start == 0.0 else goal.start
    return Spline(
        t,
        np.array(measured, np.float64),
        None if measured_velocity is None else np.array(measured_velocity, np.float64),
        start + goal.times,
        positions,
        goal.velocities,
        goal.accelerations,
    )
