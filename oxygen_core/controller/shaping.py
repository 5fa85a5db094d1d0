"""The trajectory the node sends, shaped for the controller that runs it.

A frame releases rows on the control grid: row i is due at `row0_ns + i * period`. What a
trajectory controller does with them depends on which one it is (`ControllerModel`):

- "jtc", ros2_control's joint_trajectory_controller as released for Jazzy and Kilted
  (`oxygen_core.controller.jtc`): the message replaces the running trajectory at the first
  update after it arrives, from the measured state, and moves from there to point 0 at
  `stamp + time_from_start[0]`; a point already due then is sampled mid-segment, a
  position step. So the rows are shaped:

  - rows due before `arrival_ns + period` are dropped (`arrival_ns`: the latest instant the
    controller can take the message over, the publish time plus `controller_lead_s`). The
    segment from the state at arrival to the first point then lasts at least one control
    period, so a small tracking error is not turned into a large velocity, and no point
    is ever past at arrival;
  - the stamp is the first kept row's time, each point one period after the one before;
  - every point carries a velocity (the mean of the steps either side, limited so that no
    segment overshoots the rows it joins; the last row the velocity of its last step), so
    the controller runs cubic segments, without the velocity steps of linear ones;
  - Jazzy and Kilted refuse a trajectory whose last point moves
    (`allow_nonzero_velocity_at_trajectory_end` is false by default), so the rows end in
    a stopping tail (`stopping_tail`): the last velocity brought to zero at no more than
    the joints' acceleration limits (sooner where the position range is nearer), on the
    control grid, ending at rest. A robot whose
    chunks stop coming then stops within its limits, not in one update.

- "jtc_replacement" (master's `allow_trajectory_replacement`) and "none" (a topic the
  user's own code reads): the rows as released, positions only, stamped with row 0's time.

A hold is a stop, not a step (`stop`): the same stopping tail, stamped zero (on arrival),
from where the robot will be when the controller takes it over, the measured positions
moved on at the measured velocities for as long as the measurement is old by then. It
lasts at least HOLD_MIN_PERIODS periods, and its first point is that many periods after
the take-over (or its last, if a position bound shortens it): the controller's cubic
segment from the state it measures then to that point is the tail's parabola when the
estimate is right (a cubic through two points of a parabola is the parabola), and spreads
what it is off over those periods when it is not: the state the controller reads is not
quite the estimate (the arm's tracking, the take-over's exact instant), and a segment of
duration T turns a start off by e into 6 e / T^2 more acceleration: over one 20 ms period
1.3 mrad is 20 rad/s^2, over three 12 mrad. A point at the measured positions due at
once would be a step back by the distance travelled since the measurement (Jazzy samples
a point already due mid-segment): at 1 rad/s and 30 ms, 30 mrad, 75 rad/s^2 in one 20 ms
update. Without measured velocities it is the one point at the measured positions: the
controller stops in one update.

`segment_peaks` gives the exact largest velocity and acceleration of each cubic segment
the controller runs, for the gate and for screening the segment from the state at arrival
to the first point (`for_release`), and `segment_range` its lowest and highest position:
a start moving fast towards a row at a range bound overshoots it on the cubic, which no
bound on the rows shows. That state is uncertain: where the running chunk has
the robot then (`planned_state`), where it was last measured if it lags its plan (a
rate-limited or pressed arm), or where the controller's command has it while it still runs
the first segment of the trajectory before (`expected.ExpectedCommand`); the segment must
be within the limits from each.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.engine.timeline import Release, RunningChunk
from oxygen_core.safety.limits import JointLimits

ControllerModel = Literal["jtc", "jtc_replacement", "none"]
CONTROLLER_MODELS: tuple[ControllerModel, ...] = typing.get_args(ControllerModel)
Segments = Literal["linear", "cubic"]  # how the controller moves between two points
Start = tuple[int, np.ndarray, np.ndarray]  # a take-over instant (ns), position, velocity


@dataclasses.dataclass(frozen=True)
class Shaped:
    """One trajectory for the controller: points at `stamp_ns + times`."""

    stamp_ns: int  # 0: the controller's update at arrival
    times: np.ndarray  # (K,) seconds from the stamp, increasing
    positions: np.ndarray  # (K, D) float64
    velocities: np.ndarray | None  # (K, D); None: positions only (linear segments)
    dropped: int = 0  # released rows due before the controller could take the message over
    tail: int = 0  # points after the released rows: the stop that ends the trajectory


def setpoints(limits: JointLimits) -> np.ndarray:
    """The joints that are setpoints: no velocity bound (a gripper, its rate bounds switched
    off), moved to a value by their own servo rather than along a path."""
    return ~np.isfinite(limits.velocity)


def segments(model: ControllerModel) -> Segments:
    """How `model` moves between the points the node sends it: "jtc" gets velocities."""
    return "cubic" if model == "jtc" else "linear"


def for_controller(
    model: ControllerModel,
    rows: np.ndarray,
    row0_ns: int,
    period_s: float,
    *,
    arrival_ns: int,
    limits: JointLimits | None,
    before: np.ndarray | None = None,
) -> Shaped | None:
    """The released `rows` [H, D] (row i due at row0_ns + i periods) as `model` should get
    them (module docstring). arrival_ns: the latest instant the controller takes the
    message over. limits: the joints' (the stop's deceleration and range; None: stop
    within one period). before [D]: the row due one period before rows[0] (the running
    chunk's), for row 0's velocity. None under "jtc" when no row is due late enough."""
    rows = np.asarray(rows, np.float64)
    times = np.arange(len(rows)) * period_s
    if model != "jtc":
        return Shaped(row0_ns, times, rows, None)
    period_ns = round(period_s * NS_PER_S)
    due = row0_ns + np.arange(len(rows), dtype=np.int64) * period_ns
    first = int(np.searchsorted(due, arrival_ns + period_ns, side="left"))
    if first >= len(rows):
        return None
    velocities = grid_velocities(rows, period_s, before)
    if limits is not None:  # a setpoint reaches each row at rest
        velocities[:, setpoints(limits)] = 0.0
        velocities[-1] = _within_reach(rows[-1], velocities[-1], limits, period_s)
    tail, tail_velocities = stopping_tail(rows[-1], velocities[-1], limits, period_s)
    positions = np.vstack([rows[first:], tail])
    kept_times = np.arange(len(positions)) * period_s
    return Shaped(
        int(due[first]),
        kept_times,
        positions,
        np.vstack([velocities[first:], tail_velocities]),
        dropped=first,
        tail=len(tail),
    )


# The shortest hold, in control periods (module docstring).
HOLD_MIN_PERIODS = 3

# Arrival instants screened between the earliest and the latest, at most this far apart:
# the first segment's peaks are not monotone in its duration (a start velocity away from
# the first point is countered less over a longer segment), so both ends do not suffice.
ARRIVAL_STEP_NS = 5_000_000


def for_release(
    model: ControllerModel,
    release: Release,
    running: RunningChunk | None,
    period_s: float,
    *,
    arrival_ns: int,
    measured: tuple[np.ndarray, np.ndarray],
    limits: JointLimits | None,
    earliest_ns: int | None = None,
    commanded: Callable[[int], list[tuple[np.ndarray, np.ndarray]]] | None = None,
    from_desired: bool = False,
) -> Shaped | str:
    """What the controller gets of a frame's `release` (the node's frame and the in-process
    loop both send this): `met`'s trajectory, screened from every state the robot may be
    in at each instant it may take the trajectory over, from `earliest_ns` (None: only
    `arrival_ns`) to `arrival_ns` (the latest): where the `running` chunk has it then, the
    `measured` (position, velocity), and where the controller's command has it then
    (`commanded(at_ns)`: `expected.ExpectedCommand.states`; None: not modelled).
    from_desired: the controller starts from its command (`interpolate_from_desired_state`),
    so the measured state is a start only when the node knows no command then."""
    starts: list[Start] = []
    for at_ns in arrivals(arrival_ns if earliest_ns is None else earliest_ns, arrival_ns):
        planned = planned_state(running, at_ns, period_s)
        states = [] if planned is None else [planned]
        states += [] if commanded is None else commanded(at_ns)
        if not from_desired or not states:
            states.append(measured)
        starts += [(at_ns, *state) for state in states]
    return met(
        model,
        release.rows,
        release.row0_ns,
        period_s,
        arrival_ns=arrival_ns,
        before=None if release.lead is None else release.lead[-1],
        starts=starts,
        limits=limits,
    )


def arrivals(earliest_ns: int, latest_ns: int) -> np.ndarray:
    """The take-over instants screened: both ends and evenly between them, at most
    ARRIVAL_STEP_NS apart."""
    count = max(1, -(-(latest_ns - earliest_ns) // ARRIVAL_STEP_NS)) + 1
    return np.unique(np.linspace(earliest_ns, latest_ns, count).round().astype(np.int64))


def met(
    model: ControllerModel,
    rows: np.ndarray,
    row0_ns: int,
    period_s: float,
    *,
    arrival_ns: int,
    before: np.ndarray | None,
    starts: Sequence[Start],
    limits: JointLimits | None,
) -> Shaped | str:
    """`for_controller`'s trajectory, screened under "jtc" as the controller will run it:
    every cubic segment between its points, then from each of `starts` (a take-over instant,
    and the position and velocity the robot may have then) to the first point over the time
    it has from then (its due time less the instant), against the velocity and acceleration
    `limits` (None: unscreened). A segment between points that is too fast fails the whole
    trajectory; when a segment from a start is, the first point moves to the first later
    row every start reaches within the limits. The trajectory, or why none may go out (one
    line)."""
    shaped = for_controller(
        model, rows, row0_ns, period_s, arrival_ns=arrival_ns, limits=limits, before=before
    )
    if shaped is None:
        return "no row is due late enough for the controller to take the trajectory over"
    if model != "jtc" or limits is None:
        return shaped
    p, v = shaped.positions, shaped.velocities
    between = _over(*segment_peaks(p[:-1], v[:-1], p[1:], v[1:], period_s), limits)
    if np.any(between > 1):
        point = int(np.argmax(np.max(between, axis=1))) + 1
        return (
            f"the controller's cubic segment into point {point} would pass the joint limits "
            f"{np.max(between[point - 1]):.2f}x"
        )
    rows_kept = len(p) - shaped.tail
    reached = np.ones(rows_kept, bool)
    for at_ns, start, velocity in starts:
        lead_s = (shaped.stamp_ns - at_ns) / NS_PER_S + np.arange(rows_kept) * period_s
        ends = (start, velocity, p[:rows_kept], v[:rows_kept], lead_s)
        peaks = segment_peaks(*ends)
        reached &= np.all(_over(*peaks, limits) <= 1, axis=1) & _in_range(*ends, limits)
    if not reached.any():
        return "every row is too far from the state at arrival to reach within the joint limits"
    return _from_point(shaped, int(np.argmax(reached)), period_s)


def _in_range(
    start: np.ndarray,
    velocity: np.ndarray,
    rows: np.ndarray,
    row_velocities: np.ndarray,
    duration_s: np.ndarray,
    limits: JointLimits,
) -> np.ndarray:
    """[N] whether the segment from (start, velocity) to each row stays in the position
    range: a start moving fast towards a row at a bound overshoots it on a cubic. Past
    where a start already lies outside the range (a squeezed gripper, a measured joint)
    it may not go further. A setpoint joint is not screened: its servo moves it to each
    value at its own rate, whatever the command's path between them."""
    lowest, highest = segment_range(start, velocity, rows, row_velocities, duration_s)
    low, high = np.minimum(limits.lower, start), np.maximum(limits.upper, start)
    inside = (lowest >= low) & (highest <= high)
    return np.all(inside | setpoints(limits), axis=1)


def _over(velocity: np.ndarray, acceleration: np.ndarray, limits: JointLimits) -> np.ndarray:
    """Peaks against the limits, the worse of the two (> 1: over)."""
    return np.maximum(velocity / limits.velocity, acceleration / limits.acceleration)


def _from_point(shaped: Shaped, first: int, period_s: float) -> Shaped:
    """`shaped` from its point `first` on: stamped that point's time."""
    if first == 0:
        return shaped
    positions = shaped.positions[first:]
    return dataclasses.replace(
        shaped,
        stamp_ns=shaped.stamp_ns + first * round(period_s * NS_PER_S),
        times=np.arange(len(positions)) * period_s,
        positions=positions,
        velocities=shaped.velocities[first:],
        dropped=shaped.dropped + first,
    )


def planned_state(
    running: RunningChunk | None, at_ns: int, period_s: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Where the running chunk has the robot at `at_ns`, and how fast (linear between its
    rows): the state a trajectory arriving then starts from, as the robot follows its
    plan. None when nothing runs or the chunk does not reach that time; the measured state
    is the estimate then."""
    if running is None or len(running.rows) < 2:
        return None
    x = (at_ns - running.row0_ns) / (period_s * NS_PER_S)
    if not 0 <= x <= len(running.rows) - 1:
        return None
    rows = np.asarray(running.rows, np.float64)
    i = min(int(x), len(rows) - 2)
    step = rows[i + 1] - rows[i]
    return rows[i] + (x - i) * step, step / period_s


def grid_velocities(rows: np.ndarray, period_s: float, before: np.ndarray | None) -> np.ndarray:
    """Each row's velocity on the control grid, limited so that the cubic through the rows
    never leaves the range of the two rows it joins (Fritsch and Carlson's monotone
    rule): the mean of the steps either side, zero where they differ in sign or one is
    flat (a turn, a gripper's switch), at most three times the smaller. Row 0 continues
    from `before` when given (else its forward step), the last row its last step. Without
    the limit a gripper switching from 0 to 1 was commanded past 1."""
    path = rows if before is None else np.vstack([before, rows])
    if len(path) < 2:
        return np.zeros_like(rows)
    steps = np.diff(path, axis=0) / period_s
    left, right = steps[:-1], steps[1:]
    mean = (left + right) / 2
    bound = 3 * np.minimum(np.abs(left), np.abs(right))
    inner = np.where(left * right > 0, np.clip(mean, -bound, bound), 0.0)
    velocities = np.vstack([steps[:1], inner, steps[-1:]])
    return velocities[len(path) - len(rows) :]


def stopping_tail(
    position: np.ndarray,
    velocity: np.ndarray,
    limits: JointLimits | None,
    period_s: float,
    min_periods: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Points [n, D] and their velocities after (position, velocity), one period apart, that
    bring every joint to rest together with one constant deceleration each, in whole
    periods (at least `min_periods`): no joint faster than its acceleration limit, unless
    stopping so would carry it past its position range, which comes first (the stop is
    shortened until it ends inside). A cubic segment between points of a parabola is that
    parabola, so the controller decelerates exactly so. limits None: `min_periods`."""
    velocity = np.asarray(velocity, np.float64)
    duration = min_periods * period_s
    if limits is not None:
        speed = np.abs(velocity)
        duration = max(np.max(speed / limits.acceleration, initial=0.0), duration)
        room = np.where(velocity > 0, limits.upper - position, position - limits.lower)
        with np.errstate(divide="ignore", invalid="ignore"):
            reach = np.where(speed > 0, 2 * np.maximum(room, 0.0) / speed, np.inf)
        duration = min(duration, float(np.min(reach)))
    n = max(1, int(np.ceil(duration / period_s - 1e-9)))
    if limits is not None and n > 1 and n * period_s > float(np.min(reach)) + 1e-12:
        n -= 1  # rounding up to whole periods must not carry a joint past its range
    total = n * period_s
    t = np.arange(1, n + 1)[:, None] * period_s
    positions = position + velocity * (t - t * t / (2 * total))
    velocities = velocity * (1 - t / total)
    velocities[-1] = 0.0  # exactly: Jazzy refuses a last point faster than float epsilon
    if limits is not None:  # one period is too long a stop only for a joint at its bound
        positions = np.clip(positions, limits.lower, limits.upper)
    return positions, velocities


def _within_reach(
    position: np.ndarray, velocity: np.ndarray, limits: JointLimits, period_s: float
) -> np.ndarray:
    """`velocity` no faster than a one-period stop from `position` can end inside the
    position range (2 x room / period): the last row's, so that the stop after it never
    passes a bound, even between its points."""
    room = np.where(velocity > 0, limits.upper - position, position - limits.lower)
    cap = 2 * np.maximum(room, 0.0) / period_s
    return np.clip(velocity, -cap, cap)


def stop(
    position: np.ndarray,
    velocity: np.ndarray | None,
    limits: JointLimits | None,
    period_s: float,
    ahead_s: float = 0.0,
) -> Shaped:
    """The hold, stamped zero (on arrival): the stopping tail from `position` moved on at
    the measured `velocity` for `ahead_s` (the measurement's age when the controller takes
    the hold over), its points one period apart from HOLD_MIN_PERIODS periods after the
    take-over (module docstring).
    Without a velocity (or one not finite, or zero): the one point at `position`, due at
    once."""
    position = np.asarray(position, np.float64)
    if velocity is None or not np.all(np.isfinite(velocity)) or not np.any(velocity):
        return Shaped(0, np.zeros(1), position[None], None)
    velocity = np.asarray(velocity, np.float64)
    start = position + velocity * ahead_s
    if limits is not None:
        start = np.clip(start, limits.lower, limits.upper)
    tail, tail_velocities = stopping_tail(start, velocity, limits, period_s, HOLD_MIN_PERIODS)
    first = min(HOLD_MIN_PERIODS, len(tail)) - 1  # the points the first segment spans
    times = np.arange(first + 1, len(tail) + 1) * period_s
    return Shaped(0, times, tail[first:], tail_velocities[first:], tail=len(tail) - first)


def segment_peaks(
    p0: np.ndarray,
    v0: np.ndarray,
    p1: np.ndarray,
    v1: np.ndarray,
    duration_s: float | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The largest |velocity| and |acceleration| of each cubic Hermite segment from (p0, v0)
    to (p1, v1) over `duration_s` (one for all, or one per segment: [N] with [N, D] ends):
    the acceleration is linear in time (largest at an end), the velocity quadratic
    (largest at an end or at its vertex)."""
    h = np.asarray(duration_s, np.float64)
    h = h[:, None] if h.ndim else h
    step = np.asarray(p1, np.float64) - p0
    b = (2 / h) * (3 * step - 2 * h * v0 - h * v1)  # dv/ds at s = 0
    c = (3 / h) * (-2 * step + h * v0 + h * v1)  # half of d2v/ds2
    acceleration = np.maximum(np.abs(b), np.abs(b + 2 * c)) / h
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(c != 0, -b / (2 * c), 0.0)
    inside = (vertex > 0) & (vertex < 1)
    at_vertex = np.where(inside, np.abs(v0 + b * vertex + c * vertex * vertex), 0.0)
    velocity = np.maximum(np.maximum(np.abs(v0), np.abs(v1)), at_vertex)
    return velocity, acceleration


def segment_range(
    p0: np.ndarray,
    v0: np.ndarray,
    p1: np.ndarray,
    v1: np.ndarray,
    duration_s: float | np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest position of each cubic Hermite segment from (p0, v0) to
    (p1, v1) over `duration_s` (shaped as `segment_peaks`): at an end or where the velocity,
    a quadratic in time (linear when the cubic term vanishes), is zero inside. Every
    candidate is a point of the segment, so one that is not an extreme changes nothing."""
    h = np.asarray(duration_s, np.float64)
    h = h[:, None] if h.ndim else h
    p0, p1 = np.asarray(p0, np.float64), np.asarray(p1, np.float64)
    step = p1 - p0
    b = 3 * step - 2 * h * v0 - h * v1  # p(s) = p0 + h v0 s + b s^2 + c s^3, s in [0, 1]
    c = -2 * step + h * v0 + h * v1
    lowest, highest = np.minimum(p0, p1), np.maximum(p0, p1)
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.sqrt(np.maximum(b * b - 3 * c * h * v0, 0.0))
        for s in ((-b + root) / (3 * c), (-b - root) / (3 * c), -h * v0 / (2 * b)):
            s = np.where(np.isfinite(s) & (s > 0) & (s < 1), s, 0.0)
            at = p0 + h * v0 * s + b * s * s + c * s * s * s
            lowest, highest = np.minimum(lowest, at), np.maximum(highest, at)
    return lowest, highest
