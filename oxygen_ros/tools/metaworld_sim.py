"""`oxygen-metaworld-sim`: Meta-World's MT10 tasks as a ROS 2 robot that a policy drives.

    oxygen-metaworld-sim --ros-args -p tasks:=[drawer-open-v3,push-v3] -p episodes:=2 \\
        -p seed:=0 -p real_time_factor:=0.5 -p policy:=external|expert

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
(metaworld.policies) drives through the same path, as one-row chunks. `wait_for_peers_s`
> 0 holds the first episode until an outcome subscriber and (external policy) a node that
reads the instruction and publishes chunks are there.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_ros import ros_args
from oxygen_ros.msg import ActionChunk
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.spin import CannotStart, Hosted, run_node
from oxygen_ros.tools.metaworld_loop import (
    ACTION_TOPIC,
    CONTROL_PERIOD_NS,
    POLICIES,
    TOPICS,
    LoopConfig,
    MetaWorldLoop,
    episode_order,
)

NODE_NAME = "oxygen_metaworld_sim"
# Reliable writers serve reliable and best-effort readers alike (the oxygen node reads
# sensors best effort, instructions reliably).
QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
_POLL_S = 0.05

PARAMETERS: tuple[ParamDoc, ...] = (
    ParamDoc("tasks", list(MT10_TASKS), "MT10 tasks, run interleaved seed by seed."),
    ParamDoc("seed", 0, "First seed; each task runs seeds seed .. seed + episodes - 1."),
    ParamDoc("episodes", 1, "Episodes per task."),
    ParamDoc(
        "policy",
        "external",
        "external: chunks from action_topic (the oxygen node); expert: the task's scripted "
        "policy drives.",
        choices=POLICIES,
    ),
    ParamDoc("real_time_factor", 1.0, "Sim seconds per wall second (below 1: slower)."),
    ParamDoc("camera_size", 224, "Width and height of the corner2 images.", span=(16, 1024)),
    ParamDoc("camera_rate_hz", 20.0, "Camera frames per sim second (80 Hz / a whole number)."),
    ParamDoc("action_topic", ACTION_TOPIC, "ActionChunk input (external policy)."),
    ParamDoc(
        "wait_for_peers_s",
        0.0,
        "Hold the first episode up to this long for an outcome subscriber and the policy "
        "(0: start at once).",
    ),
    ParamDoc("exit_when_done", True, "Exit after the last episode (false: spin on)."),
    *(ParamDoc(t.parameter, t.topic, f"Topic: {t.doc}.") for t in TOPICS if t.parameter),
)


class MetaWorldSimNode(Node):
    """Publishers from TOPICS, the chunk subscription, and the loop's thread."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for parameter in PARAMETERS:
            self.declare_parameter(parameter.name, parameter.default)
        p = {q.name: self.get_parameter(q.name).value for q in PARAMETERS}
        self.cfg = LoopConfig(
            episodes=episode_order(tuple(p["tasks"]), p["seed"], p["episodes"]),
            policy=p["policy"],
            camera_rate_hz=p["camera_rate_hz"],
            camera_size=p["camera_size"],
        )
        if not p["real_time_factor"] > 0:
            raise ValueError(f"real_time_factor must be > 0, got {p['real_time_factor']}")
        self.rtf = p["real_time_factor"]
        self.wait_for_peers_s = p["wait_for_peers_s"]
        self.exit_when_done = p["exit_when_done"]
        self.topics = {t.key: (p[t.parameter] if t.parameter else t.topic) for t in TOPICS}
        self.action_topic = p["action_topic"]
        self._outlets = {
            t.key: self.create_publisher(t.msg_class, self.topics[t.key], QOS) for t in TOPICS
        }
        self.loop = MetaWorldLoop(self.cfg, self, self._warn)
        if self.cfg.policy == "external":
            self.create_subscription(ActionChunk, self.action_topic, self.loop.receive, 10)
        self.finished = threading.Event()
        self.stop = threading.Event()  # set by main before the node goes away
        self.wall_s = 0.0

    def publish(self, key: str, msg: Any, time_ns: int) -> None:
        """The loop's Port: onto the topic of `key`."""
        self._outlets[key].publish(msg)

    def _warn(self, text: str) -> None:
        self.get_logger().warning(text, throttle_duration_sec=2.0)

    # ------------------------------------------------------------------ the loop's thread

    def run(self) -> None:
        """Wait for peers if asked, then tick every episode at the real-time factor; log
        each outcome and the run's figures.

        Pacing restarts after each episode's reset (about 1 s of Meta-World's task
        sampling): the ticks owed for it are not run unpaced to catch up, which would give
        a policy less wall time per frame at the start of every episode."""
        try:
            if self.wait_for_peers_s > 0 and not self._wait_for_peers():
                return
            start = time.monotonic()
            period_s = CONTROL_PERIOD_NS / 1e9 / self.rtf
            anchor, ticks, logged, current = start, 0, 0, -1
            while not self.stop.is_set() and self.loop.tick():
                ticks += 1
                if self.loop.episode.index != current:  # this tick reset the env
                    current, anchor, ticks = self.loop.episode.index, time.monotonic(), 0
                for outcome in self.loop.outcomes[logged:]:
                    self.get_logger().info(outcome_line(outcome))
                logged = len(self.loop.outcomes)
                delay = anchor + ticks * period_s - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            self.wall_s = time.monotonic() - start
            for outcome in self.loop.outcomes[logged:]:
                self.get_logger().info(outcome_line(outcome))
            self.get_logger().info(summary(self.loop, self.wall_s))
        finally:
            self.loop.close()
            self.finished.set()

    def _wait_for_peers(self) -> bool:
        """Until an outcome subscriber and (external policy) the policy node are there."""
        deadline = time.monotonic() + self.wait_for_peers_s
        instruction, episode = self.topics["instruction"], self.topics["episode"]
        external = self.cfg.policy == "external"
        while not self.stop.is_set():
            policy = not external or (
                self.count_subscribers(instruction) > 0
                and self.count_publishers(self.action_topic) > 0
            )
            if policy and self.count_subscribers(episode) > 0:
                return True
            if time.monotonic() > deadline:
                self.get_logger().error(f"no peers after {self.wait_for_peers_s:g} s")
                return False
            time.sleep(_POLL_S)
        return False


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
    sim_s = loop.ticks * CONTROL_PERIOD_NS / 1e9
    reset_s = sum(o["reset_wall_s"] for o in loop.outcomes)
    renders = sum(o["renders"] for o in loop.outcomes)
    render_s = sum(o["render_wall_s"] for o in loop.outcomes)
    return (
        f"{len(loop.outcomes)} episodes, success {success}; {sim_s:.1f} s of sim time in "
        f"{wall_s:.1f} s (real-time factor {_ratio(sim_s, wall_s):.2f}; "
        f"{_ratio(sim_s, wall_s - reset_s):.2f} without the {reset_s:.1f} s of resets); chunks "
        f"accepted {sum(o['chunks_accepted'] for o in loop.outcomes)}, rejected "
        f"{dict(rejected)}; {renders} renders at {_ratio(renders, render_s):.0f}/s"
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def _build() -> Hosted:
    """The node, its loop's thread started with the spin, and the exit condition."""
    try:
        node = MetaWorldSimNode()
    except (ValueError, TypeError) as error:
        raise CannotStart(str(error), status=2) from None
    runner = threading.Thread(target=node.run, name="oxygen-metaworld-loop", daemon=True)

    def close() -> None:
        node.stop.set()
        if runner.ident is not None:  # started
            runner.join()

    return Hosted(
        node,
        start=runner.start,
        done=lambda: node.exit_when_done and node.finished.is_set(),
        close=close,
    )


def help_text() -> str:
    """`oxygen-metaworld-sim --help`: what it is, its parameters, examples."""
    return ros_args.help_text(
        "oxygen-metaworld-sim",
        "Meta-World's MT10 tasks (MuJoCo, the Sawyer arm) as a ROS 2 robot: it owns sim "
        "time (/clock), publishes the corner2 camera, the policy's state, the Sawyer's "
        "joints and each episode's instruction, runs the action chunks a policy publishes "
        "at 80 Hz, and publishes each episode's outcome as JSON on /metaworld/episode.",
        PARAMETERS,
        [
            "oxygen-metaworld-sim --ros-args -p policy:=expert -p episodes:=3",
            "oxygen-metaworld-sim --ros-args -p tasks:=[drawer-open-v3] -p wait_for_peers_s:=300.0",
        ],
        notes="Rendering is headless (MUJOCO_GL=egl unless set).",
    )


def main(args: list[str] | None = None) -> int:
    """Console script `oxygen-metaworld-sim`: run every episode, then exit (or spin on)."""
    if ros_args.wants_help(args):
        print(help_text(), end="")
        return 0
    return run_node("oxygen-metaworld-sim", _build, args)


if __name__ == "__main__":
    raise SystemExit(main())
