"""The node's chunks split over several trajectory controllers, over real ROS 2 topics:
one trajectory per controller (its joints only, the same stamp and times), and configure
refusing a commanded joint that no controller owns (docs/DESIGN.md section 13)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import rclpy
import yaml
from node_harness import Probe, SensorFaults, Spinners, node_args
from rcl_interfaces.msg import Log
from rclpy.parameter import Parameter

from oxygen_ros.node import OxygenNode

pytestmark = pytest.mark.ros

TINY = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]
JOINTS = PARAMS["joint_names"]  # the tiny robot commands all seven
ARM, WRIST = JOINTS[:4], JOINTS[4:]
TOPICS = {"arm": "/arm_controller/joint_trajectory", "wrist": "/wrist/joint_trajectory"}


@pytest.fixture(scope="module")
def rig():
    gc.collect()  # see test_node's rig: an earlier module's node must not outlive its turn
    rclpy.init()
    overrides = {
        "controller_names": "[arm, wrist]",
        "controllers.arm.topic": TOPICS["arm"],
        "controllers.arm.joints": f"[{', '.join(ARM)}]",
        "controllers.wrist.joints": f"[{', '.join(WRIST[:-1])}]",  # one joint short
    }
    node = OxygenNode(cli_args=node_args(TINY, **overrides))
    probe = Probe(
        cameras=PARAMS["camera_topics"],
        joints=JOINTS,
        streams=PARAMS["stream_names"],
        trajectories=tuple(TOPICS.values()),
    )
    probe.faults = SensorFaults()  # cameras and joint states on
    spinners = Spinners()
    spinners.add(node)
    spinners.add(probe)
    yield node, probe
    node.release()
    spinners.shutdown()
    rclpy.shutdown()


def test_a_joint_in_no_controller_fails_configure_in_one_line(rig):
    node, probe = rig
    assert probe.transition("configure", timeout_s=120) is False
    logs = probe.inbox["/rosout"].wait(
        lambda xs: any("in no controller" in x.msg.msg for x in xs), 30, "the error line"
    )
    (line,) = [x.msg for x in logs if "in no controller" in x.msg.msg]
    assert line.level == Log.ERROR and "\n" not in line.msg
    assert f"action joints ['{JOINTS[-1]}'] are in no controller" in line.msg


def test_each_controller_gets_its_joints_with_the_same_stamp(rig):
    node, probe = rig
    node.set_parameters([Parameter("controllers.wrist.joints", value=list(WRIST))])
    assert probe.transition("configure", timeout_s=120)
    assert probe.transition("activate", timeout_s=60)
    probe.enable()  # random weights start in a dry run
    arm, wrist = (probe.inbox[TOPICS[name]] for name in ("arm", "wrist"))

    def pairs() -> list:
        """(arm, wrist) trajectories with the same stamp (writers keep their newest only)."""
        by_stamp = {_stamp(t.msg): t.msg for t in arm.items()}
        return [
            (by_stamp[_stamp(t.msg)], t.msg) for t in wrist.items() if _stamp(t.msg) in by_stamp
        ]

    wrist.wait(lambda _: len(pairs()) >= 3, 60, "3 trajectories on both controllers")
    for a, w in pairs():
        assert list(a.joint_names) == list(ARM) and list(w.joint_names) == list(WRIST)
        assert [p.time_from_start for p in a.points] == [p.time_from_start for p in w.points]
        assert all(len(p.positions) == len(ARM) for p in a.points)
        assert all(len(p.velocities) == len(WRIST) for p in w.points)  # jtc: cubic
    assert probe.inbox["/oxygen/joint_trajectory"].items() == []
    assert probe.transition("deactivate", timeout_s=60)


def _stamp(msg) -> tuple[int, int]:
    return (msg.header.stamp.sec, msg.header.stamp.nanosec)
