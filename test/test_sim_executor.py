"""TrajectoryExecutor and the seam metric, with exact numbers."""

import dataclasses

import numpy as np
import pytest

from oxygen_core.safety.limits import JointLimits
from oxygen_core.sim.arm import GRIPPER, JOINT_NAMES
from oxygen_core.sim.executor import (
    LimitViolations,
    Takeover,
    Trajectory,
    TrajectoryExecutor,
)
from oxygen_core.sim.seam import SeamMeter, SeamSummary
from oxygen_core.worlds import Refused

NAMES = ("a", "b")
REPLACEMENT = "jtc_replacement"  # the model these tests pin (test_jtc.py has "jtc")
DT = 0.1


def _traj(start, times, values, names=NAMES):
    """Joint a follows `values`, joint b follows 10 x values (so order mistakes show)."""
    return Trajectory(names, start, times, [[v, 10 * v] for v in values])


def _run(executor, times):
    return [float(executor.command(t)[0]) for t in times]


def test_holds_the_initial_position_without_a_trajectory():
    ex = TrajectoryExecutor(np.array([0.5, 5.0]), NAMES, controller=REPLACEMENT)
    np.testing.assert_array_equal(ex.command(0.0), [0.5, 5.0])
    np.testing.assert_array_equal(ex.command(1.0), [0.5, 5.0])


def test_interpolates_from_the_commanded_position_then_between_points_then_holds():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, controller=REPLACEMENT)
    assert ex.replace(_traj(1.0, [0.2, 0.4], [1.0, 2.0]), now=0.0) is None
    ticks = [0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    np.testing.assert_allclose(_run(ex, ticks), [0, 0, 0.5, 1.0, 1.5, 2.0, 2.0], atol=1e-12)
    np.testing.assert_allclose(ex.command(1.6), [2.0, 20.0], atol=1e-12)


def test_replacement_takes_effect_at_the_new_start_stamp():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, controller=REPLACEMENT)
    ex.replace(_traj(0.0, [0.0, 1.0], [0.0, 1.0]), now=0.0)  # a ramp of 1 per second
    ex.replace(_traj(0.5, [0.0, 0.2], [3.0, 4.0]), now=0.2)  # arrives early, starts at 0.5
    out = _run(ex, [0.2, 0.3, 0.4])
    np.testing.assert_allclose(out, [0.2, 0.3, 0.4], atol=1e-12)  # the old one runs on
    assert ex.last_takeover is None
    assert ex.command(0.5)[0] == pytest.approx(3.0)  # its first point is at its start
    takeover = ex.last_takeover
    assert isinstance(takeover, Takeover)
    assert (takeover.time, takeover.skipped) == (0.5, 0)
    np.testing.assert_allclose(takeover.previous, [0.4, 4.0], atol=1e-12)
    np.testing.assert_allclose(takeover.first_point, [3.0, 30.0])
    assert takeover.jumps.max() == pytest.approx(26.0)  # joint b: 30 - 4
    np.testing.assert_allclose(_run(ex, [0.6, 0.7, 0.8]), [3.5, 4.0, 4.0], atol=1e-12)


def test_a_later_trajectory_starting_earlier_drops_the_queued_one():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, controller=REPLACEMENT)
    ex.replace(_traj(1.0, [0.0], [5.0]), now=0.0)
    ex.replace(_traj(0.5, [0.0], [2.0]), now=0.1)  # starts before it: it is superseded
    np.testing.assert_allclose(_run(ex, [0.5, 1.0, 1.5]), [2.0, 2.0, 2.0])


def test_points_already_past_are_skipped():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, controller=REPLACEMENT)
    ex.replace(_traj(0.0, [0.0], [1.0]), now=0.0)
    assert _run(ex, [0.8, 0.9]) == [1.0, 1.0]
    # Stamped 0.5 but executed from 1.0: points at 0.6 and 0.8 are past; the command moves
    # from 1.0 (at the 0.9 tick) to the first point ahead, 3.0 at 1.2.
    ex.replace(_traj(0.5, [0.1, 0.3, 0.7], [7.0, 8.0, 3.0]), now=1.0)
    out = _run(ex, [1.0, 1.1, 1.2, 1.3])
    np.testing.assert_allclose(out, [1 + 2 / 3, 1 + 4 / 3, 3.0, 3.0], atol=1e-12)
    assert ex.last_takeover is None  # reported at the 1.0 tick only


def test_handover_reports_skipped_points():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, controller=REPLACEMENT)
    ex.replace(_traj(0.0, [0.0], [1.0]), now=0.0)
    ex.command(0.9)
    ex.replace(_traj(0.5, [0.1, 0.3, 0.7], [7.0, 8.0, 3.0]), now=1.0)
    ex.command(1.0)
    assert ex.last_takeover.skipped == 2
    assert ex.last_takeover.jumps.max() == pytest.approx(20.0)  # joint b: 30 - 10


def test_joint_order_of_the_message_is_mapped_to_the_robots():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, controller=REPLACEMENT)
    assert ex.replace(Trajectory(("b", "a"), 0.0, [0.0], [[20.0, 2.0]]), now=0.0) is None
    np.testing.assert_array_equal(ex.command(0.0), [2.0, 20.0])


@pytest.mark.parametrize(
    ("trajectory", "kind", "reason"),
    [
        (
            _traj(0.0, [0.0], [1.0], names=("a", "c")),
            "joint_names",
            "joint names ['a', 'c'] do not match: missing ['b'], unknown ['c']",
        ),
        (
            _traj(0.0, [0.0], [1.0], names=("a", "a")),
            "joint_names",
            "joint names ['a', 'a'] do not match: missing ['b'], unknown []",
        ),
        (Trajectory(NAMES, 0.0, [], []), "points", "0 points with 0 times"),
        (Trajectory(NAMES, 0.0, [0.0], [[1.0]]), "points", "point 0 has 1 positions, expected 2"),
        (
            Trajectory(NAMES, 0.0, [0.0, 0.1], [[1.0, 1.0], [np.nan, 1.0]]),
            "non_finite",
            "point 1 has a non-finite position",
        ),
        (
            _traj(0.0, [0.0, np.inf], [1.0, 2.0]),
            "non_finite",
            "start time or time_from_start is not finite",
        ),
        (_traj(np.nan, [0.0], [1.0]), "non_finite", "start time or time_from_start is not finite"),
        (
            _traj(0.0, [0.2, 0.2], [1.0, 2.0]),
            "times",
            "time_from_start must start >= 0 and strictly increase: [0.2, 0.2]",
        ),
        (
            _traj(0.0, [-0.1, 0.2], [1.0, 2.0]),
            "times",
            "time_from_start must start >= 0 and strictly increase: [-0.1, 0.2]",
        ),
        (
            _traj(0.0, [0.1, 0.3], [1.0, 2.0]),
            "late",
            "all points are in the past (the last at 0.300 s, now 1.000 s)",
        ),
    ],
)
def test_malformed_trajectories_are_rejected_with_a_kind_and_change_nothing(
    trajectory, kind, reason
):
    ex = TrajectoryExecutor(np.zeros(2), NAMES, controller=REPLACEMENT)
    ex.replace(_traj(0.0, [0.0, 1.0], [0.0, 1.0]), now=0.0)
    assert ex.replace(trajectory, now=1.0) == Refused(kind, reason)
    np.testing.assert_allclose(ex.command(0.0), [0.0, 0.0])
    np.testing.assert_allclose(ex.command(0.5), [0.5, 5.0])  # the good one runs on


def test_default_joint_names_are_the_sims():
    ex = TrajectoryExecutor(np.zeros(7), controller=REPLACEMENT)
    assert ex.joint_names == JOINT_NAMES


# Joint a within [-1, 1] at 2 per second; joint b (10 x a) unbounded in practice.
LIMITS = (np.array([[-1.0, 1.0], [-1e3, 1e3]]), np.array([2.0, 1e4]))


def test_points_outside_the_limits_are_counted_at_take_over_as_a_controller_would():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, LIMITS, controller=REPLACEMENT)
    ex.command(0.0)
    # Into 0.15 from 0 over 0.1 s (1.5/s): fine; 0.5 (3.5/s) and 1.5 (10/s) too fast; 1.5
    # and 1.4 outside [-1, 1]; back to 1.4 (1/s) fine.
    ex.replace(_traj(0.1, [0.0, 0.1, 0.2, 0.3], [0.15, 0.5, 1.5, 1.4]), now=0.0)
    assert ex.violations == LimitViolations()  # accepted, not yet taken over
    ex.command(0.1)
    assert ex.violations == LimitViolations(trajectories=1, position=2, velocity=2)
    _run(ex, [0.2, 0.3, 0.4])
    ex.replace(_traj(1.0, [0.0], [5.0]), now=0.4)  # superseded before it runs: not counted
    ex.replace(_traj(0.5, [0.0], [0.0]), now=0.4)  # from 1.4 at 0.4 to 0 at 0.5: 14/s
    _run(ex, [0.5, 0.6, 0.7, 1.0])
    assert ex.violations == LimitViolations(trajectories=2, position=2, velocity=3)
    # Points already past at take-over never run: only 0.1 at 1.5 (from 0 at 1.0) counts.
    ex.replace(_traj(1.0, [0.0, 0.1, 0.5], [9.0, 9.0, 0.1]), now=1.2)
    ex.command(1.2)
    assert ex.last_takeover.skipped == 2
    assert ex.violations == LimitViolations(trajectories=2, position=2, velocity=3)
    ex.reset(np.zeros(2), time=2.0)
    assert ex.violations == LimitViolations()


def test_counting_changes_no_command_and_a_reset_at_the_tick_has_no_first_step():
    ex = TrajectoryExecutor(np.zeros(2), NAMES, LIMITS, controller=REPLACEMENT)
    ex.reset(np.zeros(2), time=1.0)
    ex.replace(_traj(1.0, [0.0, 0.1], [0.9, 3.0]), now=1.0)  # 0.9 at the reset's own tick
    np.testing.assert_allclose(_run(ex, [1.0, 1.05, 1.1]), [0.9, 1.95, 3.0], atol=1e-12)
    assert ex.violations == LimitViolations(trajectories=1, position=1, velocity=1)


def test_the_sim_arms_limits_are_the_default_and_other_joints_are_unbounded():
    ex = TrajectoryExecutor(np.zeros(7), controller=REPLACEMENT)
    ex.command(0.0)
    point = np.zeros(7)
    point[1] = 1.95  # joint_2 stops at 1.9; reached in 2 s at 0.975 rad/s (limit 1.2)
    ex.replace(Trajectory(JOINT_NAMES, 0.0, [2.0], [point]), now=0.0)
    assert ex.command(2.0)[1] == pytest.approx(1.95)  # commanded as sent: the servo clips
    assert ex.violations == LimitViolations(trajectories=1, position=1, velocity=0)
    gripper = TrajectoryExecutor(np.zeros(7), controller=REPLACEMENT)
    gripper.command(0.0)
    shut = np.zeros(7)
    shut[GRIPPER] = 1.0  # open to closed in one 50 ms step (20 /s; its servo does 2 /s)
    gripper.replace(Trajectory(JOINT_NAMES, 0.05, [0.0], [shut]), now=0.0)
    gripper.command(0.05)
    assert gripper.violations == LimitViolations()  # a setpoint, not a rate-bound command
    other = TrajectoryExecutor(np.zeros(2), ("joint_2", "other"), controller=REPLACEMENT)
    other.command(0.0)
    other.replace(Trajectory(("joint_2", "other"), 0.0, [1.0], [[1.0, 99.0]]), now=0.0)
    other.command(1.0)
    assert other.violations == LimitViolations()


def test_limits_of_the_wrong_shape_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"limits must be position \[2, 2\] and velocity \[2\]"):
        TrajectoryExecutor(
            np.zeros(2), NAMES, (np.zeros((7, 2)), np.zeros(7)), controller=REPLACEMENT
        )


def _feed(meter, commands, takeover_at=None, takeover=None):
    for k, c in enumerate(commands):
        meter.observe(np.array([c]), takeover if k == takeover_at else None)


def test_seam_jump_and_jerk_exact():
    meter = SeamMeter(DT)
    h = Takeover(0.4, np.array([0.0]), np.array([1.0]), 0)
    _feed(meter, [0, 0, 0, 0, 1, 1, 1, 1], takeover_at=4, takeover=h)
    # Third differences at the seam tick and the three after: 1, -2, 1, 0 (/ dt^3).
    summary = meter.summary()
    assert summary.seams == 1
    assert summary.jump_mean == summary.jump_max == 1.0
    assert summary.jerk_max == pytest.approx(2.0 / DT**3)
    assert summary.jerk_mean == pytest.approx(2.0 / DT**3)


def test_seam_summary_over_two_seams_and_a_smooth_run():
    meter = SeamMeter(DT)
    first = Takeover(0.3, np.array([0.0]), np.array([0.5]), 0)
    _feed(meter, [0, 0, 0, 0.5, 0.5, 0.5, 0.5], takeover_at=3, takeover=first)
    second = Takeover(1.0, np.array([0.5]), np.array([0.5]), 0)
    _feed(meter, [0.6, 0.7, 0.8, 0.9], takeover_at=0, takeover=second)  # a ramp: no jump
    summary = meter.summary()
    assert summary.seams == 2
    assert summary.jump_mean == pytest.approx(0.25) and summary.jump_max == 0.5
    # Seam 1: max |third diff| = 2 x 0.5 = 1.0. Seam 2 windows: (0.5,0.5,0.5,0.6) -> 0.1,
    # (0.5,0.5,0.6,0.7) -> 0.1 - 0 ... max 0.1.
    assert summary.jerk_max == pytest.approx(1.0 / DT**3)
    assert summary.jerk_mean == pytest.approx((1.0 + 0.1) / 2 / DT**3)
    assert SeamMeter(DT).summary().seams == 0


def test_seam_jump_is_split_into_the_arms_joints_and_the_gripper():
    meter = SeamMeter(DT, gripper=2)
    arm_wins = Takeover(0.1, np.array([0.0, 0.0, 1.0]), np.array([0.25, -0.5, 0.875]), 0)
    gripper_wins = Takeover(0.2, np.array([0.0, 0.0, 0.0]), np.array([0.0, 0.125, 1.0]), 0)
    meter.observe(np.zeros(3), arm_wins)
    meter.observe(np.zeros(3), gripper_wins)
    s = meter.summary()
    assert (s.jump_mean, s.jump_max) == (0.75, 1.0)
    assert (s.arm_jump_mean, s.arm_jump_max) == (0.3125, 0.5)
    assert (s.gripper_jump_mean, s.gripper_jump_max) == (0.5625, 1.0)
    # Without a gripper every joint is the arm's.
    alone = SeamMeter(DT)
    alone.observe(np.zeros(3), gripper_wins)
    assert alone.summary().arm_jump_max == 1.0 and alone.summary().gripper_jump_max == 0.0


def test_pooled_seams_weigh_each_run_by_its_seams():
    one, two = SeamMeter(DT, gripper=1), SeamMeter(DT, gripper=1)
    one.observe(np.zeros(2), Takeover(0.1, np.zeros(2), np.array([0.5, 0.0]), 0))
    for _ in range(3):
        two.observe(np.zeros(2), Takeover(0.1, np.zeros(2), np.array([0.0, 1.0]), 0))
    pooled = SeamSummary.pooled([one.summary(), two.summary()])
    assert pooled.seams == 4 and pooled.jump_mean == pytest.approx((0.5 + 3) / 4)
    assert pooled.arm_jump_mean == pytest.approx(0.125) and pooled.arm_jump_max == 0.5
    assert pooled.gripper_jump_mean == pytest.approx(0.75) and pooled.gripper_jump_max == 1.0


def test_takeover_peaks_are_the_arms_differences_over_the_take_over_tick():
    # Arm joint 0 held at 0, then a step to 0.1 at the take-over tick and a ramp of 0.1 a
    # tick after it; the gripper (joint 1) jumps by 1 and is left out.
    commands = [[0, 0], [0, 0], [0, 0], [0.1, 1], [0.2, 1], [0.3, 1], [0.4, 1]]
    takeover = Takeover(0.3, np.zeros(2), np.array([0.1, 1.0]), 0)
    inf = np.full(2, np.inf)
    limits = JointLimits(
        ("a", "g"), -inf, inf, np.array([0.5, 0.1]), np.array([100.0, 1.0]), inf, "t"
    )
    meter = SeamMeter(DT, gripper=1, limits=limits)
    for k, c in enumerate(commands):
        meter.observe(np.array(c, float), takeover if k == 3 else None)
    s = meter.summary()
    assert s.takeover_velocity_max == pytest.approx(0.1 / DT)  # 1 rad/s: over 0.5
    assert s.takeover_acceleration_max == pytest.approx(0.1 / DT**2)  # 10 rad/s^2
    assert s.takeover_jerk_max == pytest.approx(0.1 / DT**3)  # differences 0, 0.1, 0, ...
    assert s.jerk_max == pytest.approx(2.0 / DT**3)  # the whole-robot jerk has the gripper's
    assert s.takeovers_over == 1
    slow = SeamMeter(
        DT, gripper=1, limits=dataclasses.replace(limits, velocity=np.array([2.0, 0.1]))
    )
    for k, c in enumerate(commands):
        slow.observe(np.array(c, float), takeover if k == 3 else None)
    assert slow.summary().takeovers_over == 0  # 1 rad/s and 10 rad/s^2 are within
    pooled = SeamSummary.pooled([s, slow.summary()])
    assert pooled.takeovers_over == 1 and pooled.takeover_velocity_mean == pytest.approx(1.0)
