"""The simulated robot's topics and the ROS messages it sends and receives.

`SIM_TOPICS` is the one table of what the sim publishes: the sensor topics the oxygen node
reads (cameras, joint states, instruction; their names are parameters, because they must
match the node's params file) and the sim's own topics under /sim (episode outcomes and
the scripted expert's targets), which nothing needs to rename. The sim node's publishers
and `oxygen-sim-record`'s bag are both built from it, so a live run and a recording carry
the same topics and the same messages, built by the same functions below.

Stamps are integer nanoseconds of sim time (`convert.ns_to_stamp`), so a node's trajectory
stamped with the /clock value it saw compares exactly with the sim's own ticks. The
messages are built by oxygen_ros.convert, next to their inverse converters
(rgb8_image_msg, joint_state_msg, trajectory_msg / trajectory_of, outcome_msg /
outcome_of); the functions here only bind the sim's conventions (a stamp in integer
nanoseconds, the arm's joint names, the base_link frame).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_ros import convert
from oxygen_ros.convert import ns_to_stamp
from oxygen_ros.msg import EpisodeOutcome

CAMERAS = ("base", "wrist")  # the sim's cameras, in the model's slot order


@dataclasses.dataclass(frozen=True)
class SimTopic:
    """One row: a key the sim loop publishes by, its default topic and message class."""

    key: str
    topic: str
    msg_class: type
    doc: str
    parameter: str | None = None  # the sim node parameter that renames it


SIM_TOPICS: tuple[SimTopic, ...] = (
    SimTopic("clock", "/clock", Clock, "sim time, one control period per tick"),
    *(
        SimTopic(
            f"camera/{c}",
            f"/camera/{c}/image_raw",
            Image,
            f"{c} camera, rgb8",
            parameter=f"{c}_camera_topic",
        )
        for c in CAMERAS
    ),
    SimTopic(
        "joint_states",
        "/joint_states",
        JointState,
        "joint_1..joint_6 (rad), gripper (0 closed..1 open)",
        parameter="joint_state_topic",
    ),
    SimTopic(
        "instruction",
        "/oxygen/instruction",
        String,
        "the episode's instruction, at its start and every second",
        parameter="instruction_topic",
    ),
    SimTopic("episode", "/sim/episode", EpisodeOutcome, "one per finished episode"),
    SimTopic("narration", "/sim/expert/narration", String, "expert narration, on change"),
    SimTopic("memory", "/sim/expert/memory", String, "expert memory line, per sub-goal"),
    SimTopic(
        "expert_trajectory",
        "/sim/expert/joint_trajectory",
        JointTrajectory,
        "the expert's command, one point per tick",
    ),
)
TRAJECTORY_TOPIC = "/oxygen/joint_trajectory"  # the default input: the node's ~/joint_trajectory


def clock_msg(time: int) -> Clock:
    return Clock(clock=ns_to_stamp(time))


def string_msg(text: str) -> String:
    return String(data=text)


def image_msg(pixels: np.ndarray, time: int, frame_id: str) -> Image:
    """uint8 H x W x 3 RGB -> sensor_msgs/Image rgb8 stamped `time` (ns)."""
    return convert.rgb8_image_msg(pixels, stamp=ns_to_stamp(time), frame_id=frame_id)


def joint_state_msg(positions: np.ndarray, time: int) -> JointState:
    """The arm's joint positions (JOINT_NAMES order) stamped `time` (ns)."""
    return convert.joint_state_msg(
        JOINT_NAMES, positions, stamp=ns_to_stamp(time), frame_id="base_link"
    )


def trajectory_msg(
    times: Sequence[float], positions: np.ndarray, time: int, names: Sequence[str] = JOINT_NAMES
) -> JointTrajectory:
    """Rows of `positions` at `times` (seconds from the stamp `time`, ns)."""
    return convert.trajectory_msg(names, positions, times, stamp=ns_to_stamp(time))
