"""The tabletop's binding (tools.sim.worlds): the arm as a ROS robot of JointTrajectory
commands, its topics and messages (tools.sim.messages) and its node parameters."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from trajectory_msgs.msg import JointTrajectory

from oxygen_core.controller.shaping import Shaped
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.episode import Tabletop, TabletopEpisode, TabletopSettings
from oxygen_core.sim.executor import DEFAULT_CONTROLLER, LimitViolations, Trajectory
from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.seam import SeamSummary
from oxygen_core.sim.tasks import FAMILIES
from oxygen_ros import convert
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.tools.sim import messages as m


class TabletopBinding:
    """The tabletop's messages and node parameters."""

    name = "tabletop"
    world_class = Tabletop
    node_name = "oxygen_sim"
    topics = m.SIM_TOPICS
    names_parameter = ParamDoc("families", list(FAMILIES), "Task families, run interleaved.")
    parameters = (
        ParamDoc(
            "control_rate_hz", 20.0, "Ticks of sim time per second (one control period each)."
        ),
        ParamDoc("camera_size", 224, "Width and height of the rendered camera images."),
        ParamDoc("camera_rate_hz", 10.0, "Camera frames per sim second (a divisor of the rate)."),
        ParamDoc(
            "controller",
            DEFAULT_CONTROLLER,
            "Model of the trajectory controller: jtc (joint_trajectory_controller as released "
            "for Jazzy and Kilted, with a velocity state interface) or jtc_replacement "
            "(take-over at the stamp, as master's trajectory replacement). The oxygen node's "
            "controller_model must name the same one.",
        ),
        ParamDoc("baseline_execute_steps", 2, "A baseline's chunk every this many ticks."),
        ParamDoc("baseline_horizon", 10, "Rows in a baseline's chunk."),
    )
    command = ParamDoc(
        "trajectory_topic", m.TRAJECTORY_TOPIC, "JointTrajectory input (external policy)."
    )
    command_class = JointTrajectory
    shown_key = "expert_trajectory"
    frames_known = False
    summary_doc = (
        "The simulated tabletop as a ROS 2 robot: it owns sim time (/clock), publishes "
        "cameras, joint states and each episode's instruction, executes the trajectories "
        "a policy publishes, and logs the run's figures after the last episode."
    )
    examples = (
        "oxygen-sim --ros-args -p families:=[pick,put,push] -p episodes:=2 "
        "-p policy:=expert -p real_time_factor:=2.0",
        "oxygen-sim --ros-args -p policy:=external -p wait_for_peers_s:=300.0",
    )

    def world(self, p: dict[str, Any]) -> Tabletop:
        return Tabletop(
            TabletopSettings(
                control_rate_hz=p["control_rate_hz"],
                camera_size=p["camera_size"],
                controller=p["controller"],
                baseline_execute_steps=p["baseline_execute_steps"],
                baseline_horizon=p["baseline_horizon"],
            )
        )

    def sensor_messages(self, sim: TabletopEpisode, t_ns: int) -> Iterable[tuple[str, Any]]:
        yield "joint_states", m.joint_state_msg(sim.world.joints, t_ns, sim.velocity)

    def image_message(self, camera: str, pixels: np.ndarray, t_ns: int) -> tuple[str, Any]:
        return f"camera/{camera}", m.image_msg(pixels, t_ns, f"{camera}_camera_optical_frame")

    def command_msg(self, command: Shaped, t_ns: int) -> JointTrajectory:
        return convert.shaped_trajectory_msg(JOINT_NAMES, command)

    def command_of(self, msg: JointTrajectory, start_ns: int) -> Trajectory:
        return m.trajectory_of(msg, start_ns)

    def command_frame(self, msg: JointTrajectory) -> int | None:
        return None  # a JointTrajectory does not say which frame it came from

    def outcome_msg(self, outcome: Outcome) -> Any:
        return m.outcome_msg(outcome)

    def outcome_line(self, o: Outcome) -> str:
        how = f"success after {o.duration_s:.2f} s" if o.success else "failure (time limit)"
        return (
            f"episode {o.index + 1}/{o.episodes} {o.family} seed {o.seed}: {how}, "
            f"{o.steps} steps, {o.wall_s:.2f} s wall; trajectories accepted {o.accepted}, "
            f"rejected {o.rejected}"
        )

    def summary(self, outcomes: Sequence[Outcome]) -> str:
        """Success per family, seams, rejections, points over the arm's limits, renders."""
        per_family: dict[str, list[Outcome]] = collections.defaultdict(list)
        for o in outcomes:
            per_family[o.family].append(o)
        success = ", ".join(
            f"{f} {sum(o.success for o in os)}/{len(os)}" for f, os in per_family.items()
        )
        seams = SeamSummary.pooled([o.seams for o in outcomes])
        rejected: collections.Counter[str] = collections.Counter()
        for o in outcomes:
            rejected.update(o.rejected)
        limits = sum((o.limits for o in outcomes), LimitViolations())
        renders = sum(o.renders for o in outcomes)
        render_s = sum(o.render_wall_s for o in outcomes)
        return (
            f"success {success}; trajectories accepted {sum(o.accepted for o in outcomes)}, "
            f"rejected {dict(rejected)}; seams {seams.seams}, jump mean {seams.jump_mean:.4f} "
            f"max {seams.jump_max:.4f} (arm {seams.arm_jump_mean:.4f}, gripper "
            f"{seams.gripper_jump_mean:.4f}), jerk mean {seams.jerk_mean:.1f} max "
            f"{seams.jerk_max:.1f}; points over the arm's limits: {limits.position} position, "
            f"{limits.velocity} velocity (in {limits.trajectories} trajectories); "
            f"{renders} renders at {renders / render_s if render_s else 0:.0f}/s"
        )


BINDING = TabletopBinding()
