"""The installed launch files end, or hold, the launch as a ROS 2 user expects.

- both launch files refuse to start without params_file (no default robot);
- oxygen.launch.py ends with an error (launch's exit status 1) when the node exits early
  (an integer where a double is due: the node exits 2) or fails its configure (a preset
  that does not exist), instead of hanging with no node or an unconfigured one;
- replay.launch.py passes use_sim_time, autostart and namespace through to the node.

Each launch runs in its own process through the launch API, as `ros2 launch` does
(`LaunchService` on an included description), with a timeout so a hang fails the test.
Needs launch and launch_ros and an install of oxygen_ros (colcon), so it skips in the
development venv.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("launch")
pytest.importorskip("launch_ros")

import rclpy  # noqa: E402
from lifecycle_msgs.srv import GetState  # noqa: E402
from rcl_interfaces.srv import GetParameters  # noqa: E402

from oxygen_ros.tools.package_share import installed_share  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SHARE = installed_share()
if SHARE is None or not (SHARE / "launch" / "oxygen.launch.py").is_file():
    pytest.skip("oxygen_ros is not installed with its launch files", allow_module_level=True)
TINY = (SHARE / "config" / "tiny.yaml").read_text()

# What `ros2 launch FILE name:=value ...` runs.
_RUN_LAUNCH = """
import sys
from launch import LaunchDescription, LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
arguments = [tuple(a.split(":=", 1)) for a in sys.argv[2:]]
source = PythonLaunchDescriptionSource(sys.argv[1])
service = LaunchService()
service.include_launch_description(
    LaunchDescription([IncludeLaunchDescription(source, launch_arguments=arguments)])
)
sys.exit(service.run())
"""


def _launch(name: str, *arguments: str, **popen: object) -> subprocess.Popen:
    command = [sys.executable, "-c", _RUN_LAUNCH, str(SHARE / "launch" / name), *arguments]
    return subprocess.Popen(
        command, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, **popen,
    )  # fmt: skip


def _ended(launch: subprocess.Popen, timeout_s: float) -> tuple[int | None, str]:
    """The launch's exit status and output once it ends by itself; a hang past timeout_s
    is killed and fails the test (TimeoutExpired)."""
    try:
        output, _ = launch.communicate(timeout=timeout_s)
    finally:
        if launch.poll() is None:
            launch.kill()
    return launch.returncode, output


def _params(tmp_path: Path, old: str, new: str) -> Path:
    assert old in TINY
    path = tmp_path / "params.yaml"
    path.write_text(TINY.replace(old, new))
    return path


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("control_rate_hz: 20.0", "control_rate_hz: 20", "oxygen_node-1 exited with code 2"),
        ("preset: tiny", "preset: nosuch", "the oxygen node failed to configure"),
    ],
)
def test_the_launch_ends_with_an_error_when_the_node_cannot_run(tmp_path, old, new, says):
    returncode, output = _ended(
        _launch("oxygen.launch.py", f"params_file:={_params(tmp_path, old, new)}"), 120
    )
    assert returncode == 1, output
    assert says in output, output


@pytest.mark.parametrize("name", ["oxygen.launch.py", "replay.launch.py"])
def test_a_launch_without_params_file_refuses_to_start(name):
    # A misspelt argument must not start the node on some default robot's parameters.
    returncode, output = _ended(_launch(name, "bag:=/nonexistent", "param_file:=/robot.yaml"), 60)
    assert returncode == 1, output
    assert "missing required argument 'params_file'" in output, output
    assert "oxygen_node" not in output, output  # no node process was started


def _call(node: rclpy.node.Node, client: rclpy.client.Client, request: object) -> object:
    assert client.wait_for_service(timeout_sec=60), client.srv_name
    future = client.call_async(request)
    rclpy.spin_until_future_complete(node, future, timeout_sec=30)
    assert future.done(), client.srv_name
    return future.result()


@pytest.mark.parametrize(("arguments", "sim_time"), [([], True), (["use_sim_time:=false"], False)])
def test_replay_launch_honours_its_arguments(arguments, sim_time):
    # autostart:=false: the node stays unconfigured, so the bag (absent here) never plays.
    launch = _launch(
        "replay.launch.py", "bag:=/nonexistent", "autostart:=false", "namespace:=replay_ns",
        f"params_file:={SHARE / 'config' / 'tiny.yaml'}", *arguments,
    )  # fmt: skip
    rclpy.init()
    node = rclpy.create_node("replay_launch_probe")
    try:
        state = _call(
            node, node.create_client(GetState, "/replay_ns/oxygen/get_state"), GetState.Request()
        )
        assert state.current_state.label == "unconfigured"
        params = _call(
            node,
            node.create_client(GetParameters, "/replay_ns/oxygen/get_parameters"),
            GetParameters.Request(names=["use_sim_time", "autostart"]),
        )
        assert [v.bool_value for v in params.values] == [sim_time, False]
        launch.send_signal(signal.SIGINT)
        output, _ = launch.communicate(timeout=60)
        assert launch.returncode == 0, output
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if launch.poll() is None:
            launch.kill()
            launch.wait()
