"""`oxygen-sim [--world tabletop|metaworld|aloha]`: a simulated world as a ROS 2 robot that a
policy drives over topics.

    oxygen-sim --ros-args -p families:=[pick,put,push] -p episodes:=2 -p first_seed:=0 \\
        -p real_time_factor:=0.5 -p policy:=external|expert|hold|random|blind|touch
    oxygen-sim --world metaworld --ros-args -p tasks:=[drawer-open-v3] -p policy:=expert

One host for every world: the world's binding (tools.sim.worlds) adds its own parameters
and messages, the loop (tools.sim.loop) does the rest. It owns sim time: each tick
advances it by one control period and publishes it on /clock, so a node with
use_sim_time (the oxygen node) runs on it. Ticks are paced at `real_time_factor` x wall
time: below 1 the world waits for a slow policy and the loop is judged on sim time, not on
this CPU. A tick that comes late (rendering took longer than its share) runs at once;
pacing restarts after each episode's reset (Meta-World's task sampling takes about a
second, and the ticks owed for it are not run unpaced to catch up, which would give a
policy less wall time per frame at the start of every episode). The achieved factor is
logged at the end.

Commands arrive on the world's command topics (the oxygen node's ~/joint_trajectory or
~/action_chunk) on the executor thread and are handed to the loop, which applies them at
its next tick; the loop runs on its own thread. With `policy: expert` or a baseline
nothing is subscribed: the sim runs the policy through the same path. `wait_for_peers_s`
> 0 holds the first episode until a node subscribes to the instruction topic and
publishes commands (the oxygen node does both once active), so no instruction is lost.
With `policy_enable_service` (oxygen-eval node sets the node's ~/enable) each reset is
bracketed by that switch, off before the world resets and on `reset_settle_s` later, so
no chunk computed for one episode runs in the next. With `lockstep_ticks` > 0 (the node's
frame period in ticks; a world whose commands say their frame) each tick waits until the
node has finished its latest frame due, which its `stats_topic` says
(tools.sim.lockstep). Each episode's outcome is logged as it ends, the run's figures after
the last; with `exit_when_done` the node then exits.
"""

from __future__ import annotations

import sys
from typing import Any

from oxygen_core.clock import NS_PER_S
from oxygen_core.worlds import EXTERNAL
from oxygen_ros import ros_args
from oxygen_ros.convert import stamp_to_ns
from oxygen_ros.msg import EngineStats
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.spin import Hosted, run_node
from oxygen_ros.tools.commands import world_argument, world_prog
from oxygen_ros.tools.sim.loop import RESET_SETTLE_S, SimConfig, SimLoop, episode_order
from oxygen_ros.tools.sim.worlds import ALOHA, METAWORLD, TABLETOP, Binding, binding
from oxygen_ros.tools.sim_host import HOST_PARAMETERS, SimHost, hosted, topic_parameters

STATS_TOPIC = "/oxygen/stats"  # lockstep's: the oxygen node's ~/stats, one per frame done


def parameters(world: Binding) -> tuple[ParamDoc, ...]:
    """The host's parameters for `world`: its episodes and policy, its own, the reset
    bracket, lockstep, pacing and topics."""
    return (
        world.names_parameter,
        ParamDoc("first_seed", 0, "Each one runs seeds first_seed .. first_seed + episodes - 1."),
        ParamDoc("episodes", 1, "Episodes per family or task."),
        ParamDoc(
            "policy",
            EXTERNAL,
            f"external: commands from {world.command.name} (the oxygen node); expert: the "
            "scripted expert drives; hold, random, blind: that image-free baseline drives.",
            choices=(EXTERNAL, *world.world_class.sim_policies),
        ),
        *world.parameters,
        world.command,
        ParamDoc(
            "command_delay_steps",
            0,
            "Control periods a received command waits before the controller takes it (a "
            "link and actuation latency; 0: at the next tick).",
        ),
        ParamDoc(
            "policy_enable_service",
            "",
            "External policy: its std_srvs/SetBool switch (the oxygen node's ~/enable, e.g. "
            "/oxygen/enable), turned off before each reset and on after reset_settle_s; "
            "empty: no switch, commands in flight at a reset may run in the next episode.",
        ),
        ParamDoc(
            "reset_settle_s",
            RESET_SETTLE_S,
            "With policy_enable_service: sim seconds the new world's sensors go out, the "
            "world still, before the policy is switched on.",
        ),
        ParamDoc(
            "lockstep_ticks",
            0,
            "0: run at real_time_factor; N: the policy node takes a frame every N ticks and "
            "each tick waits until its latest frame due is done (its compute takes no sim "
            "time).",
            span=(0, 1000),
        ),
        ParamDoc("stats_topic", STATS_TOPIC, "EngineStats input: the node's frames done."),
        ParamDoc("lockstep_timeout_s", 10.0, "Wall seconds lockstep waits for a frame."),
        *HOST_PARAMETERS,
        *topic_parameters(world.topics),
    )


class SimNode(SimHost):
    """A world's loop behind the host's publishers, subscriptions and pacing."""

    def __init__(self, world: str, **kwargs: Any) -> None:
        self.binding = binding(world)
        super().__init__(
            self.binding.node_name, parameters(self.binding), self.binding.topics, **kwargs
        )
        p = self.p
        external = p["policy"] == EXTERNAL
        switched = external and bool(p["policy_enable_service"])
        self.world = self.binding.world(p)
        self.cfg = SimConfig(
            episodes=episode_order(
                tuple(p[self.binding.names_parameter.name]), p["first_seed"], p["episodes"]
            ),
            policy=p["policy"],
            camera_rate_hz=p["camera_rate_hz"],
            command_delay_steps=p["command_delay_steps"],
            reset_ticks=self._reset_ticks(p) if switched else 0,
            lockstep_ticks=p["lockstep_ticks"],
            lockstep_timeout_s=p["lockstep_timeout_s"],
        )
        switch = self.switched_by(p["policy_enable_service"]) if switched else None
        self.loop = SimLoop(self.world, self.cfg, self, self.warn, switch)
        if external:
            self.listen(self.binding.command_class, p[self.binding.command.name], self.loop.receive)
        if self.cfg.lockstep_ticks:
            self.create_subscription(EngineStats, p["stats_topic"], self._frame_done, 10)
        self._logged = 0  # outcomes logged so far
        self._episode = -1  # the episode the last tick ran

    def _reset_ticks(self, p: dict[str, Any]) -> int:
        """The reset bracket in ticks: at least one, the switch stays off while the world
        resets."""
        if p["reset_settle_s"] < 0:
            raise ValueError(f"reset_settle_s must be >= 0, got {p['reset_settle_s']}")
        return max(1, round(p["reset_settle_s"] * NS_PER_S / self.world.period_ns))

    def _frame_done(self, msg: EngineStats) -> None:
        self.loop.frame_done(stamp_to_ns(msg.header.stamp), msg.frame)

    def run(self) -> None:
        """Wait for peers if asked, then tick every episode at the real-time factor; log
        each outcome and the run's figures."""
        try:
            if self.wait_for_peers_s > 0 and not self.wait_for_peers():
                return
            self.pace(self.loop.tick, self.world.period_ns / NS_PER_S, self._after_tick)
            self._log_outcomes()
            self.get_logger().info(self.summary())
        finally:
            self.loop.close()
            self.finished.set()

    def summary(self) -> str:
        """The run in a few lines: episodes, sim time against wall time, the world's own."""
        outcomes, wall_s = self.loop.outcomes, self.wall_s
        sim_s = self.loop.ticks * self.world.period_ns / NS_PER_S
        return (
            f"{len(outcomes)} episodes; {sim_s:.1f} s of sim time in {wall_s:.1f} s "
            f"(real-time factor {sim_s / wall_s if wall_s > 0 else 0:.2f}); "
            f"{self.binding.summary(outcomes)}"
        )

    def _after_tick(self) -> bool:
        """Log finished episodes; True when this tick reset the world (pacing restarts)."""
        self._log_outcomes()
        index = self.loop.episode.index
        reset, self._episode = index != self._episode, index
        return reset

    def _log_outcomes(self) -> None:
        for outcome in self.loop.outcomes[self._logged :]:
            self.get_logger().info(self.binding.outcome_line(outcome))
        self._logged = len(self.loop.outcomes)


def help_text(world: str) -> str:
    """`oxygen-sim --world W --help`: what it is, its parameters, examples."""
    b = binding(world)
    prog = world_prog("oxygen-sim", world)
    return ros_args.help_text(prog, b.summary_doc, parameters(b), list(b.examples))


def run(world: str, args: list[str] | None) -> int:
    """Run every episode of `world`, then exit (or spin on)."""
    prog = world_prog("oxygen-sim", world)
    if ros_args.wants_help(args):
        print(help_text(world), end="")
        return 0

    def build() -> Hosted:
        return hosted(lambda: SimNode(world), SimNode.run, f"oxygen-sim-{world}")

    return run_node(prog, build, args)


def tabletop(args: list[str] | None = None) -> int:
    """`oxygen-sim` (the tabletop)."""
    return run(TABLETOP, args)


def metaworld(args: list[str] | None = None) -> int:
    """`oxygen-sim --world metaworld`."""
    return run(METAWORLD, args)


def aloha(args: list[str] | None = None) -> int:
    """`oxygen-sim --world aloha`."""
    return run(ALOHA, args)


def main(args: list[str] | None = None) -> int:
    """`python -m oxygen_ros.tools.sim.node [--world W] --ros-args ...` (evaluations start
    the sim so); `args` a full argv, program name first (default sys.argv)."""
    argv = list(sys.argv if args is None else args)
    world, rest = world_argument(argv[1:])
    return run(world, [argv[0], *rest])


if __name__ == "__main__":
    raise SystemExit(main())
