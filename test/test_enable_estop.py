"""The node's motion authority and holds over real ROS 2 (oxygen_ros.motion).

One node (config/tiny.yaml, start_enabled false) and one probe run in this process, each on
its own executor thread; everything between them goes through DDS: the ~/enable service,
the transient-local e-stop topic, the lifecycle services, the outputs. The tests run in
file order: a dry run from the start, enable, disable, the e-stop, a failing frame,
deactivation and shutdown from active.

What DDS guarantees is what is asserted: the trajectory topic is reliable and the probe
reads it with a deep history, matched (it received trajectories) before each toggle, so
the hold arrives, and one writer's samples arrive in order: a trajectory received after
the hold was published after it. The chunk gate is off (gate_policy off): its own holds
are test_frame's, and here every hold is the motion authority's: a switch's or a transition's.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
from pathlib import Path
from typing import Any

import pytest
import rclpy
import yaml
from node_harness import Probe, SensorFaults, Spinners, diagnostic_values, stamp_s, wait_until
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool
from std_srvs.srv import SetBool

from oxygen_ros.diagnostics import CONTROLLER_OUTPUT
from oxygen_ros.node import OxygenNode

pytestmark = pytest.mark.ros

TINY = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]
PERIOD_S = PARAMS["execute_horizon"] / PARAMS["control_rate_hz"]
TRAJECTORY = "/oxygen/joint_trajectory"
CHUNKS = "/oxygen/action_chunk"
DRY_CHUNKS = 5  # chunks that must come while the controller gets nothing
ESTOP_QOS = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
# What `ros2 topic pub` and most publishers offer: a transient local subscription alone would
# be QoS-incompatible with it and never hear its stop.
VOLATILE_QOS = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE
)


def is_hold(msg: Any) -> bool:
    """A hold's trajectory: one point, stamped zero (on arrival)."""
    return len(msg.points) == 1 and stamp_s(msg.header.stamp) == 0.0


@dataclasses.dataclass
class Rig:
    node: OxygenNode
    probe: Probe
    enable: Any  # SetBool client of /oxygen/enable
    estop: Any  # transient-local Bool publisher on /oxygen/estop
    volatile_estop: Any  # volatile Bool publisher on /oxygen/estop

    def inbox(self, topic: str):
        return self.probe.inbox[topic]

    def set_enabled(self, on: bool) -> SetBool.Response:
        assert self.enable.wait_for_service(timeout_sec=10.0)
        done = threading.Event()
        future = self.enable.call_async(SetBool.Request(data=on))
        future.add_done_callback(lambda _: done.set())
        assert done.wait(10.0), "~/enable did not answer"
        return future.result()

    def trajectories_from(self, start: int) -> list[Any]:
        return [x.msg for x in self.inbox(TRAJECTORY).items()[start:]]

    def wait_hold(self, start: int, timeout_s: float = 10.0) -> None:
        self.inbox(TRAJECTORY).wait(
            lambda xs: any(is_hold(x.msg) for x in xs[start:]), timeout_s, "hold"
        )

    def wait_trajectories(self, start: int, count: int, timeout_s: float = 20.0) -> None:
        """`count` chunk trajectories (not holds) from item `start` on."""
        self.inbox(TRAJECTORY).wait(
            lambda xs: sum(not is_hold(x.msg) for x in xs[start:]) >= count,
            timeout_s,
            f"{count} trajectories",
        )

    def assert_dry_run_after_hold(self, start: int) -> None:
        """From item `start` on: trajectories sent before the stop, then one hold, then
        nothing for DRY_CHUNKS chunks while ~/action_chunk keeps coming."""
        self.wait_hold(start)
        self.inbox(CHUNKS).wait_count(DRY_CHUNKS, timeout_s=20)
        after = self.trajectories_from(start)
        assert [is_hold(m) for m in after][-1:] == [True], "nothing may follow the hold"
        assert sum(is_hold(m) for m in after) == 1

    def controller_output(self) -> str:
        """The safety status's value from the next /diagnostics report."""
        inbox = self.inbox("/diagnostics")
        start = len(inbox.items())
        items = inbox.wait(lambda xs: len(xs) > start, 10, "a report")
        return diagnostic_values(items[start].msg, "safety")[1][CONTROLLER_OUTPUT]


@pytest.fixture(scope="module")
def rig():
    gc.collect()  # an "oxygen" node of an earlier module must not silence ours (test_node)
    rclpy.init()
    node = OxygenNode(
        cli_args=[
            *("--ros-args", "--params-file", str(TINY)),
            *("-p", "diagnostics_period_s:=0.2", "-p", "gate_policy:='off'"),
            *("-p", "start_enabled:=false"),
        ]
    )
    probe = Probe(
        cameras=PARAMS["camera_topics"],
        joints=PARAMS["joint_names"],
        streams=PARAMS["stream_names"],
    )
    enable = probe.create_client(SetBool, "/oxygen/enable")
    estop = probe.create_publisher(Bool, "/oxygen/estop", ESTOP_QOS)
    volatile_estop = probe.create_publisher(Bool, "/oxygen/estop", VOLATILE_QOS)
    spinners = Spinners()
    spinners.add(node)
    spinners.add(probe)
    yield Rig(node, probe, enable, estop, volatile_estop)
    node.release()
    spinners.shutdown()
    rclpy.shutdown()


def test_start_enabled_false_starts_in_a_dry_run(rig):
    assert rig.probe.transition("configure", timeout_s=300) is True
    assert rig.probe.transition("activate") is True
    rig.probe.faults = SensorFaults()
    rig.inbox(CHUNKS).wait_count(DRY_CHUNKS, timeout_s=60)
    assert rig.inbox(TRAJECTORY).items() == []
    assert rig.controller_output() == "dry run: disabled"


def test_enabling_resumes_trajectories_at_the_next_frame(rig):
    response = rig.set_enabled(True)
    assert (response.success, response.message) == (True, "enabled")
    rig.wait_trajectories(0, 3)
    # Dry-run frames ran: the resume holds first, so the first chunk hands over from nothing.
    first = rig.trajectories_from(0)[0]
    assert is_hold(first) and rig.node.stats().last_hold == "enabled"
    assert rig.controller_output() == "enabled"


def test_disabling_holds_at_once_then_the_node_runs_dry(rig):
    start = len(rig.inbox(TRAJECTORY).items())
    holds = rig.node.stats().holds
    response = rig.set_enabled(False)
    assert (response.success, response.message) == (True, "dry run: disabled")
    # The hold went out from the service callback, before it answered: not at a frame.
    assert rig.node.stats().holds == holds + 1
    assert rig.node.stats().last_hold == "disabled"
    rig.assert_dry_run_after_hold(start)
    assert rig.set_enabled(True).success
    rig.wait_trajectories(start, 3)


def test_the_estop_stops_like_disable_and_outranks_enable(rig):
    wait_until(lambda: rig.estop.get_subscription_count() > 0, 10, "e-stop matched")
    start = len(rig.inbox(TRAJECTORY).items())
    rig.estop.publish(Bool(data=True))
    rig.assert_dry_run_after_hold(start)
    assert rig.node.stats().last_hold == "e-stop"
    refused = rig.set_enabled(True)
    assert (refused.success, refused.message) == (False, "dry run: e-stop")
    assert rig.controller_output() == "dry run: e-stop"
    rig.inbox(CHUNKS).wait_count(DRY_CHUNKS, timeout_s=20)
    assert sum(is_hold(m) for m in rig.trajectories_from(start)) == 1
    resume = len(rig.inbox(TRAJECTORY).items())
    rig.estop.publish(Bool(data=False))
    rig.wait_trajectories(resume, 3)


def test_a_volatile_publisher_stops_and_releases(rig):
    """The stop of a publisher that latches nothing arrives (the node's volatile
    subscription), at once from its callback, and its release resumes."""
    wait_until(lambda: rig.volatile_estop.get_subscription_count() > 0, 10, "matched")
    start = len(rig.inbox(TRAJECTORY).items())
    holds = rig.node.stats().holds
    rig.volatile_estop.publish(Bool(data=True))
    wait_until(lambda: rig.node.stats().holds == holds + 1, 10, "the e-stop's hold")
    assert rig.node.stats().last_hold == "e-stop"
    rig.assert_dry_run_after_hold(start)
    assert rig.controller_output() == "dry run: e-stop"
    resume = len(rig.inbox(TRAJECTORY).items())
    rig.volatile_estop.publish(Bool(data=False))
    rig.wait_trajectories(resume, 3)


def test_a_failing_frame_sends_one_hold(rig, monkeypatch):
    """The engine raising once (injected into the real engine), as a bug would."""
    engine = rig.node._configured.engine
    act, failed = engine.act, threading.Event()

    def act_once_failing(*args, **kwargs):
        if not failed.is_set():
            failed.set()
            raise RuntimeError("injected engine failure")
        return act(*args, **kwargs)

    start = len(rig.inbox(TRAJECTORY).items())
    errors = rig.node.stats().errors
    monkeypatch.setattr(engine, "act", act_once_failing)
    rig.wait_hold(start)
    assert rig.node.stats().errors == errors + 1  # counted before the hold went out
    # The hold's reason is counted after it went out: the probe may see the hold first.
    wait_until(lambda: rig.node.stats().last_hold == "frame error", 10, "the hold counted")
    rig.wait_trajectories(len(rig.inbox(TRAJECTORY).items()), 3)  # the next frames go on
    assert sum(is_hold(m) for m in rig.trajectories_from(start)) == 1


def test_deactivate_holds_then_sends_nothing(rig):
    start = len(rig.inbox(TRAJECTORY).items())
    assert rig.probe.transition("deactivate") is True
    rig.wait_hold(start)
    assert rig.node.stats().last_hold == "deactivate"
    deadline_s = rig.probe.now_s() + 10 * PERIOD_S
    wait_until(lambda: rig.probe.now_s() > deadline_s, 20, "ten frame periods")
    assert [is_hold(m) for m in rig.trajectories_from(start)][-1:] == [True]
    assert sum(is_hold(m) for m in rig.trajectories_from(start)) == 1
    # Activated again, still enabled: trajectories come, with no hold (nothing ran dry).
    assert rig.probe.transition("activate") is True
    resume = len(rig.inbox(TRAJECTORY).items())
    rig.wait_trajectories(resume, 3)
    assert not any(is_hold(m) for m in rig.trajectories_from(resume))


def test_shutdown_from_active_holds(rig):
    start = len(rig.inbox(TRAJECTORY).items())
    assert rig.probe.transition("shutdown_active") is True
    rig.wait_hold(start)
    assert rig.probe.state() == "finalized"
    assert [is_hold(m) for m in rig.trajectories_from(start)][-1:] == [True]
