"""The installed oxygen.launch.py on a full ROS 2 install: the node comes up active and publishes.

The launch file configures the node, then activates it when it reaches `inactive`, all
through lifecycle events; this test feeds it synthetic sensors and waits for action
chunks. Launch file, params and executable all come from the install (share/oxygen_ros
and lib/oxygen_ros, found through the ament index), so this tests what `colcon build`
installed, not the checkout. It needs launch, launch_ros and launch_testing, which the
development venv does not have, so it skips there. On a robot, after `colcon build` and
`source install/setup.bash`:

    colcon test --packages-select oxygen_ros       # or, directly:
    launch_test test/test_launch.py
    python -m pytest test/test_launch.py           (pytest<9: launch_testing's plugin)
"""

from __future__ import annotations

import sys
import threading
import unittest
from pathlib import Path

import pytest

pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")

import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
import yaml  # noqa: E402
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402

# launch_test imports this file by path, without pytest's rootdir on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from node_harness import Probe, SensorFaults  # noqa: E402

from oxygen_ros.tools.package_share import installed_share  # noqa: E402

SHARE = installed_share()
if SHARE is None or not (SHARE / "launch" / "oxygen.launch.py").is_file():
    pytest.skip("oxygen_ros is not installed with its launch files", allow_module_level=True)
LAUNCH = SHARE / "launch" / "oxygen.launch.py"
TINY = SHARE / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]


@pytest.mark.launch_test
def generate_test_description() -> LaunchDescription:
    oxygen = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH)),
        launch_arguments={"params_file": str(TINY), "autostart": "true"}.items(),
    )
    return LaunchDescription([oxygen, launch_testing.actions.ReadyToTest()])


class TestNodeComesUpAndPublishes(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        rclpy.init()
        cls.probe = Probe(
            cameras=PARAMS["camera_topics"],
            joints=PARAMS["joint_names"],
            streams=PARAMS["stream_names"],
        )
        cls.probe.faults = SensorFaults()
        cls.executor = SingleThreadedExecutor()
        cls.executor.add_node(cls.probe)
        cls.spinner = threading.Thread(target=cls.executor.spin, daemon=True)
        cls.spinner.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.executor.shutdown()
        cls.probe.destroy_node()
        rclpy.shutdown()
        cls.spinner.join(timeout=10)

    def test_launch_activates_the_node_and_chunks_arrive(self) -> None:
        chunks = self.probe.inbox["/oxygen/action_chunk"].wait_count(3, timeout_s=300)
        self.assertEqual(self.probe.state(), "active")
        self.assertTrue(all(c.msg.action_dim == 7 for c in chunks))


@launch_testing.post_shutdown_test()
class TestNodeExitsCleanly(unittest.TestCase):
    def test_exit_code(self, proc_info) -> None:
        # SIGINT from launch at shutdown; the node returns 0 from main().
        launch_testing.asserts.assertExitCodes(proc_info)
