"""The node's own topics: the one table of its outputs, and its request input.

Every output is described once, in `OUTPUTS`. The node's lifecycle publishers
(`publishers.LifecyclePublishers`), the replay's bag writer (`tools.replay.BagOutputs`), the
tools' resolved topic names (`tools.configure.TopicNames`) and the README's table of outputs
(`markdown_table`, checked by test_topics) are all built from it, so adding an output is one
row here and a test fails if any consumer misses it.

`FrameLoop` publishes by output name (and stream, for per-stream outputs) through the
`OutputPort` protocol; whether the message goes to a DDS publisher or into a bag is the
port's business, not the frame's. `LifecycleGate` is the open/close switch the node puts
in front of its publishers (deactivation closes it) and the FrameLoop unit test puts in
front of its recorder. What reaches a controller (`CONTROLLER_OUTPUTS`: JOINT_TRAJECTORY,
and COMMAND_CHUNK for a robot whose controller takes velocities or end-effector commands)
is the motion authority's to decide (oxygen_ros.motion), in front of that. ACTION_CHUNK is
never a controller's input: it keeps coming while the robot is stopped.

Relative names: `~/` resolves under the node (`/oxygen/...`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from diagnostic_msgs.msg import DiagnosticArray
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from oxygen_ros.convert import msgtype
from oxygen_ros.msg import ActionChunk, EngineStats, LanguageTokens

REQUEST = "~/request"  # std_msgs/String holding a stream's name: an on-demand request
ENABLE = "~/enable"  # std_srvs/SetBool service: whether CONTROLLER_OUTPUTS go out

# Output names, the keys FrameLoop publishes by.
ACTION_CHUNK = "action_chunk"
JOINT_TRAJECTORY = "joint_trajectory"
COMMAND_CHUNK = "command_chunk"
# What reaches a controller, and so only while ~/enable and the e-stop let it.
CONTROLLER_OUTPUTS = frozenset({JOINT_TRAJECTORY, COMMAND_CHUNK})
TOKENS = "tokens"
TEXT = "text"
STATS = "stats"
MARKERS = "markers"
DIAGNOSTICS = "diagnostics"


@dataclasses.dataclass(frozen=True)
class Output:
    """One row of the table: what the node publishes, where, and how."""

    name: str
    topic: str  # "{stream}" is replaced by the stream's name in per-stream outputs
    msg_class: type
    depth: int  # history depth of the publisher (reliable)
    doc: str  # the README's "type" column after the message type
    deadline: bool = False  # QoS deadline of qos_deadline_factor frame periods (every chunk)
    per_stream: bool = False  # one topic per language stream
    per_controller: bool = False  # one topic per controllers.<name> when any are set
    when: str | None = None  # NodeConfig bool field that switches the output on

    @property
    def msgtype(self) -> str:
        """ "pkg/msg/Name", as bags and `ros2 topic` name the type."""
        return msgtype(self.msg_class)


OUTPUTS: tuple[Output, ...] = (
    Output(
        ACTION_CHUNK,
        "~/action_chunk",
        ActionChunk,
        1,
        "H x D row-major, joint names, latency, deadline_met",
        deadline=True,
    ),
    Output(
        JOINT_TRAJECTORY,
        "~/joint_trajectory",
        JointTrajectory,
        1,
        "points at the control period, shaped for `controller_model`",
        deadline=True,
        when="joint_trajectory",
        per_controller=True,
    ),
    Output(
        COMMAND_CHUNK,
        "~/command_chunk",
        ActionChunk,
        1,
        "the chunk for a velocity or end-effector controller; 0 rows = stop",
        deadline=True,
        when="command_chunk",
    ),
    Output(
        TOKENS,
        "~/{stream}",
        LanguageTokens,
        100,
        "one per frame per active request",
        per_stream=True,
    ),
    Output(TEXT, "~/{stream}/text", String, 10, "finished texts", per_stream=True),
    Output(STATS, "~/stats", EngineStats, 10, "phase times, k, batch, KV pool, misses"),
    Output(MARKERS, "~/markers", MarkerArray, 1, "narration as a text marker"),
    Output(
        DIAGNOSTICS,
        "/diagnostics",  # absolute: rqt_robot_monitor listens there
        DiagnosticArray,
        10,
        "frame rate, latency, deadline misses, batch, KV pool, input freshness, skips by reason",
    ),
)

Key = tuple[str, "str | None"]  # (output name, stream or controller name, or None)


@dataclasses.dataclass(frozen=True)
class Topic:
    """One output topic of a configured node: a row of the table made concrete."""

    output: Output
    stream: str | None  # the language stream, or the controller, of a per-* output
    topic: str  # as in the table (relative); resolve it against the node for a full name

    @property
    def key(self) -> Key:
        return (self.output.name, self.stream)


def output_topics(cfg: Any) -> Iterator[Topic]:
    """Every topic a node with NodeConfig `cfg` publishes, in table order."""
    for output in OUTPUTS:
        if output.when is not None and not getattr(cfg, output.when):
            continue
        if output.per_controller and cfg.controllers:
            yield from (Topic(output, c.name, c.topic) for c in cfg.controllers)
            continue
        streams = cfg.stream_names if output.per_stream else (None,)
        for stream in streams:
            topic = output.topic.format(stream=stream) if output.per_stream else output.topic
            yield Topic(output, stream, topic)


def markdown_table(streams: tuple[str, ...]) -> str:
    """The README's table of outputs, with `streams` as example stream names."""
    rows = ["| out | type |", "|---|---|"]
    for o in OUTPUTS:
        names = [o.topic.format(stream=s) for s in streams] if o.per_stream else [o.topic]
        topic = ", ".join(f"`{n}`" for n in names)
        if o.deadline:
            topic += " (QoS deadline = `qos_deadline_factor` x frame period)"
        if o.when is not None:
            topic += f" (if `{o.when}`)"
        if o.per_controller:
            topic += ", or one per `controllers.<name>.topic`"
        package, _, name = o.msgtype.split("/")
        rows.append(f"| {topic} | `{package}/{name}` ({o.doc}) |")
    return "\n".join(rows)


class OutputPort(Protocol):
    """Where FrameLoop's messages go: the node's publishers, a bag, a test's recorder."""

    def publish(self, name: str, msg: Any, stream: str | None = None) -> bool:
        """Publish `msg` on output `name` (of `stream`); False when it was dropped."""
        ...


class FrameLogger(Protocol):
    """The part of rclpy's logger FrameLoop uses (replay hands it a file logger)."""

    def warning(self, message: str, **kwargs: Any) -> Any: ...


class LifecycleGate:
    """The lifecycle's open/close switch in front of every output: while closed (the node
    is not active), nothing passes.

    `close()` takes the lock, so once it returns no `run` is in progress and none will
    act until `open()`: a frame still running on the worker publishes nothing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False

    def open(self) -> None:
        with self._lock:
            self._open = True

    def close(self) -> None:
        with self._lock:
            self._open = False

    def run(self, action: Callable[[], object]) -> bool:
        """Run `action` if open; whether it ran."""
        with self._lock:
            if self._open:
                action()
            return self._open
