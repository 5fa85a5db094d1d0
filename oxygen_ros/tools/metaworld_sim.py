"""`oxygen-sim --world metaworld`: Meta-World's MT10 tasks as a ROS 2 robot that a policy drives.

    oxygen-sim --world metaworld --ros-args -p tasks:=[drawer-open-v3,push-v3] -p episodes:=2 \\
        -p first_seed:=0 -p real_time_factor:=0.5 -p policy:=external|expert|hold

The Sawyer arm of Meta-World (MuJoCo) behind the topics the oxygen node reads with
config/metaworld.yaml: the corner2 camera, the 4-number state [ee_x, ee_y, ee_z, gripper]
as a JointState, the instruction; the Sawyer's joints on a second JointState. It takes
the node's ~/action_chunk (end-effector deltas and gripper effort) and runs each chunk's
rows at the env's 80 Hz from the chunk's stamp (`metaworld_loop`). It owns sim time: each
tick steps the env once and publishes /clock, paced at `real_time_factor` x wall time (a
tick that comes late runs at once; pacing restarts after each episode's reset; the
achieved factor is logged at the end, with and without the resets). Episodes end
at the benchmark's success flag or its step limit; each one's outcome is published as JSON
on /metaworld/episode and logged. With `policy: expert` the task's scripted policy
(metaworld.policies) drives through the same path, as one-row chunks; with `policy: hold`,
`random` or `blind` an image-free baseline does (oxygen_core.metaworld.baselines: doing
nothing, random motion, the scripted policy reading an average scene instead of this one).
`wait_for_peers_s` > 0 holds the first episode until an outcome subscriber and (external
policy) a node that reads the instruction and publishes chunks are there. With
`lockstep_ticks` > 0 (the node's frame period in ticks) each tick waits until the node has
finished its latest frame due, which its `stats_topic` says (`metaworld_loop.lockstep_due`):
its compute then takes no sim time, and each chunk runs the d steps after its frame that the
node's rtc_delay_steps sets (a latency sweep: oxygen-eval sweep --world metaworld).
"""

from __future__ import annotations

import collections
from typing import Any

from oxygen_core.clock import NS_PER_S
from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_ros import ros_args
from oxygen_ros.msg import ActionChunk, EngineStats
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.spin import Hosted, run_node
from oxygen_ros.tools.metaworld_loop import (
    ACTION_TOPIC,
    CONTROL_PERIOD_NS,
    POLICIES,
    STATS_TOPIC,
    TOPICS,
    LoopConfig,
    MetaWorldLoop,
    episode_order,
)
from oxygen_ros.tools.sim_host import HOST_PARAMETERS, SimHost, hosted, topic_parameters

NODE_NAME = "oxygen_metaworld_sim"

PARAMETERS: tuple[ParamDoc, ...] = (
    ParamDoc("tasks", list(MT10_TASKS), "MT10 tasks, run interleaved seed by seed."),
    ParamDoc("first_seed", 0, "Each task runs seeds first_seed .. first_seed + episodes - 1."),
    ParamDoc("episodes", 1, "Episodes per task."),
    ParamDoc(
        "policy",
        "external",
        "external: chunks from action_topic (the oxygen node); expert: the task's scripted "
        "policy drives; hold, random, blind: the image-free baselines "
        "(oxygen_core.metaworld.baselines).",
        choices=POLICIES,
    ),
    ParamDoc("camera_size", 224, "Width and height of the corner2 images.", span=(16, 1024)),
    ParamDoc("camera_rate_hz", 20.0, "Camera frames per sim second (80 Hz / a whole number)."),
    ParamDoc("action_topic", ACTION_TOPIC, "ActionChunk input (external policy)."),
    ParamDoc(
        "lockstep_ticks",
        0,
        "0: run at real_time_factor; N: the policy node takes a frame every N ticks and each "
        "tick waits until its latest frame due is done (its compute takes no sim time).",
        span=(0, 1000),
    ),
    ParamDoc("stats_topic", STATS_TOPIC, "EngineStats input: the node's frames done (lockstep)."),
    ParamDoc("lockstep_timeout_s", 10.0, "Wall seconds lockstep waits for a frame, then goes on."),
    *HOST_PARAMETERS,
    *topic_parameters(TOPICS),
)


class MetaWorldSimNode(SimHost):
    """Meta-World's loop behind the host's publishers, subscription and pacing."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, PARAMETERS, TOPICS, **kwargs)
        p = self.p
        self.cfg = LoopConfig(
            episodes=episode_order(tuple(p["tasks"]), p["first_seed"], p["episodes"]),
            policy=p["policy"],
            camera_rate_hz=p["camera_rate_hz"],
            camera_size=p["camera_size"],
            lockstep_ticks=p["lockstep_ticks"],
            lockstep_timeout_s=p["lockstep_timeout_s"],
        )
        self.loop = MetaWorldLoop(self.cfg, self, self.warn)
        if self.cfg.policy == "external":
            self.listen(ActionChunk, p["action_topic"], self.loop.receive)
        if self.cfg.lockstep_ticks:
            self.create_subscription(EngineStats, p["stats_topic"], self.loop.frame_done, 10)
        self._logged = 0  # outcomes logged so far
        self._episode = -1  # the episode the last tick ran

    def run(self) -> None:
        """Wait for peers if asked, then tick every episode at the real-time factor; log
        each outcome and the run's figures.

        Pacing restarts after each episode's reset (about 1 s of Meta-World's task
        sampling): the ticks owed for it are not run unpaced to catch up, which would give
        a policy less wall time per frame at the start of every episode."""
        try:
            if self.wait_for_peers_s > 0 and not self.wait_for_peers():
                return
            self.pace(self.loop.tick, CONTROL_PERIOD_NS / NS_PER_S, self._after_tick)
            self._log_outcomes()
            self.get_logger().info(summary(self.loop, self.wall_s))
        finally:
            self.loop.close()
            self.finished.set()

    def _after_tick(self) -> bool:
        """Log finished episodes; True when this tick reset the env (pacing restarts)."""
        self._log_outcomes()
        index = self.loop.episode.index
        reset, self._episode = index != self._episode, index
        return reset

    def _log_outcomes(self) -> None:
        for outcome in self.loop.outcomes[self._logged :]:
            self.get_logger().info(outcome_line(outcome))
        self._logged = len(self.loop.outcomes)


def outcome_line(o: dict[str, Any]) -> str:
    """One episode's outcome in a line."""
    return (
        f"episode {o['index'] + 1}/{o['episodes']} {o['task']} seed {o['seed']}: "
        f"{'success' if o['success'] else 'failure'} after {o['steps']}/"
        f"{o['max_path_length']} steps ({o['duration_s']:.2f} s of sim time, {o['wall_s']:.2f} "
        f"s wall of which {o['reset_wall_s']:.2f} s reset); chunks accepted "
        f"{o['chunks_accepted']}, rejected "
        f"{o['chunks_rejected']}; {o['held_steps']} steps held, {o['actions_clipped']} "
        f"clipped; memory {o['memory']}"
    )


def summary(loop: MetaWorldLoop, wall_s: float) -> str:
    """The run's figures: success per task, the achieved real-time factor, rejections,
    renders."""
    per_task: dict[str, list[bool]] = collections.defaultdict(list)
    rejected: collections.Counter[str] = collections.Counter()
    for o in loop.outcomes:
        per_task[o["task"]].append(o["success"])
        rejected.update(o["chunks_rejected"])
    success = ", ".join(f"{t} {sum(s)}/{len(s)}" for t, s in per_task.items())
    sim_s = loop.ticks * CONTROL_PERIOD_NS / NS_PER_S
    reset_s = sum(o["reset_wall_s"] for o in loop.outcomes)
    renders = sum(o["renders"] for o in loop.outcomes)
    render_s = sum(o["render_wall_s"] for o in loop.outcomes)
    timeouts = sum(o["lockstep_timeouts"] for o in loop.outcomes)
    return (
        f"{len(loop.outcomes)} episodes, success {success}; {sim_s:.1f} s of sim time in "
        f"{wall_s:.1f} s (real-time factor {_ratio(sim_s, wall_s):.2f}; "
        f"{_ratio(sim_s, wall_s - reset_s):.2f} without the {reset_s:.1f} s of resets); chunks "
        f"accepted {sum(o['chunks_accepted'] for o in loop.outcomes)}, rejected "
        f"{dict(rejected)}; {renders} renders at {_ratio(renders, render_s):.0f}/s"
        + (f"; {timeouts} lockstep frames timed out" if loop.cfg.lockstep_ticks else "")
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def _build() -> Hosted:
    """The node, its loop's thread started with the spin, and the exit condition."""
    return hosted(MetaWorldSimNode, MetaWorldSimNode.run, "oxygen-metaworld-loop")


def help_text() -> str:
    """`oxygen-sim --world metaworld --help`: what it is, its parameters, examples."""
    return ros_args.help_text(
        "oxygen-sim --world metaworld",
        "Meta-World's MT10 tasks (MuJoCo, the Sawyer arm) as a ROS 2 robot: it owns sim "
        "time (/clock), publishes the corner2 camera, the policy's state, the Sawyer's "
        "joints and each episode's instruction, runs the action chunks a policy publishes "
        "at 80 Hz, and publishes each episode's outcome as JSON on /metaworld/episode.",
        PARAMETERS,
        [
            "oxygen-sim --world metaworld --ros-args -p policy:=expert -p episodes:=3",
            "oxygen-sim --world metaworld --ros-args -p tasks:=[drawer-open-v3] "
            "-p wait_for_peers_s:=300.0",
        ],
        notes="Rendering is headless (MUJOCO_GL=egl unless set).",
    )


def main(args: list[str] | None = None) -> int:
    """Console script `oxygen-sim --world metaworld`: run every episode, then exit (or spin on)."""
    if ros_args.wants_help(args):
        print(help_text(), end="")
        return 0
    return run_node("oxygen-sim --world metaworld", _build, args)


if __name__ == "__main__":
    raise SystemExit(main())
