"""How fast the e-stop stops the robot: from the Bool on estop_topic to the hold.

    oxygen-bench estop [--params config/tiny.yaml] [--toggles 100]
        [--durability transient_local|volatile]

The real node runs as its own process (`python -m oxygen_ros.node`, autostart, system
time), as on a robot, switched on through ~/enable; this process feeds it synthetic
cameras and joint states at 30 Hz and presses and releases its e-stop (std_msgs/Bool,
reliable, from a latched or a volatile publisher) over DDS. Each toggle measures, on this
process's steady clock, the time from publishing `true` to receiving the hold (one point,
stamped zero) on ~/joint_trajectory, counts every chunk trajectory received after the
hold while the button is pressed (the dry run lasts --pressed-chunks action chunks; it
must be 0), then releases it and waits until chunk trajectories come again. It prints a
table (or JSON with --json) with p50 / p99 / max against the control and frame periods
of the params file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
import yaml
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Header
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.convert import stamp_to_ns
from oxygen_ros.msg import ActionChunk
from oxygen_ros.tools import child_processes
from oxygen_ros.tools.node_process import stop_node
from oxygen_ros.tools.package_share import resource

SENSOR_HZ = 30.0
_IMAGE_H, _IMAGE_W = 48, 64
_START_TIMEOUT_S = 600.0  # configure compiles every shape
_WAIT_S = 20.0  # for one hold, or the trajectories after a release
_RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
# The e-stop publisher's durability: a latched button, or `ros2 topic pub` and most others.
DURABILITIES = {
    "transient_local": DurabilityPolicy.TRANSIENT_LOCAL,
    "volatile": DurabilityPolicy.VOLATILE,
}


def is_hold(msg: JointTrajectory) -> bool:
    """A hold's trajectory: one point, stamped zero (on arrival)."""
    return len(msg.points) == 1 and stamp_to_ns(msg.header.stamp) == 0


class Bench(Node):
    """Synthetic robot inputs, the e-stop, and the arrivals on the node's outputs."""

    def __init__(self, params: dict[str, Any], durability: str) -> None:
        super().__init__("oxygen_estop_bench")
        self._joints = list(params["joint_names"])
        self._cameras = [self.create_publisher(Image, t, 5) for t in params["camera_topics"]]
        self._joint_pub = self.create_publisher(JointState, params["joint_state_topic"], 5)
        qos = QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DURABILITIES[durability]
        )
        self.estop = self.create_publisher(Bool, _estop_topic(params), qos)
        self.cv = threading.Condition()
        self.trajectories: list[tuple[float, bool]] = []  # (steady arrival, is a hold)
        self.chunks = 0
        trajectory = "/oxygen/joint_trajectory"
        self.create_subscription(JointTrajectory, trajectory, self._on_trajectory, _RELIABLE)
        self.create_subscription(ActionChunk, "/oxygen/action_chunk", self._on_chunk, _RELIABLE)
        self.create_timer(1.0 / SENSOR_HZ, self._publish_inputs)
        self._enable = self.create_client(SetBool, "/oxygen/enable")

    def enable(self) -> None:
        """Switch the node's output on: a model with random weights starts in a dry run."""
        if not self._enable.wait_for_service(timeout_sec=_START_TIMEOUT_S):
            raise TimeoutError(f"no {self._enable.srv_name} within {_START_TIMEOUT_S:g} s")
        done = threading.Event()
        future = self._enable.call_async(SetBool.Request(data=True))
        future.add_done_callback(lambda _: done.set())
        if not done.wait(_WAIT_S) or not future.result().success:
            raise TimeoutError(f"{self._enable.srv_name} did not enable the node")

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        with self.cv:
            self.trajectories.append((time.monotonic(), is_hold(msg)))
            self.cv.notify_all()

    def _on_chunk(self, msg: ActionChunk) -> None:
        with self.cv:
            self.chunks += 1
            self.cv.notify_all()

    def wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        with self.cv:
            if not self.cv.wait_for(ready, timeout_s):
                raise TimeoutError(f"no {what} within {timeout_s:g} s")

    def _publish_inputs(self) -> None:
        header = Header(stamp=self.get_clock().now().to_msg(), frame_id="camera")
        positions = [0.1 * (i + 1) for i in range(len(self._joints))]
        self._joint_pub.publish(JointState(header=header, name=self._joints, position=positions))
        pixels = np.full((_IMAGE_H, _IMAGE_W, 3), 60, np.uint8).tobytes()
        image = Image(
            header=header, height=_IMAGE_H, width=_IMAGE_W, encoding="rgb8",
            step=_IMAGE_W * 3, data=pixels,
        )  # fmt: skip
        for publisher in self._cameras:
            publisher.publish(image)


def _estop_topic(params: dict[str, Any]) -> str:
    topic = params.get("estop_topic", "~/estop")
    return topic.replace("~", "/oxygen", 1) if topic.startswith("~") else topic


def toggle(bench: Bench, pressed_chunks: int) -> tuple[float, int]:
    """One press and release: (ms from the press to the hold, trajectories while pressed)."""
    with bench.cv:
        start = len(bench.trajectories)
    pressed_s = time.monotonic()
    bench.estop.publish(Bool(data=True))

    def holds() -> list[float]:
        return [at for at, hold in bench.trajectories[start:] if hold and at >= pressed_s]

    bench.wait(lambda: bool(holds()), _WAIT_S, "hold after the press")
    held_s = holds()[0]
    with bench.cv:
        chunks = bench.chunks
    bench.wait(lambda: bench.chunks >= chunks + pressed_chunks, _WAIT_S, "dry-run chunks")
    with bench.cv:
        moving = sum(not hold for at, hold in bench.trajectories[start:] if at > held_s)
        resume = len(bench.trajectories)
    bench.estop.publish(Bool(data=False))
    bench.wait(
        lambda: any(not hold for _, hold in bench.trajectories[resume:]),
        _WAIT_S,
        "trajectory after the release",
    )
    return (held_s - pressed_s) * 1e3, moving


def measure(
    params_file: Path, toggles: int, pressed_chunks: int, durability: str
) -> dict[str, Any]:
    """Start the node, run the toggles, stop it; the figures."""
    params = yaml.safe_load(params_file.read_text())["/**"]["ros__parameters"]
    control_ms = 1e3 / params["control_rate_hz"]
    log = tempfile.NamedTemporaryFile(prefix="oxygen-estop-node-", suffix=".log", delete=False)
    command = [
        sys.executable, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(params_file),
        "-p", "autostart:=true",
    ]  # fmt: skip
    node = child_processes.popen(command, stdout=log, stderr=log)
    rclpy.init()
    bench = Bench(params, durability)
    executor = SingleThreadedExecutor()
    executor.add_node(bench)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        bench.enable()
        bench.wait(lambda: len(bench.trajectories) > 0, _START_TIMEOUT_S, "trajectory at start")
        results = [toggle(bench, pressed_chunks) for _ in range(toggles)]
    finally:
        stop_node(node)
        executor.shutdown()
        spinner.join(timeout=10)  # a spin still running at exit ends the process in terminate()
        bench.destroy_node()
        rclpy.try_shutdown()
    latencies = np.array([ms for ms, _ in results])
    return {
        "toggles": toggles,
        "durability": durability,
        "params": str(params_file),
        "control_period_ms": control_ms,
        "frame_period_ms": control_ms * params["execute_horizon"],
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "max_ms": float(latencies.max()),
        "trajectories_while_stopped": sum(moving for _, moving in results),
        "node_log": log.name,
    }


def table(figures: dict[str, Any]) -> str:
    control = figures["control_period_ms"]
    rows = [
        ("toggles", f"{figures['toggles']} ({figures['durability']} publisher)"),
        ("control period", f"{control:.1f} ms (frame period {figures['frame_period_ms']:.1f} ms)"),
        *(
            (name, f"{figures[key]:.2f} ms ({figures[key] / control:.2f} control periods)")
            for name, key in (
                ("press -> hold p50", "p50_ms"),
                ("press -> hold p99", "p99_ms"),
                ("press -> hold max", "max_ms"),
            )
        ),
        ("trajectories while stopped", f"{figures['trajectories_while_stopped']} (must be 0)"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"| {name:<{width}} | {value} |" for name, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="oxygen-bench estop")
    parser.add_argument("--params", type=Path, default=resource("config/tiny.yaml"))
    parser.add_argument("--toggles", type=int, default=100)
    parser.add_argument("--pressed-chunks", type=int, default=3, help="dry-run chunks per press")
    parser.add_argument("--durability", choices=DURABILITIES, default="transient_local")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.toggles < 1 or args.pressed_chunks < 1:
        parser.error("--toggles and --pressed-chunks must be at least 1")
    figures = measure(args.params, args.toggles, args.pressed_chunks, args.durability)
    print(json.dumps(figures, indent=2) if args.json else table(figures))
    return 0 if figures["trajectories_while_stopped"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
