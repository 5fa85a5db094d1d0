"""ALOHA's binding (tools.sim.worlds): the bimanual ViperX as the ROS robot config/aloha.yaml
drives, its topics and messages.

The sim publishes what the robot's drivers would: one JointState of the 14 state joints
(the params' joint_names: rad and the fingers in m) and the two gripper joints (rad;
`PUBLISHED_NAMES`), and the top and wrist cameras on the params' camera_topics. It
subscribes to the four controllers' topics of config/aloha.yaml
(config/ros2_control/aloha_controllers.yaml); their messages share one inbox and each goes
to the controller whose joints it names (on the robot a controller refuses another's
joints, so a message sent to the wrong controller's topic runs here as if sent to the
right one). The outcome goes out as std_msgs/String JSON:
oxygen_ros/EpisodeOutcome holds the tabletop's fields.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from oxygen_core.aloha.env import TASKS
from oxygen_core.aloha.episode import (
    ACTION_NAMES,
    CONTROLLERS,
    PUBLISHED_NAMES,
    Aloha,
    AlohaEpisode,
    AlohaOutcome,
)
from oxygen_core.controller.shaping import Shaped
from oxygen_core.sim.executor import LimitViolations, Trajectory
from oxygen_core.train.records import ALOHA_DART
from oxygen_ros import convert
from oxygen_ros.convert import ns_to_stamp
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.tools.sim import messages
from oxygen_ros.tools.sim.worlds import expert_noise
from oxygen_ros.tools.sim_host import INSTRUCTION, SimTopic

# config/aloha.yaml's camera_topics, in the preset's slot order (top, left and right wrist).
CAMERA_TOPICS = {
    "top": "/cam_high/image_raw",
    "left_wrist": "/cam_left_wrist/image_raw",
    "right_wrist": "/cam_right_wrist/image_raw",
}

TOPICS: tuple[SimTopic, ...] = (
    SimTopic("clock", "/clock", Clock, "sim time, one env step (20 ms) per tick"),
    *(
        SimTopic(
            f"camera/{camera}",
            topic,
            Image,
            f"{camera} camera, rgb8, 4:3",
            parameter=f"{camera}_camera_topic",
        )
        for camera, topic in CAMERA_TOPICS.items()
    ),
    SimTopic(
        "joint_states",
        "/joint_states",
        JointState,
        "each arm's six joints and gripper joint (rad) and left finger (m), with velocities",
        parameter="joint_state_topic",
    ),
    INSTRUCTION,
    SimTopic("episode", "/aloha/episode", String, "one JSON outcome per finished episode"),
    SimTopic("narration", "/aloha/narration", String, "the task's phase, on change"),
    SimTopic("memory", "/aloha/memory", String, "a line per reward level reached"),
    SimTopic(
        "expert_trajectory",
        "/aloha/expert/joint_trajectory",
        JointTrajectory,
        "the scripted expert's targets, every joint, one point per tick",
    ),
)


class AlohaBinding:
    """ALOHA's messages and node parameters."""

    name = "aloha"
    world_class = Aloha
    node_name = "oxygen_aloha_sim"
    topics = TOPICS
    names_parameter = ParamDoc("tasks", list(TASKS), "gym-aloha tasks, run interleaved.")
    parameters = (
        ParamDoc(
            "camera_size",
            224,
            "Width of the camera images; their height is 3/4 of it (gym-aloha's 640 x 480).",
            span=(16, 1024),
        ),
        ParamDoc("camera_rate_hz", 10.0, "Camera frames per sim second (50 Hz / a whole number)."),
        ParamDoc(
            "expert_noise",
            0.0,
            "policy expert: sigma (rad) of DART bursts on the arm joints' targets (training "
            "data; 0: none).",
        ),
    )
    command = ParamDoc(
        "controller_topics",
        [c.topic for c in CONTROLLERS],
        "JointTrajectory inputs (external policy): config/aloha.yaml's controllers' topics.",
    )
    command_class = JointTrajectory
    shown_key = "expert_trajectory"
    frames_known = False
    summary_doc = (
        "gym-aloha's bimanual ALOHA (MuJoCo, two ViperX arms) as the ROS 2 robot "
        "config/aloha.yaml drives: it owns sim time (/clock), publishes the top and wrist "
        "cameras, /joint_states and each episode's instruction, runs the JointTrajectory "
        "messages of its four controllers (two arms, two grippers) as ros2_control's "
        "joint_trajectory_controller does at 50 Hz, and publishes each episode's outcome as "
        "JSON on /aloha/episode. Rendering is headless (MUJOCO_GL=egl unless set)."
    )
    examples = (
        "oxygen-sim --world aloha --ros-args -p policy:=expert -p episodes:=3",
        "oxygen-sim --world aloha --ros-args -p tasks:=[insertion] -p wait_for_peers_s:=300.0",
    )

    def world(self, p: dict[str, Any]) -> Aloha:
        return Aloha(p["camera_size"], expert_noise(p, ALOHA_DART))

    def sensor_messages(self, sim: AlohaEpisode, t_ns: int) -> Iterable[tuple[str, Any]]:
        positions, velocities = sim.published()
        yield (
            "joint_states",
            convert.joint_state_msg(
                PUBLISHED_NAMES,
                positions,
                stamp=ns_to_stamp(t_ns),
                frame_id="",
                velocities=velocities,
            ),
        )

    def image_message(self, camera: str, pixels: np.ndarray, t_ns: int) -> tuple[str, Any]:
        return f"camera/{camera}", messages.image_msg(
            pixels, t_ns, f"{camera}_camera_optical_frame"
        )

    def command_msg(self, command: Shaped, t_ns: int) -> JointTrajectory:
        return convert.shaped_trajectory_msg(ACTION_NAMES, command)

    def command_of(self, msg: JointTrajectory, start_ns: int) -> Trajectory:
        return messages.trajectory_of(msg, start_ns)

    def command_frame(self, msg: JointTrajectory) -> int | None:
        return None  # a JointTrajectory does not say which frame it came from

    def outcome_msg(self, outcome: AlohaOutcome) -> String:
        return String(data=json.dumps(dataclasses.asdict(outcome)))

    def outcome_line(self, o: AlohaOutcome) -> str:
        how = f"success at step {o.success_step}" if o.success else "failure (step limit)"
        return (
            f"episode {o.index + 1}/{o.episodes} {o.task} seed {o.seed}: {how}, reward "
            f"{o.reward}, {o.steps}/{o.max_steps} steps, {o.wall_s:.2f} s wall; trajectories "
            f"accepted {o.accepted}, rejected {o.rejected}; memory {list(o.memory)}"
        )

    def summary(self, outcomes: Sequence[AlohaOutcome]) -> str:
        """Success per task, rejections, points over the joints' ranges, trajectories
        taken over late, renders."""
        per_task: dict[str, list[bool]] = collections.defaultdict(list)
        rejected: collections.Counter[str] = collections.Counter()
        for o in outcomes:
            per_task[o.task].append(o.success)
            rejected.update(o.rejected)
        success = ", ".join(f"{t} {sum(s)}/{len(s)}" for t, s in per_task.items())
        limits = sum(
            (LimitViolations(**v) for o in outcomes for v in o.limits.values()), LimitViolations()
        )
        late = sum(n for o in outcomes for n in o.late_takeovers.values())
        renders = sum(o.renders for o in outcomes)
        render_s = sum(o.render_wall_s for o in outcomes)
        return (
            f"success {success}; trajectories accepted {sum(o.accepted for o in outcomes)}, "
            f"rejected {dict(rejected)}; points outside the joints' ranges: {limits.position} "
            f"(in {limits.trajectories} trajectories); taken over with a point already due: "
            f"{late}; {renders} renders at "
            f"{renders / render_s if render_s else 0:.0f}/s"
        )


BINDING = AlohaBinding()
