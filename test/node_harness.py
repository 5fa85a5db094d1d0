"""Real rclpy plumbing for the node tests: a probe node that drives and watches `oxygen`.

The probe is an ordinary ROS 2 node on the same DDS domain as the node under test. It
publishes synthetic cameras and joint states at 30 Hz (with a switch for each kind of bad
input), calls the lifecycle services, and records every output topic. Tests wait on
conditions over what arrived, never for a fixed time.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.msg import Log
from rclpy.clock import Clock as RclpyClock
from rclpy.clock import ClockType
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.time import Time
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Header, String
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from oxygen_ros.msg import ActionChunk, EngineStats, LanguageTokens

SENSOR_HZ = 30.0
CLOCK_HZ = 200.0  # /clock rate of a simulated-time probe
SIM_START_S = 1000.0
IMAGE_H, IMAGE_W = 48, 64
TRANSITIONS = {
    "configure": Transition.TRANSITION_CONFIGURE,
    "activate": Transition.TRANSITION_ACTIVATE,
    "deactivate": Transition.TRANSITION_DEACTIVATE,
    "cleanup": Transition.TRANSITION_CLEANUP,
    "shutdown_inactive": Transition.TRANSITION_INACTIVE_SHUTDOWN,
    "shutdown_active": Transition.TRANSITION_ACTIVE_SHUTDOWN,
}


def console_script(name: str = "oxygen-node") -> str:
    """The installed console script `name` (next to this interpreter, else on PATH); the
    test is skipped when the project's setup has not installed it."""
    script = Path(sys.executable).with_name(name)
    found = str(script) if script.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (run the project's setup)")
    return found


def start_tiny_node(log: IO[str]) -> subprocess.Popen:
    """`oxygen-node` autostarting on config/tiny.yaml in its own process, as on a robot;
    its output goes to `log` (a file: a full pipe would block the node)."""
    root = Path(__file__).resolve().parents[1]
    tiny = root / "config" / "tiny.yaml"
    return subprocess.Popen(
        [console_script(), "--ros-args", "--params-file", str(tiny), "-p", "autostart:=true"],
        cwd=root,
        env=os.environ.copy(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@dataclasses.dataclass(frozen=True)
class Received:
    """A message and when it arrived."""

    at_s: float  # the probe's ROS clock: system time, or /clock for a simulated-time probe
    steady_s: float
    msg: Any


class Inbox:
    """Messages of one topic, appended by a subscription, awaited by the test thread."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._cv = threading.Condition()
        self._items: list[Received] = []

    def add(self, item: Received) -> None:
        with self._cv:
            self._items.append(item)
            self._cv.notify_all()

    def items(self) -> list[Received]:
        with self._cv:
            return list(self._items)

    def wait(
        self, ready: Callable[[list[Received]], bool], timeout_s: float, what: str
    ) -> list[Received]:
        """Block until `ready(items)`; fail naming `what` and the count after timeout_s."""
        with self._cv:
            if not self._cv.wait_for(lambda: ready(self._items), timeout_s):
                raise AssertionError(
                    f"{self.topic}: no {what} within {timeout_s} s ({len(self._items)} messages)"
                )
            return list(self._items)

    def wait_count(self, count: int, timeout_s: float) -> list[Received]:
        """Wait until `count` more messages than now have arrived; return only the new ones."""
        start = len(self.items())
        items = self.wait(lambda xs: len(xs) >= start + count, timeout_s, f"{count} new messages")
        return items[start:]


class Spinners:
    """Each node on its own single-threaded executor and thread, as in separate processes.

    Not one MultiThreadedExecutor for all: rclpy's busy-waits, holding the GIL, whenever a
    ready callback's group is busy (a timer during a lifecycle transition, say), and that
    starved the node's frame worker on a loaded machine.
    """

    def __init__(self) -> None:
        self._running: list[tuple[Node, SingleThreadedExecutor, threading.Thread]] = []

    def add(self, node: Node) -> Node:
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        thread = threading.Thread(target=executor.spin, name=node.get_name(), daemon=True)
        thread.start()
        self._running.append((node, executor, thread))
        return node

    def shutdown(self) -> None:
        """Stop every executor, then destroy the nodes (none is spinning by then)."""
        for _, executor, thread in self._running:
            executor.shutdown()
            thread.join(timeout=10)
        for node, _, _ in self._running:
            node.destroy_node()
        self._running.clear()


@dataclasses.dataclass
class SensorFaults:
    """Switches for the synthetic inputs; all off is a healthy robot."""

    joints_on: bool = True
    cameras_on: bool = True
    encoding: str = "rgb8"
    truncate_image: bool = False  # data shorter than height * step
    camera_age_s: float = 0.0  # stamps this far in the past
    silent_camera: int | None = None  # index of a camera that stops publishing
    nan_joint: bool = False
    rename_joints: bool = False  # joint names the node does not know
    extra_joints: int = 0  # names the node does not use, after the ones it needs


class Probe(Node):
    """Drives the node `/<target>`'s lifecycle and records its outputs.

    With `sim_speed`, the probe runs on simulated time: it publishes /clock itself
    (starting at SIM_START_S, advancing `sim_speed` times as fast as the steady clock) and
    stamps its sensors with that time, as `ros2 bag play --clock` would.
    """

    def __init__(
        self,
        *,
        cameras: Sequence[str],
        joints: Sequence[str],
        streams: Sequence[str],
        target: str = "oxygen",
        sim_speed: float | None = None,
        trajectories: Sequence[str] = (),
    ) -> None:
        """trajectories: JointTrajectory topics to record besides ~/joint_trajectory (the
        controllers' own, when the node splits its chunks over several)."""
        overrides = [] if sim_speed is None else [Parameter("use_sim_time", value=True)]
        super().__init__(f"{target}_probe", parameter_overrides=overrides)
        if sim_speed is not None:
            self._start_sim_clock(sim_speed)
        self.faults = SensorFaults(joints_on=False, cameras_on=False)
        self._joints = list(joints)
        self._cameras = [self.create_publisher(Image, topic, 5) for topic in cameras]
        self._joint_pub = self.create_publisher(JointState, "/joint_states", 5)
        self.instruction = self.create_publisher(String, f"/{target}/instruction", 10)
        self.request = self.create_publisher(String, f"/{target}/request", 10)
        self._timer = self.create_timer(1.0 / SENSOR_HZ, self._publish_sensors)
        self._image_seq = 0
        topics: dict[str, type] = {
            f"/{target}/action_chunk": ActionChunk,
            f"/{target}/joint_trajectory": JointTrajectory,
            f"/{target}/stats": EngineStats,
            f"/{target}/markers": MarkerArray,
            "/diagnostics": DiagnosticArray,
            "/rosout": Log,
        }
        topics.update(dict.fromkeys(trajectories, JointTrajectory))
        for stream in streams:
            topics[f"/{target}/{stream}"] = LanguageTokens
            topics[f"/{target}/{stream}/text"] = String
        reliable = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        self.inbox = {topic: Inbox(topic) for topic in topics}
        for topic, msg_type in topics.items():
            self.create_subscription(msg_type, topic, self._recorder(topic), reliable)
        self._change = self.create_client(ChangeState, f"/{target}/change_state")
        self._get = self.create_client(GetState, f"/{target}/get_state")
        self._enable = self.create_client(SetBool, f"/{target}/enable")

    def _start_sim_clock(self, speed: float) -> None:
        publisher = self.create_publisher(Clock, "/clock", 10)
        steady = RclpyClock(clock_type=ClockType.STEADY_TIME)
        start = steady.now()

        def tick() -> None:
            elapsed_s = (steady.now() - start).nanoseconds * 1e-9
            sim_s = SIM_START_S + speed * elapsed_s
            publisher.publish(Clock(clock=Time(nanoseconds=round(sim_s * 1e9)).to_msg()))

        self._clock_timer = self.create_timer(1.0 / CLOCK_HZ, tick, clock=steady)

    # ------------------------------------------------------------------ lifecycle

    def transition(self, name: str, timeout_s: float = 30.0) -> bool:
        """Ask for a transition over /oxygen/change_state; the service's success flag."""
        request = ChangeState.Request()
        request.transition.id = TRANSITIONS[name]
        return self._call(self._change, request, timeout_s).success

    def state(self) -> str:
        return self._call(self._get, GetState.Request(), 10.0).current_state.label

    def enable(self, on: bool = True) -> str:
        """Call ~/enable (served from configure on): random weights, which every test
        model has, start in a dry run and reach the controller only when told to."""
        response = self._call(self._enable, SetBool.Request(data=on), 10.0)
        assert response.success, response.message
        return response.message

    def _call(self, client: Any, request: Any, timeout_s: float) -> Any:
        if not client.wait_for_service(timeout_sec=10.0):
            raise AssertionError(f"service {client.srv_name} not available")
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _: done.set())
        if not done.wait(timeout_s):
            raise AssertionError(f"{client.srv_name} did not answer within {timeout_s} s")
        return future.result()

    # ------------------------------------------------------------------ outputs

    def now_s(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _recorder(self, topic: str) -> Callable[[Any], None]:
        inbox = self.inbox[topic]
        return lambda msg: inbox.add(Received(self.now_s(), time.monotonic(), msg))

    # ------------------------------------------------------------------ inputs

    def _publish_sensors(self) -> None:
        faults, now = self.faults, self.get_clock().now()
        stamp = (now - _seconds(faults.camera_age_s)).to_msg()
        if faults.joints_on:
            self._joint_pub.publish(self._joint_state(now.to_msg()))
        if not faults.cameras_on:
            return
        self._image_seq += 1
        for i, publisher in enumerate(self._cameras):
            if i != faults.silent_camera:
                publisher.publish(self._image(stamp, i))

    def _joint_state(self, stamp: Any) -> JointState:
        """The model's joints in reverse order plus one it does not use: matched by name."""
        names = [f"unknown_{n}" if self.faults.rename_joints else n for n in self._joints]
        positions = [0.1 * (i + 1) for i in range(len(names))]
        if self.faults.nan_joint:
            positions[2] = float("nan")
        extra = [f"extra_{i}" for i in range(self.faults.extra_joints)]
        return JointState(
            header=_header(stamp),
            name=[*reversed(names), "finger_extra", *extra],
            position=[*reversed(positions), 0.5, *[0.0] * len(extra)],
        )

    def _image(self, stamp: Any, camera: int) -> Image:
        pixels = np.full((IMAGE_H, IMAGE_W, 3), 40 * camera + self._image_seq % 50, np.uint8)
        data = pixels.tobytes()
        if self.faults.truncate_image:
            data = data[: len(data) // 2]
        return Image(
            header=_header(stamp),
            height=IMAGE_H,
            width=IMAGE_W,
            encoding=self.faults.encoding,
            step=IMAGE_W * 3,
            data=data,
        )


def _header(stamp: Any) -> Header:
    return Header(stamp=stamp, frame_id="camera")


def _seconds(value: float) -> Duration:
    return Duration(nanoseconds=int(value * 1e9))


def diagnostic_values(array: DiagnosticArray, status_suffix: str) -> tuple[int, dict[str, str]]:
    """(level, key -> value) of the status whose name ends with `status_suffix`."""
    for status in array.status:
        if status.name.endswith(status_suffix):
            return ord(status.level), {kv.key: kv.value for kv in status.values}
    raise AssertionError(f"no status ending {status_suffix!r} in {[s.name for s in array.status]}")


def stamp_s(stamp: Any) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def wait_until(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll a condition that no message signals (e.g. a thread ending)."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s} s")
        time.sleep(0.01)


def node_args(params_file: Path, **overrides: str) -> list[str]:
    """The command line of a node on `params_file` with `-p name:=value` overrides."""
    args = ["--ros-args", "--params-file", str(params_file)]
    for name, value in overrides.items():
        args += ["-p", f"{name}:={value}"]
    return args
