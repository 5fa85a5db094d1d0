"""The trajectory shaped for each controller model: exact numbers on hand-made rows, and the
"jtc" model (the Jazzy controller) running the shaped stream without a position step."""

import numpy as np
import pytest

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller import shaping
from oxygen_core.controller.jtc import JtcParams
from oxygen_core.engine.timeline import Release, RunningChunk
from oxygen_core.safety.limits import JointLimits
from oxygen_core.sim.executor import Trajectory, TrajectoryExecutor

PERIOD = 0.1
MS = 1_000_000


def _limits(
    acceleration: float,
    velocity: float = 100.0,
    joints: int = 2,
    lower: float = -np.inf,
    upper: float = np.inf,
) -> JointLimits:
    """Every joint bounded alike (a velocity bound off would make a setpoint joint); the
    jump bound is the gate's, not shaping's."""

    def same(value: float) -> np.ndarray:
        return np.full(joints, value)

    return JointLimits(
        tuple("ab"[:joints]),
        same(lower),
        same(upper),
        same(velocity),
        same(acceleration),
        same(np.inf),
        "test",
    )


def _ramp(n: int, speed: float = 1.0) -> np.ndarray:
    """Two joints: a at `speed` rad/s, b at -2 x it."""
    t = np.arange(n) * PERIOD
    return np.stack([speed * t, -2 * speed * t], axis=1)


@pytest.mark.parametrize("model", ["none", "jtc_replacement"])
def test_other_models_get_the_rows_as_released(model):
    rows = _ramp(4)
    shaped = shaping.for_controller(
        model, rows, 5 * NS_PER_S, PERIOD, arrival_ns=6 * NS_PER_S, limits=None
    )
    assert shaped.stamp_ns == 5 * NS_PER_S and shaped.velocities is None
    np.testing.assert_array_equal(shaped.positions, rows)
    np.testing.assert_allclose(shaped.times, [0.0, 0.1, 0.2, 0.3])


def test_jtc_drops_rows_due_within_a_period_of_arrival_and_stamps_the_first_kept():
    rows = _ramp(6)
    # Rows due at 0, 100, 200 ... ms; the latest arrival 130 ms: rows before 230 ms dropped.
    shaped = shaping.for_controller(
        "jtc", rows, 0, PERIOD, arrival_ns=130 * MS, limits=_limits(100.0)
    )
    assert shaped.dropped == 3 and shaped.stamp_ns == 300 * MS
    np.testing.assert_allclose(shaped.positions[:3], rows[3:])
    np.testing.assert_allclose(shaped.times[:3], [0.0, 0.1, 0.2])
    # A row due exactly one period after the arrival is kept.
    exact = shaping.for_controller("jtc", rows, 0, PERIOD, arrival_ns=200 * MS, limits=None)
    assert exact.dropped == 3


def test_jtc_velocities_are_central_differences_and_the_last_row_its_last_step():
    rows = np.array([[0.0], [0.1], [0.3], [0.6]])
    before = np.array([-0.1])
    velocities = shaping.grid_velocities(rows, PERIOD, before)
    np.testing.assert_allclose(velocities[:, 0], [1.0, 1.5, 2.5, 3.0])
    np.testing.assert_allclose(shaping.grid_velocities(rows, PERIOD, None)[:, 0], [1, 1.5, 2.5, 3])
    np.testing.assert_array_equal(shaping.grid_velocities(rows[:1], PERIOD, None), [[0.0]])


def test_the_stopping_tail_decelerates_at_the_limit_in_whole_periods_to_rest():
    # 1 rad/s at 4 rad/s^2 stops in 0.25 s: three periods (0.3 s) at 1/0.3 rad/s^2.
    positions, velocities = shaping.stopping_tail(
        np.array([0.0]), np.array([1.0]), _limits(4.0, joints=1), PERIOD
    )
    np.testing.assert_allclose(positions[:, 0], [0.1 - 0.01 / 0.6, 0.2 - 0.04 / 0.6, 0.15])
    np.testing.assert_allclose(velocities[:, 0], [2 / 3, 1 / 3, 0.0])
    assert velocities[-1, 0] == 0.0
    # No limits: one period.
    positions, velocities = shaping.stopping_tail(np.zeros(1), np.ones(1), None, PERIOD)
    np.testing.assert_allclose(positions[:, 0], [0.05])
    assert velocities[-1, 0] == 0.0


def test_a_jtc_trajectory_ends_at_rest_after_the_released_rows():
    rows = _ramp(3)
    shaped = shaping.for_controller(
        "jtc", rows, NS_PER_S, PERIOD, arrival_ns=0, limits=_limits(5.0)
    )
    # Joint b at 2 rad/s stops in 0.4 s at 5 rad/s^2: a tail of four points.
    assert shaped.dropped == 0 and shaped.tail == 4 and len(shaped.positions) == 7
    np.testing.assert_array_equal(shaped.velocities[-1], [0.0, 0.0])
    np.testing.assert_allclose(shaped.velocities[:3], [[1, -2]] * 3)


def test_jtc_with_no_row_late_enough_sends_nothing():
    shaped = shaping.for_controller("jtc", _ramp(3), 0, PERIOD, arrival_ns=150 * MS, limits=None)
    assert shaped is None


def test_the_hold_is_a_stop_from_the_measured_velocity_or_one_point_without_one():
    one = shaping.stop(np.array([0.5, 1.0]), None, _limits(4.0), PERIOD)
    assert one.stamp_ns == 0 and one.velocities is None
    np.testing.assert_array_equal(one.positions, [[0.5, 1.0]])
    still = shaping.stop(np.array([0.5, 1.0]), np.zeros(2), _limits(4.0), PERIOD)
    assert len(still.positions) == 1
    # 1 rad/s at 4 rad/s^2: a stop of three periods, its first point the third (0.3 s).
    moving = shaping.stop(np.array([0.0, 0.0]), np.array([1.0, 0.0]), _limits(4.0), PERIOD)
    assert moving.stamp_ns == 0 and moving.tail == 1
    np.testing.assert_allclose(moving.times, [0.3])
    np.testing.assert_allclose(moving.positions[:, 0], [0.15])
    np.testing.assert_allclose(moving.velocities[:, 0], [0.0])
    # 1 rad/s at 2 rad/s^2: five periods, its points from the third on.
    longer = shaping.stop(np.zeros(2), np.array([1.0, 0.0]), _limits(2.0), PERIOD)
    np.testing.assert_allclose(longer.times, [0.3, 0.4, 0.5])
    np.testing.assert_allclose(longer.positions[:, 0], [0.3 - 0.09, 0.4 - 0.16, 0.25])
    # Measured 0.05 s before the take-over: the same stop from where the joint is by then.
    ahead = shaping.stop(np.zeros(2), np.array([1.0, 0.0]), _limits(4.0), PERIOD, ahead_s=0.05)
    np.testing.assert_allclose(ahead.positions[:, 0], moving.positions[:, 0] + 0.05)


def test_a_slow_hold_spans_three_periods_so_a_start_off_the_estimate_stays_within_limits():
    """At 50 Hz, 0.2 rad/s under 20 rad/s^2 stops in 10 ms; the hold still lasts
    HOLD_MIN_PERIODS periods, its first point the last. From the estimate its segment is
    the stop's parabola (0.2 rad/s to rest over 60 ms: 3.3 rad/s^2); from a state 5 mrad
    off it stays within 20 rad/s^2, where a first point one period out (the stop without a
    minimum) would pass 70."""
    period, limits, velocity = 0.02, _limits(20.0, joints=1), np.array([0.2])
    hold = shaping.stop(np.zeros(1), velocity, limits, period)
    np.testing.assert_allclose(hold.times, [shaping.HOLD_MIN_PERIODS * period])
    np.testing.assert_allclose(hold.velocities, [[0.0]])
    for start, bound in ((0.0, 0.2 / 0.06 + 1e-9), (0.005, 20.0)):
        _, acceleration = shaping.segment_peaks(
            np.array([start]), velocity, hold.positions[0], hold.velocities[0], hold.times[0]
        )
        assert acceleration[0] <= bound
    tail, tail_velocities = shaping.stopping_tail(np.zeros(1), velocity, limits, period)
    _, one_period = shaping.segment_peaks(
        np.array([0.005]), velocity, tail[0], tail_velocities[0], period
    )
    assert one_period[0] > 70.0


def test_a_hold_taken_over_after_the_robot_moved_on_stays_within_the_acceleration_limit():
    """The controller starts the hold from the state it measures at the take-over, 30 ms
    after the joint state the hold was built from: 1 rad/s, 0.03 rad further on. Its first
    segment is the stop's own deceleration (4 rad/s^2); a hold built as if the joint were
    still where it was measured would pull it back (5.3 rad/s^2, over the limit)."""
    limits, velocity = _limits(4.0, joints=1), np.array([1.0])
    at_takeover = np.array([0.03])
    for ahead_s, bound in ((0.03, 4.0 + 1e-9), (0.0, None)):
        hold = shaping.stop(np.zeros(1), velocity, limits, PERIOD, ahead_s=ahead_s)
        _, acceleration = shaping.segment_peaks(
            at_takeover, velocity, hold.positions[0], hold.velocities[0], hold.times[0]
        )
        if bound is not None:
            assert acceleration[0] <= bound
        else:
            assert acceleration[0] > 5.0


def test_segment_peaks_are_exact():
    # Rest to rest over 1 s by 1 rad: velocity 1.5 at the middle, acceleration 6 at the ends.
    velocity, acceleration = shaping.segment_peaks(
        np.zeros(1), np.zeros(1), np.ones(1), np.zeros(1), 1.0
    )
    np.testing.assert_allclose([velocity[0], acceleration[0]], [1.5, 6.0])
    # A parabola (0, 1) -> (0.5, 0) over 1 s: constant deceleration 1, top speed at the start.
    velocity, acceleration = shaping.segment_peaks(
        np.zeros(1), np.ones(1), np.array([0.5]), np.zeros(1), 1.0
    )
    np.testing.assert_allclose([velocity[0], acceleration[0]], [1.0, 1.0])


def _run(shape: bool, delay_ms: int) -> np.ndarray:
    """Chunks of a 1 rad/s ramp published every 2 periods, each 10 mrad off the one
    before (as a policy's chunks disagree), each arriving `delay_ms` after its publish, run
    by the "jtc" model (500 Hz) whose arm follows its command exactly: the commands, one
    per update."""
    update = 0.002
    ex = TrajectoryExecutor(np.zeros(2), ("a", "b"), controller="jtc", jtc=JtcParams(update))
    arrivals = {}
    for frame in range(10):
        publish_ns = frame * 200 * MS
        row0_ns = publish_ns + 100 * MS  # d = 1 period after the tick
        offset = 0.005 * (-1) ** frame
        rows = _ramp(10) + row0_ns / NS_PER_S * np.array([1.0, -2.0]) + offset
        model = "jtc" if shape else "jtc_replacement"
        lead_ns = delay_ms * MS + round(update * NS_PER_S)
        shaped = shaping.for_controller(
            model,
            rows,
            row0_ns,
            PERIOD,
            arrival_ns=publish_ns + lead_ns,
            limits=_limits(10.0),
        )
        velocities = None if shaped.velocities is None else shaped.velocities.tolist()
        traj = Trajectory(
            ("a", "b"),
            shaped.stamp_ns / NS_PER_S,
            shaped.times.tolist(),
            shaped.positions.tolist(),
            velocities,
        )
        arrivals[round((publish_ns + delay_ms * MS) / (update * NS_PER_S))] = traj
    commands, position, velocity = [], np.zeros(2), np.zeros(2)
    for tick in range(1000):
        t = tick * update
        if tick in arrivals:
            assert ex.replace(arrivals[tick], now=t) is None
        command = ex.command(t, position, velocity)
        velocity, position = (command - position) / update, command
        commands.append(command)
    return np.array(commands)


@pytest.mark.parametrize("delay_ms", [30, 150])  # before the first row's stamp, and after it
def test_the_jtc_model_runs_the_shaped_stream_without_a_step(delay_ms):
    # From 0.5 s (the arm at rest before the first chunk has caught up by then), through
    # three arrivals or more, to the end of the last chunk's rows.
    steps = np.abs(np.diff(_run(True, delay_ms), axis=0))[250:900]
    # 1 and 2 rad/s: 2 ms steps of 2 and 4 mrad, and the 10 mrad between chunks taken up
    # over a period or more (a step would put 10 mrad in one update).
    assert steps[:, 0].max() < 1.5 * 0.002 and steps[:, 1].max() < 1.5 * 0.004


def test_unshaped_rows_arriving_after_their_stamp_step_under_jtc():
    steps = np.abs(np.diff(_run(False, 150), axis=0))[250:900]
    assert steps[:, 0].max() > 0.002 + 0.009


def test_met_refuses_a_trajectory_whose_cubic_segments_break_the_limits():
    # Still, then 0.5, then 1.5 rad/s: on the grid 5 and 10 rad/s^2. The cubic through the
    # central-difference velocities (0, 0.25, 1, 1.5) peaks at 10, 15 and 20 rad/s^2 into
    # points 1, 2, 3 (and the stop after it at 15).
    rows = np.array([[0.0], [0.0], [0.05], [0.2]])
    common = dict(arrival_ns=-200 * MS, before=None, starts=[(-200 * MS, np.zeros(1), np.zeros(1))])
    within = shaping.met(
        "jtc", rows, 0, PERIOD, limits=_limits(25.0, velocity=2.0, joints=1), **common
    )
    assert isinstance(within, shaping.Shaped) and within.dropped == 0
    refused = shaping.met(
        "jtc", rows, 0, PERIOD, limits=_limits(16.0, velocity=2.0, joints=1), **common
    )
    assert (
        refused == "the controller's cubic segment into point 3 would pass the joint limits 1.25x"
    )
    unscreened = shaping.met("jtc", rows, 0, PERIOD, limits=None, **common)
    assert isinstance(unscreened, shaping.Shaped)


def test_a_stop_near_the_position_range_ends_inside_it():
    # 1 rad/s at 4 rad/s^2 would take 0.25 s and 0.125 rad; with 0.1 rad to the upper bound
    # the stop lasts at most 0.2 s (2 x room / speed): two periods, 0.1 rad, at 5 rad/s^2.
    limits = _limits(4.0, joints=1, lower=-1.0, upper=0.1)
    positions, velocities = shaping.stopping_tail(np.zeros(1), np.ones(1), limits, PERIOD)
    np.testing.assert_allclose(positions[:, 0], [0.075, 0.1])
    np.testing.assert_allclose(velocities[:, 0], [0.5, 0.0])
    # At the bound already: one period, held at the bound.
    at_bound = _limits(4.0, joints=1, lower=-1.0, upper=0.0)
    positions, _ = shaping.stopping_tail(np.zeros(1), np.ones(1), at_bound, PERIOD)
    np.testing.assert_allclose(positions[:, 0], [0.0])


def test_the_state_at_arrival_is_where_the_running_chunk_has_the_robot():
    running = RunningChunk(np.array([[0.0, 0.0], [0.1, -0.2], [0.3, -0.6]], np.float32), 0, 0)
    position, velocity = shaping.planned_state(running, 150 * MS, PERIOD)
    np.testing.assert_allclose(position, [0.2, -0.4], atol=1e-7)
    np.testing.assert_allclose(velocity, [2.0, -4.0], atol=1e-6)
    assert shaping.planned_state(running, 250 * MS, PERIOD) is None  # past its last row
    assert shaping.planned_state(running, -1, PERIOD) is None
    assert shaping.planned_state(None, 0, PERIOD) is None


def test_velocities_never_carry_a_segment_past_the_rows_it_joins():
    # A turn (0.1 then 0.05) and a switch (0 to 1 and back): zero at each, no overshoot.
    rows = np.array([[0.0], [0.1], [0.05], [0.05], [1.0], [1.0]])
    np.testing.assert_allclose(
        shaping.grid_velocities(rows, PERIOD, None)[:, 0], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    )
    # Steps of 0.1 and 1: the mean (5.5) capped at three times the smaller (3).
    steep = np.array([[0.0], [0.01], [0.11]])
    np.testing.assert_allclose(shaping.grid_velocities(steep, PERIOD, None)[:, 0], [0.1, 0.3, 1.0])


def test_a_setpoint_joint_reaches_each_row_at_rest_and_the_last_row_stops_within_range():
    # Joint b (a gripper: no velocity bound) switches 0 -> 1: every point at rest. Joint a
    # ends 0.01 below its upper bound at 1 rad/s: its last velocity is capped at 0.2 rad/s
    # (a one-period stop then ends at the bound).
    limits = JointLimits(
        ("a", "b"), np.array([-1.0, 0.0]), np.array([0.31, 1.0]), np.array([5.0, np.inf]),
        np.array([100.0, 100.0]), np.full(2, np.inf), "test",
    )  # fmt: skip
    rows = np.array([[0.1, 0.0], [0.2, 1.0], [0.3, 1.0]])
    shaped = shaping.for_controller("jtc", rows, 0, PERIOD, arrival_ns=-200 * MS, limits=limits)
    np.testing.assert_array_equal(shaped.velocities[:, 1], np.zeros(len(shaped.positions)))
    assert shaped.velocities[2, 0] == pytest.approx(0.2)
    assert np.all(shaped.positions[:, 0] <= 0.31)


def test_the_first_segment_is_screened_from_every_instant_the_controller_may_take_it_over():
    # Still rows stepping -0.1 a period from -0.025; the arm at 0 moving at -1 rad/s. The
    # message goes out at -80 ms and reaches the controller by -20 ms at the latest, so row
    # 0 (due at 0) is dropped and point 0 is row 1 (-0.125 at 100 ms, -1 rad/s). Taken over
    # at -20 ms the segment to it peaks at 2.08 rad/s^2; at -80 ms, 60 ms longer, at 10.2
    # (over 8): the shorter segment is not the sharper one here, so both ends and every 5
    # ms between are screened, and point 0 moves to row 2 (due at 200 ms).
    rows = np.array([[-0.025], [-0.125], [-0.225]])
    release = Release(0, rows, 0, False, RunningChunk(rows, 0, 0), True, None)
    limits = _limits(8.0, velocity=2.0, joints=1)
    common = dict(running=None, measured=(np.zeros(1), -np.ones(1)), limits=limits)
    latest_only = shaping.for_release(
        "jtc", release, period_s=PERIOD, arrival_ns=-20 * MS, **common
    )
    assert latest_only.dropped == 1
    window = shaping.for_release(
        "jtc", release, period_s=PERIOD, arrival_ns=-20 * MS, earliest_ns=-80 * MS, **common
    )
    assert window.dropped == 2 and window.stamp_ns == 200 * MS
    np.testing.assert_array_equal(shaping.arrivals(-80 * MS, -20 * MS), np.arange(-80, -19, 5) * MS)
    np.testing.assert_array_equal(shaping.arrivals(-20 * MS, -20 * MS), [-20 * MS])


def test_the_first_segment_is_screened_from_the_controllers_command_too():
    # The rows above, taken over at -20 ms; the frame measured the arm at 0 moving at -1
    # rad/s (row 1 is met from there, as above), and the controller's command (the
    # trajectory before, still in its first segment) has it 0.05 rad behind the rows
    # already at that speed: from there only row 2 is met.
    rows = np.array([[-0.025], [-0.125], [-0.225]])
    release = Release(0, rows, 0, False, RunningChunk(rows, 0, 0), True, None)
    asked = []

    def commanded(at_ns: int) -> list[tuple[np.ndarray, np.ndarray]]:
        asked.append(at_ns)
        return [(np.full(1, 0.05), -np.ones(1))]

    common = dict(
        running=None,
        period_s=PERIOD,
        arrival_ns=-20 * MS,
        measured=(np.zeros(1), -np.ones(1)),
        limits=_limits(8.0, velocity=2.0, joints=1),
    )
    assert shaping.for_release("jtc", release, **common).dropped == 1
    assert shaping.for_release("jtc", release, commanded=commanded, **common).dropped == 2
    assert asked == [-20 * MS]


def test_from_the_desired_state_the_measured_state_is_screened_only_without_a_command():
    # The rows above, taken over at -20 ms. The frame measured the arm 0.5 rad behind
    # them (a gripper squeezing what it holds): from there no row is met within 8 rad/s^2.
    # A controller that starts from its command (0 at -1 rad/s, as the rows run) meets row 1.
    rows = np.array([[-0.025], [-0.125], [-0.225]])
    release = Release(0, rows, 0, False, RunningChunk(rows, 0, 0), True, None)
    command = [(np.zeros(1), -np.ones(1))]
    common = dict(
        running=None,
        period_s=PERIOD,
        arrival_ns=-20 * MS,
        measured=(np.full(1, 0.5), np.zeros(1)),
        limits=_limits(8.0, velocity=2.0, joints=1),
        commanded=lambda at_ns: command,
    )
    assert isinstance(shaping.for_release("jtc", release, **common), str)
    assert shaping.for_release("jtc", release, from_desired=True, **common).dropped == 1
    # No command known (nothing sent since the last hold): the measured state is the start.
    command.clear()
    assert isinstance(shaping.for_release("jtc", release, from_desired=True, **common), str)


def test_segment_range_is_exact():
    # From 0 at 3 /s to 0.1 at rest over 0.1 s: p(s) = 0.3 s - 0.3 s^2 + 0.1 s^3 (b = 0.3 -
    # 0.6, c = -0.2 + 0.3), whose velocity 0.3 - 0.6 s + 0.3 s^2 is zero only at s = 1: no
    # overshoot. At 6 /s: 0.6 s - 0.9 s^2 + 0.4 s^3, zero velocity at s = 0.5 and 1:
    # 0.125 at s = 0.5, past the end's 0.1. Sampled densely, the same.
    for speed, top in ((3.0, 0.1), (6.0, 0.125)):
        lowest, highest = shaping.segment_range(
            np.zeros(1), np.full(1, speed), np.full(1, 0.1), np.zeros(1), 0.1
        )
        assert (lowest[0], highest[0]) == pytest.approx((0.0, top))
    # A row too close to the range's bound for a fast start: met moves the first point on.
    p0, v0, p1, v1 = np.array([0.2, -1.0]), np.array([2.0, -4.0]), np.array([[0.3, -1.2]]), 0.0
    s = np.linspace(0, 1, 10001)[:, None]
    h, step = 0.1, p1[0] - p0
    b, c = 3 * step - 2 * h * v0 - h * v1, -2 * step + h * v0 + h * v1
    curve = p0 + h * v0 * s + b * s * s + c * s**3
    lowest, highest = shaping.segment_range(p0, v0, p1, np.zeros((1, 2)), h)
    np.testing.assert_allclose(lowest[0], curve.min(axis=0), atol=1e-9)
    np.testing.assert_allclose(highest[0], curve.max(axis=0), atol=1e-9)


def test_a_first_segment_that_would_overshoot_the_position_range_is_not_taken():
    # Rows at the upper bound 1.0, at rest, the first 0.1 s after the take-over. From 0.9
    # at 3 rad/s the cubic to row 0 reaches 1.0 just as it stops: taken. From 0.9 at 6
    # rad/s it rises to 1.025 (segment_range above), and later rows give the start's
    # velocity longer to carry it further: none is met, though every segment is within the
    # velocity and acceleration limits.
    rows = np.full((4, 1), 1.0)
    release = Release(0, rows, 0, False, RunningChunk(rows, 0, 0), True, None)
    limits = _limits(1e3, velocity=100.0, joints=1, lower=-1.0, upper=1.0)
    common = dict(running=None, period_s=PERIOD, arrival_ns=-100 * MS, limits=limits)
    slow = shaping.for_release(
        "jtc", release, measured=(np.full(1, 0.9), np.full(1, 3.0)), **common
    )
    assert slow.dropped == 0
    fast = shaping.for_release(
        "jtc", release, measured=(np.full(1, 0.9), np.full(1, 6.0)), **common
    )
    assert fast.startswith("every row is too far")
    # A start already past the bound (a measured gripper) may stay there, not go further.
    past = shaping.for_release("jtc", release, measured=(np.full(1, 1.05), np.zeros(1)), **common)
    assert past.dropped == 0
