"""InputRouter: the one copy of what the node and replay do with an input message.

The assembler, stats, throttle, reporter and messages are the real ones; the steady clock
of the throttle is a plain counter so the throttle period is exact. Replay running the same
router on a bag is checked in test_replay (a refused instruction and an unknown request
in a bag are counted as here).
"""

from __future__ import annotations

import pytest
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Header, String

from oxygen_ros.convert import ns_to_stamp
from oxygen_ros.diagnostics import DiagnosticsReporter, NodeStats
from oxygen_ros.frame import Tick
from oxygen_ros.inputs import FrameAssembler
from oxygen_ros.router import InputRouter
from oxygen_ros.throttle import KeyedThrottle

STREAMS = ("narration", "memory")


class Lines:
    """The logger's warning(): keeps the lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, message: str, **kwargs: object) -> None:
        self.lines.append(message)


@pytest.fixture
def rig():
    now = [0.0]
    assembler = FrameAssembler(
        camera_topics=["/cam/base", "/cam/left"],
        joint_names=["a", "b"],
        state_dim=2,
        image_size=8,
        stale_timeout_s=0.5,
        sync_slop_s=0.25,
        max_instruction_chars=20,
    )
    requested: list[str] = []
    log = Lines()
    router = InputRouter(
        assembler=assembler,
        request=requested.append,
        stats=NodeStats(),
        stream_names=STREAMS,
        reporter=DiagnosticsReporter("/oxygen", 0.1),
        logger=log,
        throttle=KeyedThrottle(period_s=2.0, clock=lambda: now[0]),
    )
    return router, requested, log, now


def values(router: InputRouter, now_ns: int, status: str) -> dict[str, str]:
    array = router.report(now_ns)
    [found] = [s for s in array.status if s.name == f"/oxygen: {status}"]
    return {kv.key: kv.value for kv in found.values}


def test_a_refused_instruction_is_counted_logged_once_per_period_and_the_old_one_kept(rig):
    router, _, log, now = rig
    assert router.on_instruction("stack the cups") is None
    for _ in range(3):
        assert router.on_instruction("x" * 50).startswith("instruction of 50 chars is over")
    assert router.assembler.instruction_refusals == 3
    assert log.lines == [
        "instruction refused, the previous one stays: instruction of 50 chars is over "
        "max_instruction_chars=20: '" + "x" * 50 + "'"
    ]
    now[0] = 2.0
    router.on_instruction("y" * 21)
    assert log.lines[1].endswith("(2 more held back since the last)")
    assert values(router, 10**9, "inputs")["instructions refused"] == "4"


def test_an_unknown_request_is_counted_and_logged_a_known_one_goes_to_the_loop(rig):
    router, requested, log, _ = rig
    assert router.on_request("memory") is True
    assert router.on_request("nope" * 100) is False
    assert router.on_request("other") is False
    assert requested == ["memory"]
    assert router.stats.snapshot().unknown_requests == 2
    assert log.lines == [
        "~/request: unknown stream '" + "nope" * 15 + "...' (400 chars); "
        "streams: ['narration', 'memory']"
    ]
    assert values(router, 10**9, "language")["unknown stream requests"] == "2"


def test_routes_are_the_node_subscriptions_and_feed_the_same_handlers(rig):
    router, requested, _, _ = rig
    routes = router.routes(["/cam/base", "/cam/base/compressed"], "/joints", "/instr", "/req")
    assert [(r.topic, r.msg_class, r.sensor) for r in routes] == [
        ("/cam/base", Image, True),
        ("/cam/base/compressed", CompressedImage, True),
        ("/joints", JointState, True),
        ("/instr", String, False),
        ("/req", String, False),
    ]
    image = Image(header=Header(stamp=ns_to_stamp(10**9)))
    routes[1].callback(image)
    joints = JointState(header=Header(stamp=ns_to_stamp(10**9)), name=["a", "b"])
    routes[2].callback(joints)
    routes[3].callback(String(data="x" * 30))
    routes[4].callback(String(data="narration"))
    routes[4].callback(String(data="nope"))
    ages = router.assembler.freshness(1.5)
    assert ages["left_wrist_0_rgb"] == pytest.approx(0.5) and ages["joint_state"] == 0.5
    assert ages["base_0_rgb"] == float("inf")  # slot 0 got nothing
    assert router.assembler.instruction_refusals == 1
    assert requested == ["narration"] and router.stats.snapshot().unknown_requests == 1


def test_tick_at_stamps_exactly_and_sets_the_deadline_one_period_on():
    tick = Tick.at(1_700_000_000_123_456_789, steady_s=50.0, period_s=0.1)
    assert (tick.stamp.sec, tick.stamp.nanosec) == (1_700_000_000, 123_456_789)
    assert tick.now_s == pytest.approx(1_700_000_000.123456789)
    assert (tick.start_s, tick.deadline_s) == (50.0, 50.1)
