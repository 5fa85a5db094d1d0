"""`oxygen-sim`: the simulated tabletop as a ROS 2 robot that a policy drives over topics.

    oxygen-sim --ros-args -p families:=[pick,put,push] -p episodes:=2 -p first_seed:=0 \\
        -p real_time_factor:=0.5 -p policy:=external|expert|hold|random|blind

It owns sim time: each tick of `loop.SimLoop` advances it by one control period and
publishes it on /clock, so a node with use_sim_time (the oxygen node) runs on it. Ticks are
paced at `real_time_factor` x wall time: below 1 the world waits for a slow policy and
the loop is judged on sim time, not on this CPU. A tick that comes late (rendering took
longer than its share) runs at once, and the achieved factor is logged at the end.

Trajectories arrive on `trajectory_topic` (the oxygen node's ~/joint_trajectory) on the
executor thread and are handed to the loop, which applies them at its next tick; the loop
runs on its own thread. With `policy: expert` nothing is subscribed: the scripted expert
drives through the same executor path; so does a baseline (hold, random, blind: chunks of
`baseline_horizon` rows every `baseline_execute_steps` ticks, `loop`). `wait_for_peers_s`
> 0 holds the first episode until a node subscribes to the instruction topic and
publishes trajectories (the oxygen node does both once active), so no instruction is
lost. With `policy_enable_service` (oxygen-eval node sets the node's ~/enable) each reset
is bracketed by that switch, off before the world resets and on `reset_settle_s` later
(`loop`, step 1), so no chunk computed for one episode runs in the next, and the node
starts each episode afresh. After the last episode the node
logs the run's figures (success per family, seams, rejections, points over the arm's
limits, renders per second) and, with `exit_when_done`, exits.
"""

from __future__ import annotations

import collections

from trajectory_msgs.msg import JointTrajectory

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim.executor import DEFAULT_CONTROLLER, LimitViolations
from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.seam import SeamSummary
from oxygen_core.sim.tasks import FAMILIES
from oxygen_ros import ros_args
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.spin import Hosted, run_node
from oxygen_ros.tools.sim.loop import POLICIES, SimConfig, SimLoop, episode_order
from oxygen_ros.tools.sim.messages import SIM_TOPICS, TRAJECTORY_TOPIC
from oxygen_ros.tools.sim_host import HOST_PARAMETERS, SimHost, hosted, topic_parameters

NODE_NAME = "oxygen_sim"

PARAMETERS: tuple[ParamDoc, ...] = (
    ParamDoc("families", list(FAMILIES), "Task families, run interleaved seed by seed."),
    ParamDoc("first_seed", 0, "Each family runs seeds first_seed .. first_seed + episodes - 1."),
    ParamDoc("episodes", 1, "Episodes per family."),
    ParamDoc(
        "policy",
        "external",
        "external: trajectories from trajectory_topic (the oxygen node); expert: the "
        "scripted expert drives; hold, random, blind: that image-free baseline drives.",
        choices=POLICIES,
    ),
    ParamDoc("baseline_execute_steps", 2, "A baseline's chunk every this many ticks."),
    ParamDoc("baseline_horizon", 10, "Rows in a baseline's chunk."),
    ParamDoc("control_rate_hz", 20.0, "Ticks of sim time per second (one control period each)."),
    ParamDoc("camera_size", 224, "Width and height of the rendered camera images."),
    ParamDoc("camera_rate_hz", 10.0, "Camera frames per sim second (a divisor of the rate)."),
    ParamDoc(
        "command_delay_steps",
        0,
        "Control periods a received trajectory waits before the controller takes it (a "
        "link and actuation latency; 0: at the next tick).",
    ),
    ParamDoc(
        "controller",
        DEFAULT_CONTROLLER,
        "Model of the trajectory controller: jtc (joint_trajectory_controller as released "
        "for Jazzy and Kilted, with a velocity state interface) or jtc_replacement "
        "(take-over at the stamp, as master's trajectory replacement). The oxygen node's "
        "controller_model must name the same one.",
    ),
    ParamDoc("trajectory_topic", TRAJECTORY_TOPIC, "JointTrajectory input (external policy)."),
    ParamDoc(
        "policy_enable_service",
        "",
        "External policy: its std_srvs/SetBool switch (the oxygen node's ~/enable, e.g. "
        "/oxygen/enable), turned off before each reset and on after reset_settle_s; empty: "
        "no switch, trajectories in flight at a reset may run in the next episode.",
    ),
    ParamDoc(
        "reset_settle_s",
        0.5,
        "With policy_enable_service: sim seconds the new world's sensors go out, the world "
        "still, before the policy is switched on.",
    ),
    *HOST_PARAMETERS,
    *topic_parameters(SIM_TOPICS),
)


class SimNode(SimHost):
    """The tabletop's loop behind the host's publishers, subscription and pacing."""

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, PARAMETERS, SIM_TOPICS, **kwargs)
        p = self.p
        switched = p["policy"] == "external" and bool(p["policy_enable_service"])
        if p["reset_settle_s"] < 0:
            raise ValueError(f"reset_settle_s must be >= 0, got {p['reset_settle_s']}")
        # at least one tick: the switch stays off while the world resets
        reset_ticks = max(1, round(p["reset_settle_s"] * p["control_rate_hz"]))
        self.cfg = SimConfig(
            episodes=episode_order(tuple(p["families"]), p["first_seed"], p["episodes"]),
            policy=p["policy"],
            control_rate_hz=p["control_rate_hz"],
            camera_rate_hz=p["camera_rate_hz"],
            camera_size=p["camera_size"],
            command_delay_steps=p["command_delay_steps"],
            controller=p["controller"],
            baseline_execute_steps=p["baseline_execute_steps"],
            baseline_horizon=p["baseline_horizon"],
            reset_ticks=reset_ticks if switched else 0,
        )
        switch = self.switched_by(p["policy_enable_service"]) if switched else None
        self.loop = SimLoop(self.cfg, self, self.warn, switch)
        if self.cfg.policy == "external":
            self.listen(JointTrajectory, p["trajectory_topic"], self.loop.receive)

    def run(self) -> None:
        """Wait for the policy if asked, then tick every episode at the real-time factor."""
        try:
            if self.wait_for_peers_s > 0 and not self.wait_for_peers():
                return
            self.pace(self.loop.tick, self.cfg.period_ns / NS_PER_S)
            self.get_logger().info(summary(self.loop, self.wall_s))
        finally:
            self.finished.set()


def summary(loop: SimLoop, wall_s: float) -> str:
    """The run's figures in a few lines (success per family, seams, rejections, renders)."""
    outcomes = loop.outcomes
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
    sim_s = loop.ticks * loop.cfg.period_ns / NS_PER_S
    renders = sum(o.renders for o in outcomes)
    render_s = sum(o.render_wall_s for o in outcomes)
    return (
        f"{len(outcomes)} episodes, success {success}; {sim_s:.1f} s of sim time in "
        f"{wall_s:.1f} s (real-time factor {sim_s / wall_s if wall_s else 0:.2f}); "
        f"trajectories accepted {sum(o.accepted for o in outcomes)}, rejected "
        f"{dict(rejected)}; seams {seams.seams}, jump mean {seams.jump_mean:.4f} max "
        f"{seams.jump_max:.4f} (arm {seams.arm_jump_mean:.4f}, gripper "
        f"{seams.gripper_jump_mean:.4f}), jerk mean {seams.jerk_mean:.1f} max "
        f"{seams.jerk_max:.1f}; points over the arm's limits: {limits.position} position, "
        f"{limits.velocity} velocity (in {limits.trajectories} trajectories); "
        f"{renders} renders at {renders / render_s if render_s else 0:.0f}/s"
    )


def _build() -> Hosted:
    """The sim node, its loop's thread started with the spin, and the exit condition."""
    return hosted(SimNode, SimNode.run, "oxygen-sim-loop")


def help_text() -> str:
    """`oxygen-sim --help`: what it is, its parameters (PARAMETERS), examples."""
    return ros_args.help_text(
        "oxygen-sim",
        "The simulated tabletop as a ROS 2 robot: it owns sim time (/clock), publishes "
        "cameras, joint states and each episode's instruction, executes the trajectories "
        "a policy publishes, and logs the run's figures after the last episode.",
        PARAMETERS,
        [
            "oxygen-sim --ros-args -p families:=[pick,put,push] -p episodes:=2 "
            "-p policy:=expert -p real_time_factor:=2.0",
            "oxygen-sim --ros-args -p policy:=external -p wait_for_peers_s:=300.0",
        ],
    )


def main(args: list[str] | None = None) -> int:
    """Console script `oxygen-sim`: run every episode, then exit (or spin on)."""
    if ros_args.wants_help(args):
        print(help_text(), end="")
        return 0
    return run_node("oxygen-sim", _build, args)


if __name__ == "__main__":
    raise SystemExit(main())
