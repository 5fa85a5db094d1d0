"""The "jtc" controller model (Jazzy/Kilted joint_trajectory_controller), rule by rule with
exact numbers, and "jtc_replacement" reproducing the executor as it was before "jtc"."""

import hashlib

import numpy as np
import pytest

from oxygen_core.controller.jtc import JtcParams
from oxygen_core.sim.executor import (
    LimitViolations,
    Takeover,
    Trajectory,
    TrajectoryExecutor,
)
from oxygen_core.worlds import Refused

NAMES = ("a", "b")
PERIOD = 0.125  # the controller's update period: each update commands the sample this far ahead
# Joint a within [-1, 1] at 2 per second; joint b (10 x a) unbounded in practice.
LIMITS = (np.array([[-1.0, 1.0], [-1e3, 1e3]]), np.array([2.0, 1e4]))


def _jtc(initial=(0.0, 0.0), limits=None, **flags):
    params = JtcParams(PERIOD, **flags)
    return TrajectoryExecutor(np.array(initial), NAMES, limits, controller="jtc", jtc=params)


def _traj(start, times, values, velocities=None, accelerations=None):
    """Joint a follows the values, joint b 10 x them (so order mistakes show)."""

    def rows(column):
        return None if column is None else [[v, 10 * v] for v in column]

    return Trajectory(NAMES, start, times, rows(values), rows(velocities), rows(accelerations))


def test_starts_from_the_measured_state_commands_a_period_ahead_and_holds_the_end():
    ex = _jtc(initial=(0.4, 4.0))  # last commanded 0.4; the arm measures 0.0
    assert ex.replace(_traj(1.0, [0.5], [1.0]), now=1.0) is None
    # The update at 1.0 writes the sample at 1.125: a quarter of the way from 0.0 to 1.0.
    np.testing.assert_array_equal(ex.command(1.0, measured=np.zeros(2)), [0.25, 2.5])
    # +0.25 s after the stamp (the update at 1.125) the command is exactly half way.
    np.testing.assert_array_equal(ex.command(1.125, measured=np.full(2, 9.0)), [0.5, 5.0])
    np.testing.assert_array_equal(ex.command(1.375, measured=np.zeros(2)), [1.0, 10.0])
    np.testing.assert_array_equal(ex.command(3.0, measured=np.zeros(2)), [1.0, 10.0])


def test_a_future_stamp_replaces_the_running_trajectory_at_the_next_update():
    ex = _jtc()
    ex.replace(_traj(0.5, [0.0], [1.0]), now=0.5)
    np.testing.assert_array_equal(ex.command(0.5, measured=np.zeros(2)), [1.0, 10.0])
    # Stamped 1.5, arriving at 1.0: the old one is forgotten at the update at 1.0 and the
    # command heads from the measured 0.75 to 2.0 at 1.5 (at 1.125: a quarter of 1.25 on).
    ex.replace(_traj(1.5, [0.0], [2.0]), now=1.0)
    np.testing.assert_array_equal(ex.command(1.0, measured=np.array([0.75, 7.5])), [1.0625, 10.625])
    takeover = ex.last_takeover
    assert isinstance(takeover, Takeover)
    assert (takeover.time, takeover.skipped) == (1.0, 0)
    np.testing.assert_array_equal(takeover.previous, [1.0, 10.0])
    np.testing.assert_array_equal(takeover.first_point, [1.0625, 10.625])
    np.testing.assert_array_equal(takeover.jumps, [0.0625, 0.625])


def test_the_latest_message_before_an_update_is_the_one_taken():
    ex = _jtc()
    ex.replace(_traj(1.0, [0.5], [4.0]), now=1.0)
    ex.replace(_traj(1.5, [0.5], [-4.0]), now=1.0)  # due later, received later: it runs now
    # From 0 at 1.0 to -4 at 2.0, sampled at 1.125.
    np.testing.assert_array_equal(ex.command(1.0, measured=np.zeros(2)), [-0.5, -5.0])


def test_a_zero_stamp_is_the_take_over_update_and_never_late():
    zero, stamped = _jtc(), _jtc()
    assert zero.replace(_traj(0.0, [0.5], [1.0]), now=2.0) is None  # 0 + 0.5 < 2: still taken
    stamped.replace(_traj(2.0, [0.5], [1.0]), now=2.0)
    for t in (2.0, 2.125, 2.5):
        np.testing.assert_array_equal(
            zero.command(t, measured=np.zeros(2)), stamped.command(t, measured=np.zeros(2))
        )
    np.testing.assert_array_equal(zero.command(2.125, measured=np.zeros(2)), [0.5, 5.0])


def test_a_stamped_trajectory_that_ends_before_it_arrives_is_refused_in_one_line():
    ex = _jtc()
    ex.replace(_traj(1.0, [0.0, 1.0], [0.0, 1.0]), now=1.0)
    ex.command(1.0, measured=np.zeros(2))
    assert ex.replace(_traj(0.5, [0.1, 0.3], [5.0, 6.0]), now=1.0) == Refused(
        "late", "all points are in the past (the last at 0.800 s, now 1.000 s)"
    )
    np.testing.assert_array_equal(ex.command(1.375, measured=np.zeros(2)), [0.5, 5.0])


def test_first_points_already_past_start_mid_segment():
    ex = _jtc()
    ex.replace(_traj(0.0, [0.0], [0.0]), now=0.0)
    ex.command(0.0, measured=np.zeros(2))
    # Point 0 (1.0) was due at 0.75, point 1 (3.0) at 1.75; taken at 1.0, the command is
    # the segment at 1.125: 1 + 2 x 0.375 = 1.75, a step from 0 whatever the measured state.
    assert ex.replace(_traj(0.75, [0.0, 1.0], [1.0, 3.0]), now=1.0) is None
    np.testing.assert_array_equal(ex.command(1.0, measured=np.full(2, 9.0)), [1.75, 17.5])
    assert ex.last_takeover.skipped == 1
    np.testing.assert_array_equal(ex.last_takeover.jumps, [1.75, 17.5])


def test_take_overs_with_a_point_already_due_are_counted_until_the_reset():
    ex = _jtc()
    ex.replace(_traj(0.0, [0.0], [0.0]), now=0.0)
    ex.command(0.0, measured=np.zeros(2))
    ex.replace(_traj(1.0, [0.125, 0.25], [1.0, 2.0]), now=1.0)  # in time
    ex.command(1.0, measured=np.zeros(2))
    assert ex.late_takeovers == 0
    ex.replace(_traj(1.0, [0.125, 0.25, 1.0], [1.0, 2.0, 3.0]), now=1.2)  # point 0 was due
    ex.command(1.25, measured=np.zeros(2))
    assert (ex.late_takeovers, ex.last_takeover.skipped) == (1, 1)  # 1.125 past, 1.25 now
    ex.reset(np.zeros(2))
    assert ex.late_takeovers == 0


def test_velocities_make_cubic_segments():
    ex = _jtc()
    # (p, v): (0, 2) at 1.0, (1, 0) at 2.0, (1, 0) at 3.0. Hermite cubic on [1, 2], h = 1,
    # at s = 0.5 (the update at 1.375): (s - 2s^2 + s^3) h 2 + (3s^2 - 2s^3) 1
    # = 0.125 x 2 + 0.5 = 0.75 (linear would give 0.5).
    ex.replace(_traj(1.0, [0.0, 1.0, 2.0], [0.0, 1.0, 1.0], velocities=[2.0, 0.0, 0.0]), now=1.0)
    ex.command(1.0, measured=np.zeros(2))
    np.testing.assert_array_equal(ex.command(1.375, measured=np.zeros(2)), [0.75, 7.5])


def test_the_segment_from_the_measured_state_starts_at_rest_when_points_carry_velocities():
    ex = _jtc()
    # From the measured 0 (velocity 0: a position-only state) to (1, 0) one second on: at
    # s = 0.25 (the update at 1.125), 3s^2 - 2s^3 = 0.1875 - 0.03125 = 0.15625.
    ex.replace(_traj(1.0, [1.0], [1.0], velocities=[0.0]), now=1.0)
    ex.command(1.0, measured=np.zeros(2))
    np.testing.assert_array_equal(ex.command(1.125, measured=np.zeros(2)), [0.15625, 1.5625])


def test_accelerations_make_quintic_segments():
    ex = _jtc()
    # (p, v, a): (0, 0, 4) -> (1, 0, 0) over h = 1 is p(s) = 2s^2 + 4s^3 - 9s^4 + 4s^5
    # (p(1) = 1, p'(1) = p''(1) = 0, p''(0) = 4); at s = 0.5: 0.5 + 0.5 - 0.5625 + 0.125.
    ex.replace(
        _traj(1.0, [0.0, 1.0], [0.0, 1.0], velocities=[0.0, 0.0], accelerations=[4.0, 0.0]),
        now=1.0,
    )
    ex.command(1.0, measured=np.zeros(2))
    np.testing.assert_array_equal(ex.command(1.375, measured=np.zeros(2)), [0.5625, 5.625])


def test_a_last_point_still_moving_is_refused_unless_the_flag_allows_it():
    moving = _traj(1.0, [0.0, 1.0], [0.0, 1.0], velocities=[0.0, 0.05])
    assert _jtc().replace(moving, now=1.0) == Refused(
        "end_velocity", "the last point's velocity of a is 0.05, not zero"
    )
    almost = _traj(1.0, [0.0, 1.0], [0.0, 1.0], velocities=[0.0, 1e-8])  # under float eps
    assert _jtc().replace(almost, now=1.0) is None
    allowed = _jtc(allow_nonzero_velocity_at_trajectory_end=True)
    assert allowed.replace(moving, now=1.0) is None
    allowed.command(1.0, measured=np.zeros(2))
    np.testing.assert_array_equal(allowed.command(2.5, measured=np.zeros(2)), [1.0, 10.0])


def test_accelerations_without_velocities_are_refused():
    bare = Trajectory(NAMES, 1.0, [0.5], [[1.0, 1.0]], accelerations=[[0.0, 0.0]])
    assert _jtc().replace(bare, now=1.0) == Refused(
        "points", "accelerations without velocities (upstream would command zero positions)"
    )


@pytest.mark.parametrize("partial", [False, True])
def test_a_joint_the_controller_does_not_own_is_refused(partial):
    foreign = Trajectory(("a", "c"), 1.0, [0.5], [[1.0, 1.0]])
    assert _jtc(allow_partial_joints_goal=partial).replace(foreign, now=1.0) == Refused(
        "joint_names", "joint names ['a', 'c'] do not match: missing ['b'], unknown ['c']"
    )


def test_a_missing_joint_is_refused_unless_partial_goals_are_allowed_then_it_holds():
    partial = Trajectory(("a",), 1.0, [0.5], [[1.0]])
    assert _jtc().replace(partial, now=1.0) == Refused(
        "joint_names", "joint names ['a'] do not match: missing ['b'], unknown []"
    )
    ex = _jtc(initial=(0.0, 5.0), allow_partial_joints_goal=True)  # b last commanded at 5
    assert ex.replace(partial, now=1.0) is None
    # b's points are its last command (fill_partial_goal), reached from its measured 4.
    np.testing.assert_array_equal(ex.command(1.0, measured=np.array([0.0, 4.0])), [0.25, 4.25])
    np.testing.assert_array_equal(ex.command(2.0, measured=np.zeros(2)), [1.0, 5.0])


def test_limits_count_the_path_from_where_the_controller_starts():
    ex = _jtc(limits=LIMITS)
    # From the measured 0 at 1.0: 0.5 at 1.5 (1/s), 1.5 at 1.75 (4/s: over), 1.4 at 2.0
    # (0.4/s); 1.5 and 1.4 are outside [-1, 1].
    ex.replace(_traj(1.0, [0.5, 0.75, 1.0], [0.5, 1.5, 1.4]), now=1.0)
    assert ex.violations == LimitViolations()  # accepted, not yet taken over
    ex.command(1.0, measured=np.zeros(2))
    assert ex.violations == LimitViolations(trajectories=1, position=2, velocity=1)
    # Point 0 (5.0, outside) is past at 3.0 and never runs: the path is the segment's 1.0 at
    # 3.0, then 0.0 at 3.25 (4/s: over).
    ex.replace(_traj(2.0, [0.0, 1.25], [5.0, 0.0]), now=3.0)
    ex.command(3.0, measured=np.array([1.4, 14.0]))
    assert ex.last_takeover.skipped == 1
    np.testing.assert_allclose(ex.last_takeover.first_point, [0.5, 5.0], atol=1e-12)
    assert ex.violations == LimitViolations(trajectories=2, position=2, velocity=2)
    # From the measured -1 to 0.5 in 0.5 s: 3/s, though the last command (0.0) is near.
    ex.replace(_traj(4.0, [0.5], [0.5]), now=4.0)
    ex.command(4.0, measured=np.array([-1.0, -10.0]))
    assert ex.violations == LimitViolations(trajectories=3, position=2, velocity=3)


def test_the_measured_joints_and_the_parameters_are_required():
    ex = _jtc()
    ex.replace(_traj(1.0, [0.5], [1.0]), now=1.0)
    with pytest.raises(ValueError, match=r"starts from the measured joints"):
        ex.command(1.0)
    with pytest.raises(ValueError, match=r"JtcParams go with 'jtc' only"):
        TrajectoryExecutor(np.zeros(2), NAMES, controller="jtc")
    with pytest.raises(ValueError, match=r"JtcParams go with 'jtc' only"):
        TrajectoryExecutor(np.zeros(2), NAMES, controller="jtc_replacement", jtc=JtcParams(PERIOD))


def _mixed_run(executor: TrajectoryExecutor, measured: bool) -> tuple[str, LimitViolations]:
    """250 ticks at 20 Hz of trajectories of every kind (past, future, late, reordered
    joints) and a reset; the sha256 of every command, take-over and rejection."""
    x = 2024

    def draw(n: int) -> int:  # an integer LCG: the same numbers on every platform
        nonlocal x
        x = (1103515245 * x + 12345) % 2**31
        return (x >> 8) % n

    digest = hashlib.sha256()
    for tick in range(250):
        t = tick * 0.05
        if tick == 130:
            executor.reset(np.array([0.25, -2.0]), time=t)
        while draw(3) == 0:
            k = 1 + draw(4)
            start = t + (draw(11) - 6) * 0.05
            gaps = [0.05 * draw(3) if i == 0 else 0.05 * (1 + draw(3)) for i in range(k)]
            rows = [[(draw(41) - 20) / 16, (draw(41) - 20) / 4] for _ in range(k)]
            names = NAMES if draw(12) else ("b", "a")
            trajectory = Trajectory(names, start, list(np.cumsum(gaps)), rows)
            rejection = executor.replace(trajectory, now=t)
            digest.update(repr(rejection and (rejection.kind, rejection.reason)).encode())
        world = np.array([draw(7) - 3.0, draw(7) - 3.0])
        command = executor.command(t, world) if measured else executor.command(t)
        digest.update(command.tobytes())
        if (to := executor.last_takeover) is not None:
            digest.update(repr((to.time, to.skipped)).encode())
            digest.update(to.previous.tobytes() + to.first_point.tobytes())
    digest.update(repr(executor.violations).encode())
    return digest.hexdigest(), executor.violations


# What the executor gave on this run before the "jtc" model was added (git b35d54d).
_BEFORE = "91916a7a6da1e241104460dd7838c866d539092afb21160222ae7d0b0386df4e"


def test_jtc_replacement_reproduces_the_executor_before_jtc_bit_for_bit():
    expected = (_BEFORE, LimitViolations(trajectories=33, position=22, velocity=65))
    for measured in (False, True):  # the measured joints are ignored
        executor = TrajectoryExecutor(np.zeros(2), NAMES, LIMITS, controller="jtc_replacement")
        assert _mixed_run(executor, measured=measured) == expected


def test_a_velocity_state_interface_starts_the_segment_at_the_measured_velocity():
    ex = _jtc()
    # From (0, 2) measured to (1, 0) one second on: at s = 0.25 (the update at 1.125),
    # (s - 2s^2 + s^3) x 2 + (3s^2 - 2s^3) = 0.140625 x 2 + 0.15625 = 0.4375.
    ex.replace(_traj(1.0, [1.0], [1.0], velocities=[0.0]), now=1.0)
    moving = np.array([2.0, 20.0])
    ex.command(1.0, measured=np.zeros(2), measured_velocity=moving)
    np.testing.assert_array_equal(ex.command(1.125, measured=np.zeros(2)), [0.4375, 4.375])


def test_from_the_desired_state_a_take_over_continues_the_command_not_the_arm():
    """interpolate_from_desired_state: the new trajectory starts from where the command
    is at the take-over (its value and velocity), whatever the arm measures."""
    ex = _jtc(initial=(0.4, 4.0), interpolate_from_desired_state=True)
    ex.replace(_traj(1.0, [0.5], [1.0]), now=1.0)
    # Nothing ran: from the last command 0.4 at rest, to 1.0 at 1.5, sampled at 1.125.
    np.testing.assert_allclose(ex.command(1.0, measured=np.zeros(2)), [0.55, 5.5])
    np.testing.assert_allclose(ex.command(1.125, measured=np.zeros(2)), [0.7, 7.0])
    # At 1.25 the running trajectory has the command at 0.7, moving at 1.2 per second; a
    # trajectory to 1.9 at 2.25 (the same speed) takes over there and runs on from 0.7:
    # the update at 1.25 commands 0.85, the arm's 9.0 ignored.
    np.testing.assert_allclose(ex.desired(1.25)[0], [0.7, 7.0])
    np.testing.assert_allclose(ex.desired(1.25)[1], [1.2, 12.0])
    ex.replace(_traj(1.5, [0.75], [1.9]), now=1.2)
    np.testing.assert_allclose(ex.command(1.25, measured=np.full(2, 9.0)), [0.85, 8.5])


def test_from_the_desired_state_a_resent_cubic_trajectory_runs_on_unchanged():
    """With velocities (cubic segments) the take-over carries the command's velocity too:
    the same trajectory sent again mid-way commands what the first would have."""
    times, values, velocities = [0.25, 0.5, 0.75], [0.2, 0.5, 0.6], [1.0, 0.8, 0.0]
    once = _jtc(interpolate_from_desired_state=True)
    twice = _jtc(interpolate_from_desired_state=True)
    for ex in (once, twice):
        ex.replace(_traj(1.0, times, values, velocities), now=1.0)
        ex.command(1.0, measured=np.zeros(2))
    twice.replace(_traj(1.0, times[1:], values[1:], velocities[1:]), now=1.2)
    for t in (1.25, 1.375, 1.5, 1.625, 1.875):
        np.testing.assert_allclose(
            twice.command(t, measured=np.full(2, 5.0)), once.command(t, measured=np.zeros(2))
        )
    # Without the flag the resent trajectory starts from the measured 5.0 instead.
    measured = _jtc()
    measured.replace(_traj(1.0, times, values, velocities), now=1.0)
    measured.command(1.0, measured=np.zeros(2))
    measured.replace(_traj(1.0, times[1:], values[1:], velocities[1:]), now=1.2)
    assert measured.command(1.25, measured=np.full(2, 5.0))[0] > 1.0
