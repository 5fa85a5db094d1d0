"""What the node does with each input message, timer tick and diagnostics period: one copy.

The lifecycle node subscribes to its input topics and runs two timers; `oxygen-bag replay`
reads the same messages from a bag and fires the same timers on the bag clock. Both hand
every event to an `InputRouter`, so a bag replayed offline is taken exactly as the live
robot's topics are: images and joint states are stored in the frame assembler, an
instruction goes to the assembler (which may refuse it), a request naming a stream goes
to the frame loop, and whatever a peer sent that cannot be used is counted in
`NodeStats` (or by the assembler) and logged at most once per reason per throttle period,
quoting the peer's text as an excerpt (oxygen_core.text). Data flows one way: message in,
assembler or frame loop, counts out on /diagnostics.

`routes` is the table of inputs (topic, message class, QoS kind, callback): the node
creates one subscription per row, replay looks up a bag message's topic in it. A topic
named by two camera slots has two rows, as the node has two subscriptions.

Times come in as integer nanoseconds of the node clock (bag time in replay) and seconds of
the steady clock; `Tick.at` (oxygen_ros.frame) turns them into the frame's tick.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from oxygen_core.clock import NS_PER_S
from oxygen_core.text import excerpt, excerpt_list
from oxygen_ros.convert import ns_to_stamp
from oxygen_ros.diagnostics import ClockReport, DiagnosticsReporter, InputReport, NodeStats
from oxygen_ros.inputs import FrameAssembler
from oxygen_ros.throttle import KeyedThrottle
from oxygen_ros.topics import FrameLogger


@dataclasses.dataclass(frozen=True)
class Route:
    """One input topic: what arrives on it and what takes it."""

    topic: str
    msg_class: type
    sensor: bool  # sensor-data QoS (best effort, latest only); else reliable, depth 10
    callback: Callable[[Any], None]  # takes the ROS message


def camera_msg_class(topic: str) -> type:
    """CompressedImage for a `.../compressed` topic, as image_transport names it; else Image."""
    return CompressedImage if topic.endswith("/compressed") else Image


class InputRouter:
    """Input messages and timer events -> assembler, frame loop, stats and a throttled log."""

    def __init__(
        self,
        *,
        assembler: FrameAssembler,
        request: Callable[[str], None],
        stats: NodeStats,
        stream_names: Sequence[str],
        reporter: DiagnosticsReporter,
        logger: FrameLogger,
        throttle: KeyedThrottle | None = None,
    ) -> None:
        """request: where a request naming a known stream goes (FrameLoop.request)."""
        self.assembler = assembler
        self.stats = stats
        self.stream_names = tuple(stream_names)
        self._request = request
        self._reporter = reporter
        self._log = logger
        self._throttle = KeyedThrottle() if throttle is None else throttle

    def routes(
        self, cameras: Sequence[str], joint_state: str, instruction: str, request: str
    ) -> list[Route]:
        """The input table for these topic names (camera i fills model slot i)."""
        rows = [
            Route(topic, camera_msg_class(topic), True, functools.partial(self.on_image, slot))
            for slot, topic in enumerate(cameras)
        ]
        rows.append(Route(joint_state, JointState, True, self.on_joint_state))
        rows.append(Route(instruction, String, False, lambda msg: self.on_instruction(msg.data)))
        rows.append(Route(request, String, False, lambda msg: self.on_request(msg.data)))
        return rows

    def on_image(self, slot: int, msg: Any) -> None:
        self.assembler.on_image(slot, msg)

    def on_joint_state(self, msg: Any) -> None:
        self.assembler.on_joint_state(msg)

    def on_instruction(self, text: str) -> str | None:
        """A new task instruction; a refused one (counted by the assembler) is logged."""
        reason = self.assembler.on_instruction(text)
        if reason is not None:
            self._warn("instruction", f"instruction refused, the previous one stays: {reason}")
        return reason

    def on_request(self, stream: str) -> bool:
        """An on-demand language request (the stream's name); False, counted and logged,
        when it names no stream."""
        if stream not in self.stream_names:
            self.stats.unknown_request()
            self._warn(
                "request",
                f"~/request: unknown stream {excerpt(stream)}; streams: "
                f"{excerpt_list(self.stream_names)}",
            )
            return False
        self._request(stream)
        return True

    def report(self, now_ns: int, clock: ClockReport | None = None) -> DiagnosticArray:
        """The /diagnostics message at node-clock time now_ns (clock: the node's watch on
        the ROS clock; replay runs on the bag clock, which cannot stall)."""
        inputs = InputReport.of(self.assembler, now_ns / NS_PER_S)
        return self._reporter.report(ns_to_stamp(now_ns), self.stats.snapshot(), inputs, clock)

    def _warn(self, key: str, message: str) -> None:
        line = self._throttle.line(key, message)
        if line is not None:
            self._log.warning(line)
