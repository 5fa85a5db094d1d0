"""The sim's own messages: a received trajectory for the executor, an episode's outcome.

These converters live with the sim tools (oxygen_ros.tools.sim.messages), not with the
node's conversions, because they speak oxygen_core.sim's types; each is checked against
its inverse through real serialized messages.
"""

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.executor import LimitViolations
from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.seam import SeamSummary
from oxygen_core.sim.tasks import Contacts
from oxygen_ros.convert import ns_to_stamp
from oxygen_ros.tools.sim.messages import (
    outcome_msg,
    outcome_of,
    trajectory_msg,
    trajectory_of,
)

pytestmark = pytest.mark.ros


def test_a_trajectory_round_trips_into_the_executors_trajectory_exactly():
    rows = np.array([[0.5, 1.0], [0.75, -2.0], [1.0, 0.125]])
    msg = trajectory_msg([0.0, 0.05, 0.1], rows, 7 * NS_PER_S, names=("j1", "j2"))
    wire = deserialize_message(serialize_message(msg), type(msg))
    back = trajectory_of(wire, start_ns=7 * NS_PER_S + 25_000_000)
    assert back.joint_names == ("j1", "j2") and back.start == 7.025
    assert back.times == [0.0, 0.05, 0.1] and back.positions == rows.tolist()
    assert back.velocities is None and back.accelerations is None  # linear segments


def test_velocities_and_accelerations_reach_the_executor_when_the_points_carry_them():
    msg = trajectory_msg([0.0, 0.05], np.zeros((2, 2)), NS_PER_S, names=("j1", "j2"))
    for point, velocity in zip(msg.points, ([0.0, 0.5], [0.0, 0.0]), strict=True):
        point.velocities = velocity
    wire = deserialize_message(serialize_message(msg), type(msg))
    back = trajectory_of(wire, start_ns=NS_PER_S)
    assert back.velocities == [[0.0, 0.5], [0.0, 0.0]] and back.accelerations is None


def test_a_sim_trajectory_names_the_arms_joints_by_default():
    msg = trajectory_msg([0.0], np.zeros((1, len(JOINT_NAMES))), NS_PER_S)
    assert trajectory_of(msg, NS_PER_S).joint_names == JOINT_NAMES


def test_an_episode_outcome_round_trips_through_its_message():
    outcome = Outcome(
        index=2,
        episodes=5,
        family="stack",
        seed=11,
        instruction="stack the red block",
        policy="model",
        success=True,
        contacts=Contacts(
            grasped=True,
            release_height=0.0625,
            finger_pushes=4,
            object_pushes=2,
            off_table=1,
            others_moved=0.125,
        ),
        start_ns=1_700_000_001_000_000_000,
        end_ns=1_700_000_009_500_000_001,
        duration_s=8.5,
        time_limit_s=20.0,
        wall_s=9.25,
        steps=170,
        accepted=17,
        rejected={"stale": 2, "bad_names": 1},
        seams=SeamSummary(
            seams=16,
            jerks=3,
            jump_mean=0.5,
            jump_max=1.5,
            jerk_mean=0.25,
            jerk_max=2.0,
            arm_jump_mean=0.125,
            arm_jump_max=0.75,
            gripper_jump_mean=0.375,
            gripper_jump_max=1.5,
        ),
        limits=LimitViolations(trajectories=2, position=3, velocity=5),
        renders=340,
        render_wall_s=1.125,
        narration=("reaching", "grasped"),
        memory=("block picked",),
    )
    msg = outcome_msg(outcome)
    assert msg.trajectories_rejected == 3 and msg.header.stamp == ns_to_stamp(outcome.end_ns)
    assert (msg.limit_trajectories, msg.limit_position_points, msg.limit_velocity_steps) == (
        2,
        3,
        5,
    )
    assert outcome_of(deserialize_message(serialize_message(msg), type(msg))) == outcome
