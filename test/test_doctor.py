"""`oxygen-doctor` against a real graph: a robot of tiny.yaml, healthy, then one fault each.

The robot is rclpy in this process: a sensor node (spun by node_harness.Spinners) sends
joint_1..joint_7 within tiny.yaml's limits and three rgb8 cameras on its topics at 20 Hz;
a peers node holds the controller's subscription on /oxygen/joint_trajectory and the
e-stop button's publisher (reliable, transient local, as a latched button) on
/oxygen/estop. Peers only need to exist in the graph, so nothing spins them, and each test
makes its own. The doctor runs in-process through `main` (it listens in its own rclpy
context) and once end to end as `python -m oxygen_ros.tools.doctor`. Each fault must turn
exactly one line into a FAIL naming it, and the exit status into 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import rclpy
import yaml
from node_harness import Spinners
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Header
from trajectory_msgs.msg import JointTrajectory

from oxygen_ros.convert import rgb8_image_msg
from oxygen_ros.tools.doctor import main

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny.yaml"
JOINTS = tuple(f"joint_{i}" for i in range(1, 8))
CAMERAS = (
    "/camera/base/image_raw",
    "/camera/left_wrist/image_raw",
    "/camera/right_wrist/image_raw",
)
SENSOR_HZ = 20.0  # twice tiny.yaml's frame rate
LISTEN_S = "4"  # DDS discovery alone took up to 2.5 s on a loaded 2-core machine
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
BEST_EFFORT = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
LINE = re.compile(r"^(ok|warn|FAIL) [a-z_]+: \S.* -> \S.*$")


@dataclasses.dataclass
class Faults:
    """What the sensors get wrong; all off is a healthy robot."""

    missing_joint: str | None = None
    positions: dict[str, float] = dataclasses.field(default_factory=dict)  # joint -> rad
    silent_camera: int | None = None
    encodings: dict[int, str] = dataclasses.field(default_factory=dict)  # camera -> encoding
    velocities: bool = True  # a joint_state_broadcaster with a velocity state interface


class Sensors(Node):
    """The robot's joint states and cameras at SENSOR_HZ, faults switched by the test."""

    def __init__(self) -> None:
        super().__init__("doctor_test_sensors")
        self.faults = Faults()
        self._joints = self.create_publisher(JointState, "/joint_states", 5)
        self._cameras = [self.create_publisher(Image, topic, 5) for topic in CAMERAS]
        self._pixels = np.full((48, 64, 3), 90, np.uint8)
        self.create_timer(1.0 / SENSOR_HZ, self._publish)

    def _publish(self) -> None:
        faults, stamp = self.faults, self.get_clock().now().to_msg()
        names = [name for name in JOINTS if name != faults.missing_joint]
        positions = [faults.positions.get(name, 0.1 * i) for i, name in enumerate(names)]
        state = JointState(header=Header(stamp=stamp), name=names, position=positions)
        if faults.velocities:
            state.velocity = [0.0] * len(names)
        self._joints.publish(state)
        for i, publisher in enumerate(self._cameras):
            if i != faults.silent_camera:
                image = rgb8_image_msg(self._pixels, stamp=stamp, frame_id="camera")
                image.encoding = faults.encodings.get(i, "rgb8")
                publisher.publish(image)


@pytest.fixture(scope="module")
def sensors() -> Iterator[Sensors]:
    rclpy.init()
    spinners = Spinners()
    try:
        yield spinners.add(Sensors())
    finally:
        spinners.shutdown()
        rclpy.shutdown()


@pytest.fixture
def robot(sensors: Sensors) -> Iterator[Sensors]:
    """The sensors, healthy again for each test."""
    sensors.faults = Faults()
    yield sensors


@contextlib.contextmanager
def peers(*, controller: bool = True, estop: QoSProfile = LATCHED) -> Iterator[None]:
    """The controller's subscription and the e-stop button's publisher, while inside."""
    node = rclpy.create_node("doctor_test_peers")
    try:
        if controller:
            node.create_subscription(JointTrajectory, "/oxygen/joint_trajectory", lambda _: None, 1)
        node.create_publisher(Bool, "/oxygen/estop", estop).publish(Bool(data=False))
        yield
    finally:
        node.destroy_node()


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """The doctor's exit status and lines, run in this process."""
    code = main(list(args))
    lines = capsys.readouterr().out.splitlines()
    assert all(LINE.match(line) for line in lines), lines
    return code, lines


def live(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    return doctor(capsys, str(TINY), "--allow-random", "--listen-s", LISTEN_S, *args)


def the_fail(lines: list[str]) -> str:
    fails = [line for line in lines if line.startswith("FAIL")]
    assert len(fails) == 1, "\n".join(lines)
    return fails[0]


def test_healthy_robot_passes(robot, capsys):
    with peers():
        code, lines = live(capsys)
    assert code == 0, "\n".join(lines)
    levels = {}
    for line in lines:
        level, check = line.split(":")[0].split()
        levels.setdefault(check, []).append(level)
    assert len(levels["camera"]) == 3  # each ok, or a rate warning on a starved CPU
    assert levels["checkpoint"] == ["warn"]  # random weights, allowed
    for check in ("platform", "params", "jax", "limits", "compile_cache", "tokenizer"):
        assert levels[check] == ["ok"], check
    for check in ("joint_state", "controller", "estop"):
        assert levels[check] == ["ok"], check


LIVE_FAULTS = {
    "joint_missing": (
        Faults(missing_joint="joint_4"),
        {},
        "FAIL joint_state: /joint_states: JointState lacks joints ['joint_4']",
    ),
    "joint_outside_limit": (
        Faults(positions={"joint_3": 12.0}),
        {},
        "FAIL joint_state: /joint_states: joint_3 at 12 is outside [-10, 10] (joint_limits)",
    ),
    "camera_silent": (
        Faults(silent_camera=1),
        {},
        "FAIL camera: no image on /camera/left_wrist/image_raw (left_wrist_0_rgb) in 4 s",
    ),
    "camera_encoding": (
        Faults(encodings={2: "yuv422"}),
        {},
        "FAIL camera: /camera/right_wrist/image_raw (right_wrist_0_rgb): Image encoding 'yuv422'",
    ),
    "no_controller": (
        Faults(),
        {"controller": False},
        "FAIL controller: nobody subscribes to /oxygen/joint_trajectory",
    ),
    "estop_best_effort": (
        Faults(),
        {"estop": BEST_EFFORT},
        "FAIL estop: no e-stop subscription of the node hears /doctor_test_peers on "
        "/oxygen/estop: Best effort publisher and reliable subscription",
    ),
}


@pytest.mark.parametrize("fault", LIVE_FAULTS)
def test_a_live_fault_is_the_one_fail(robot, capsys, fault):
    robot.faults, graph, expected = LIVE_FAULTS[fault]
    with peers(**graph):
        code, lines = live(capsys)
    assert code == 1
    assert the_fail(lines).startswith(expected)


def test_joint_states_without_velocities_are_a_warning(robot, capsys):
    robot.faults = Faults(velocities=False)
    with peers():
        code, lines = live(capsys)
    assert code == 0, "\n".join(lines)
    (line,) = [line for line in lines if line.startswith("warn joint_state")]
    assert line.startswith(
        "warn joint_state: /joint_states: no velocities for the commanded joints, inside their "
        "limits -> publish velocities"
    )


def _tiny_copy(tmp_path: Path, edit) -> Path:
    """tiny.yaml with its ros__parameters changed by `edit`."""
    data = yaml.safe_load(TINY.read_text())
    edit(data["/**"]["ros__parameters"])
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_commanded_joint_without_limits_fails_params(tmp_path, capsys):
    params = _tiny_copy(tmp_path, lambda p: p["joint_limits"].pop("joint_7"))
    code, lines = doctor(capsys, str(params), "--allow-random", "--offline")
    assert code == 1
    assert the_fail(lines).startswith(
        "FAIL params: joint_limits: joint 'joint_7' has no min_position"
    )
    assert lines[-1] == the_fail(lines)  # nothing after params can be judged


def test_no_chunk_gate_fails_limits(tmp_path, capsys):
    params = _tiny_copy(tmp_path, lambda p: p.update(gate_policy="off"))
    code, lines = doctor(capsys, str(params), "--allow-random", "--offline")
    assert code == 1
    assert the_fail(lines).startswith("FAIL limits: gate_policy off")


def test_missing_checkpoint_dir_fails(tmp_path, capsys):
    missing = tmp_path / "no_such_checkpoint"
    code, lines = doctor(capsys, str(TINY), "--offline", "-p", f"checkpoint_dir:={missing}")
    assert code == 1
    assert the_fail(lines).startswith(f"FAIL checkpoint: checkpoint_dir {missing} does not exist")


def test_random_weights_fail_without_allow_random(capsys):
    code, lines = doctor(capsys, str(TINY), "--offline")
    assert code == 1
    assert the_fail(lines) == (
        "FAIL checkpoint: random weights: the node will start disabled and must not drive a "
        "robot -> set checkpoint_dir to a trained checkpoint before it drives a robot "
        "(--allow-random: demo or sim)"
    )


def test_trained_checkpoint_is_checked_from_its_metadata(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # sim_demo.yaml's paths are relative to the node's directory
    code, lines = doctor(capsys, "config/sim_demo.yaml", "--offline")
    assert code == 0, "\n".join(lines)
    checks = {line.split(":")[0] for line in lines}
    assert {
        "ok checkpoint",
        "ok norm_stats",
        "ok horizon",
        "ok image_slots",
        "ok tokenizer",
    } <= checks
    code, lines = doctor(capsys, "config/sim_demo.yaml", "--offline", "-p", "tokenizer_path:=")
    assert code == 0
    assert "warn tokenizer: data/policy/sim_demo/tokenizer.model goes unused" in "\n".join(lines)


def test_python_m_runs_it_end_to_end(robot):
    command = [sys.executable, "-m", "oxygen_ros.tools.doctor", str(TINY), "--allow-random"]
    with peers():
        result = subprocess.run(
            [*command, "--listen-s", LISTEN_S, "--json"],
            cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["exit"] == 0
    checks = [finding["check"] for finding in report["findings"]]
    assert checks[:2] == ["platform", "params"]
    assert {"joint_state", "camera", "controller", "estop"} <= set(checks)
