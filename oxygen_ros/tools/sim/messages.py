"""The simulated robot's topics and the ROS messages it sends and receives.

`SIM_TOPICS` is the one table of what the sim publishes: the sensor topics the oxygen node
reads (cameras, joint states, instruction; their names are parameters, because they must
match the node's params file) and the sim's own topics under /sim (episode outcomes and
the scripted expert's targets), which nothing needs to rename. The sim node's publishers
and `oxygen-record`'s bag are both built from it, so a live run and a recording carry
the same topics and the same messages, built by the same functions below.

Stamps are integer nanoseconds of sim time (`convert.ns_to_stamp`), so a node's trajectory
stamped with the /clock value it saw compares exactly with the sim's own ticks. Sensor
messages are built by oxygen_ros.convert, next to their inverse converters (rgb8_image_msg,
joint_state_msg, trajectory_msg); the functions here bind the sim's conventions (a stamp in
integer nanoseconds, the arm's joint names, the base_link frame). What only the sim speaks
lives here, not in the node's conversions: a received JointTrajectory as the executor's
`Trajectory` (trajectory_of) and an episode's `Outcome` both ways (outcome_msg /
outcome_of), so the robot's process never loads oxygen_core.sim.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Header, String
from trajectory_msgs.msg import JointTrajectory

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.episode import CAMERAS
from oxygen_core.sim.executor import LimitViolations, Trajectory
from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.seam import SeamSummary
from oxygen_core.sim.tasks import Contacts
from oxygen_ros import convert
from oxygen_ros.convert import ns_to_stamp, stamp_to_ns
from oxygen_ros.msg import EpisodeOutcome
from oxygen_ros.tools.sim_host import INSTRUCTION, SimTopic

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
    INSTRUCTION,
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


def joint_state_msg(
    positions: np.ndarray, time: int, velocities: np.ndarray | None = None
) -> JointState:
    """The arm's joint positions (and velocities; JOINT_NAMES order) stamped `time` (ns)."""
    return convert.joint_state_msg(
        JOINT_NAMES,
        positions,
        stamp=ns_to_stamp(time),
        frame_id="base_link",
        velocities=velocities,
    )


def trajectory_msg(
    times: Sequence[float], positions: np.ndarray, time: int, names: Sequence[str] = JOINT_NAMES
) -> JointTrajectory:
    """Rows of `positions` at `times` (seconds from the stamp `time`, ns)."""
    return convert.trajectory_msg(names, positions, times, stamp=ns_to_stamp(time))


def trajectory_of(msg: JointTrajectory, start_ns: int) -> Trajectory:
    """A received JointTrajectory for the sim's executor, starting at `start_ns` (the caller
    maps a zero stamp to now). Values are passed as they are: the executor judges them."""
    return Trajectory(
        joint_names=tuple(msg.joint_names),
        start=start_ns / NS_PER_S,
        times=[stamp_to_ns(p.time_from_start) / NS_PER_S for p in msg.points],
        positions=[list(p.positions) for p in msg.points],
        velocities=_carried(msg, "velocities"),
        accelerations=_carried(msg, "accelerations"),
    )


def _carried(msg: JointTrajectory, field: str) -> list[list[float]] | None:
    """A per-point field when any point carries it (a point without it is then the
    executor's shape error to refuse), else None."""
    rows = [list(getattr(p, field)) for p in msg.points]
    return rows if any(rows) else None


def outcome_msg(o: Outcome) -> EpisodeOutcome:
    """A finished sim episode -> oxygen_ros/EpisodeOutcome, stamped at its end."""
    s = o.seams
    return EpisodeOutcome(
        header=Header(stamp=ns_to_stamp(o.end_ns)),
        index=o.index,
        episodes=o.episodes,
        family=o.family,
        seed=int(o.seed),
        instruction=o.instruction,
        policy=o.policy,
        success=bool(o.success),
        grasped=bool(o.contacts.grasped),
        release_height=float(o.contacts.release_height),
        finger_pushes=o.contacts.finger_pushes,
        object_pushes=o.contacts.object_pushes,
        off_table=o.contacts.off_table,
        others_moved=float(o.contacts.others_moved),
        start=ns_to_stamp(o.start_ns),
        duration_s=float(o.duration_s),
        time_limit_s=float(o.time_limit_s),
        wall_s=float(o.wall_s),
        steps=o.steps,
        trajectories_accepted=o.accepted,
        trajectories_rejected=sum(o.rejected.values()),
        reject_reasons=list(o.rejected),
        reject_counts=list(o.rejected.values()),
        seams=s.seams,
        seam_jerks=s.jerks,
        seam_jump_mean=s.jump_mean,
        seam_jump_max=s.jump_max,
        seam_jerk_mean=s.jerk_mean,
        seam_jerk_max=s.jerk_max,
        seam_arm_jump_mean=s.arm_jump_mean,
        seam_arm_jump_max=s.arm_jump_max,
        seam_gripper_jump_mean=s.gripper_jump_mean,
        seam_gripper_jump_max=s.gripper_jump_max,
        limit_trajectories=o.limits.trajectories,
        limit_position_points=o.limits.position,
        limit_velocity_steps=o.limits.velocity,
        renders=o.renders,
        render_wall_s=o.render_wall_s,
        narration=list(o.narration),
        memory=list(o.memory),
    )


def outcome_of(msg: EpisodeOutcome) -> Outcome:
    """The message back into an Outcome (the evaluation's side)."""
    return Outcome(
        index=msg.index,
        episodes=msg.episodes,
        family=msg.family,
        seed=msg.seed,
        instruction=msg.instruction,
        policy=msg.policy,
        success=msg.success,
        contacts=Contacts(
            grasped=msg.grasped,
            release_height=msg.release_height,
            finger_pushes=msg.finger_pushes,
            object_pushes=msg.object_pushes,
            off_table=msg.off_table,
            others_moved=msg.others_moved,
        ),
        start_ns=stamp_to_ns(msg.start),
        end_ns=stamp_to_ns(msg.header.stamp),
        duration_s=msg.duration_s,
        time_limit_s=msg.time_limit_s,
        wall_s=msg.wall_s,
        steps=msg.steps,
        accepted=msg.trajectories_accepted,
        rejected=dict(zip(msg.reject_reasons, msg.reject_counts, strict=True)),
        seams=SeamSummary(
            seams=msg.seams,
            jerks=msg.seam_jerks,
            jump_mean=msg.seam_jump_mean,
            jump_max=msg.seam_jump_max,
            jerk_mean=msg.seam_jerk_mean,
            jerk_max=msg.seam_jerk_max,
            arm_jump_mean=msg.seam_arm_jump_mean,
            arm_jump_max=msg.seam_arm_jump_max,
            gripper_jump_mean=msg.seam_gripper_jump_mean,
            gripper_jump_max=msg.seam_gripper_jump_max,
        ),
        limits=LimitViolations(
            msg.limit_trajectories, msg.limit_position_points, msg.limit_velocity_steps
        ),
        renders=msg.renders,
        render_wall_s=msg.render_wall_s,
        narration=tuple(msg.narration),
        memory=tuple(msg.memory),
    )
