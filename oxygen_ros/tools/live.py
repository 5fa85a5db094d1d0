"""A bag played onto ROS 2 topics with /clock, and a node's outputs recorded from them.

pip-installed rclpy has no `ros2 bag play --clock` and no `ros2 bag record`; these two
small rclpy nodes do that job for `oxygen-bag replay --live` and the demo, so the real node
runs with use_sim_time on the bag's clock.

`BagPlayer` publishes each message's CDR bytes as recorded, at its log time, and /clock
on a fixed step between them, paced at `rate` times wall time. At equal times a message
goes out before the clock reaches it, so the node has it when a frame ticks then.
`OutputRecorder` subscribes to the node's output topics with raw subscriptions: the
bytes that went over DDS go into the output bag unchanged. It spins on a single-threaded
executor: rclpy's MultiThreadedExecutor busy-waits while a ready callback's group is busy,
and that spin, holding the GIL, starved the player on the main thread (bursty /clock, the
node ticking at 1 frame/s instead of 10).

`replay_live` runs both for one job: it waits until the node subscribes to the bag's
topics (it does once active) and the recorder has matched each of the node's outputs (a
chunk published before the match never reaches the bag, and a report missing frame 0
would wrongly say the node ran before), plays the bag, waits for the last outputs, and
reports as an offline replay does. Counts no output message carries (skips by reason,
overruns) come from the node's last /diagnostics, which may be up to one diagnostics
period older than the end of the bag.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from tqdm import tqdm

from oxygen_core.clock import NS_PER_S
from oxygen_ros.convert import ns_to_stamp
from oxygen_ros.diagnostics import DEADLINE_MISSES, FRAME_ERRORS, OVERRUNS
from oxygen_ros.tools.bagio import BagMessage, BagWriter, bag_topics, message_class, read_bag
from oxygen_ros.tools.replay_job import OUTPUT_BAG, Job, OutputSink, period_ns
from oxygen_ros.tools.report import SCORE_PNG, Counts, Recording, build_report, write_report
from oxygen_ros.tools.score_report import add_score
from oxygen_ros.topics import DIAGNOSTICS

# Reliable writers match reliable and best-effort readers alike (the node reads sensors
# best effort, instructions reliably, /clock best effort).
_PLAYER_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
_RECORDER_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
_POLL_S = 0.02  # how often waits re-check a condition no callback signals
CLOCK_STEP_S = 0.025  # /clock step between frame ticks (ros2 bag play --clock: 40 Hz)


class Pacer:
    """Bag time -> wall time at `rate` x real time; rate None runs as fast as possible."""

    def __init__(self, rate: float | None, origin_ns: int) -> None:
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = rate
        self.origin_ns = origin_ns
        self.start_s = time.monotonic()

    def wait(self, time_ns: int) -> float | None:
        """Sleep until `time_ns` is due; its due time on the steady clock (None unpaced)."""
        if self.rate is None:
            return None
        due_s = self.start_s + (time_ns - self.origin_ns) / NS_PER_S / self.rate
        delay = due_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return due_s


def wait_until(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `ready` until true; TimeoutError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(_POLL_S)


class BagPlayer(Node):
    """Publishes the chosen topics of a bag and /clock at the bag's pace."""

    def __init__(self, bag: Path, topics: Mapping[str, str], *, context: Context) -> None:
        """topics: topic -> message type of the bag topics to publish."""
        super().__init__("oxygen_bag_player", context=context, start_parameter_services=False)
        self._bag = bag
        self._outlets = {
            topic: self.create_publisher(message_class(msgtype), topic, _PLAYER_QOS)
            for topic, msgtype in topics.items()
        }
        self._clock = self.create_publisher(Clock, "/clock", _PLAYER_QOS)

    def wait_for_subscribers(self, timeout_s: float, alive: Callable[[], bool]) -> None:
        """Block until every topic and /clock have a subscriber (a node subscribes to its
        inputs once it is active).

        alive() is polled too: a node process that died ends the wait with an error.
        """

        def ready() -> bool:
            if not alive():
                raise RuntimeError("the node exited before it subscribed to the bag's topics")
            publishers = [*self._outlets.values(), self._clock]
            return all(p.get_subscription_count() > 0 for p in publishers)

        topics = sorted([*self._outlets, "/clock"])
        wait_until(ready, timeout_s, f"a subscriber on each of {topics}")

    def play(
        self,
        clock: Sequence[int],
        rate: float,
        on_time: Callable[[int], None] = lambda time_ns: None,
    ) -> None:
        """Publish the bag's messages up to the last /clock value, and each clock value.

        clock: ascending bag times to publish on /clock, the first before any message;
        on_time(bag time) is called after each (progress).
        """
        pacer = Pacer(rate, clock[0])
        for time_ns, message in self._events(clock):
            pacer.wait(time_ns)
            if message is None:
                self._clock.publish(Clock(clock=ns_to_stamp(time_ns)))
                on_time(time_ns)
            else:
                self._outlets[message.topic].publish(message.data)

    def _events(self, clock: Sequence[int]) -> Iterator[tuple[int, BagMessage | None]]:
        """(time, message) and (time, None) for a clock value; messages first at a time."""
        messages = ((m.time_ns, 0, m) for m in read_bag(self._bag, self._outlets))
        steps = ((t, 1, None) for t in clock)
        for time_ns, _, message in heapq.merge(messages, steps, key=lambda e: e[:2]):
            if time_ns > clock[-1]:
                return
            yield time_ns, message


class OutputRecorder(Node):
    """Raw subscriptions to a node's output topics; each message goes to `sink`.

    Its clock follows /clock, so messages are logged at bag time. It spins on one thread:
    the sink sees one message at a time, in arrival order.
    """

    def __init__(
        self,
        topics: Mapping[str, str],
        sink: Callable[[BagMessage], None],
        *,
        context: Context,
        periodic: Collection[str] = (),
    ) -> None:
        """periodic: topics the node publishes on a steady timer whatever its clock does
        (/diagnostics): recorded, but they never make the node look busy to wait_quiet."""
        super().__init__(
            "oxygen_output_recorder",
            context=context,
            start_parameter_services=False,
            parameter_overrides=[Parameter("use_sim_time", value=True)],
        )
        self._sink = sink
        self._periodic = frozenset(periodic)
        self.last_arrival_s = time.monotonic()
        self._inlets = {
            topic: self.create_subscription(
                message_class(msgtype),
                topic,
                functools.partial(self._on_message, topic, msgtype),
                _RECORDER_QOS,
                raw=True,
            )
            for topic, msgtype in topics.items()
        }

    def wait_for_publishers(self, timeout_s: float, alive: Callable[[], bool]) -> None:
        """Block until each output topic has a matched publisher (the node creates them at
        configure, so once it is active they only need discovery).

        Delivery starts at the match: what the node published before it would be lost, so
        playback waits for this. alive() is polled as in BagPlayer.wait_for_subscribers.
        """

        def unmatched() -> list[str]:
            if not alive():
                raise RuntimeError("the node exited before its outputs reached the recorder")
            subs = self._inlets.items()
            return sorted(topic for topic, sub in subs if sub.get_publisher_count() == 0)

        try:
            wait_until(lambda: not unmatched(), timeout_s, "a publisher on each output topic")
        except TimeoutError as error:
            raise TimeoutError(f"{error}; none yet on {unmatched()}") from None

    def _on_message(self, topic: str, msgtype: str, data: bytes) -> None:
        if topic not in self._periodic:
            self.last_arrival_s = time.monotonic()
        self._sink(BagMessage(topic, msgtype, self.get_clock().now().nanoseconds, data))

    def wait_quiet(self, quiet_s: float, timeout_s: float) -> None:
        """Block until no frame output arrived for quiet_s (the node's last frame is in)."""
        wait_until(
            lambda: time.monotonic() - self.last_arrival_s >= quiet_s,
            timeout_s,
            f"{quiet_s:g} s without output messages",
        )


# --------------------------------------------------------------------------- runs


def clock_times(span_ns: tuple[int, int], ticks: range, step_ns: int) -> list[int]:
    """/clock values for --live: a fixed step from the first tick to the bag's end, plus
    every tick itself, so the node's timer fires exactly on its tick."""
    return sorted(set(range(ticks[0], span_ns[1] + 1, step_ns)) | set(ticks))


def replay_live(
    job: Job,
    *,
    rate: float = 1.0,
    wait_s: float = 120.0,
    alive: Callable[[], bool] = lambda: True,
    on_output: Callable[[str, Any], None] | None = None,
    progress: bool = True,
) -> dict:
    """Play the bag to a running node (use_sim_time) and record its outputs; the report.

    Waits up to wait_s for the node to subscribe (it does when it becomes active), and up
    to wait_s more for the recorder to match the node's outputs, then plays at `rate`;
    on_output(topic, msg) sees every output message as it arrives.
    """
    job.out.mkdir(parents=True, exist_ok=True)
    span, ticks = job.span_ns(), job.ticks()
    recorded = bag_topics(job.bag)
    inputs = {topic: recorded[topic] for topic in job.names.inputs() if topic in recorded}
    with BagWriter(job.out / OUTPUT_BAG) as writer:
        sink = OutputSink(writer)

        def record(message: BagMessage) -> None:
            msg = sink.raw(message)
            if on_output is not None:
                on_output(message.topic, msg)

        with _live_nodes(job, inputs, record) as (player, recorder):
            player.wait_for_subscribers(wait_s, alive)
            recorder.wait_for_publishers(wait_s, alive)
            _play(player, span, ticks, rate, progress)
            period = job.settings.node.frame_period_s
            recorder.wait_quiet(quiet_s=max(1.0, 3 * period), timeout_s=60.0)
    counts = node_counts(sink.recording, job.names.node)
    info = job.info("live")
    report = build_report(sink.recording, info, counts)
    if job.targets is not None:  # a running node's policy chunks are not seen: its published
        rec = sink.recording
        add_score(
            report,
            rec.published,
            rec.said,
            job.targets,
            "published",
            info.origin_ns,
            job.out / SCORE_PNG,
        )
    write_report(report, job.out)
    return report


@contextlib.contextmanager
def _live_nodes(
    job: Job, inputs: Mapping[str, str], record: Callable[[BagMessage], None]
) -> Iterator[tuple[BagPlayer, OutputRecorder]]:
    """A player and a recorder in their own rclpy context; the recorder spins on a thread."""
    context = Context()
    rclpy.init(args=[], context=context)
    executor = SingleThreadedExecutor(context=context)
    spinner = threading.Thread(target=executor.spin, name="oxygen-recorder", daemon=True)
    nodes: list[Node] = []
    try:
        player = BagPlayer(job.bag, inputs, context=context)
        nodes.append(player)
        diagnostics = job.names.output(DIAGNOSTICS)
        recorder = OutputRecorder(
            job.names.outputs(), record, context=context, periodic=(diagnostics,)
        )
        nodes.append(recorder)
        executor.add_node(recorder)
        spinner.start()
        yield player, recorder
    finally:
        executor.shutdown()
        if spinner.is_alive():
            spinner.join()
        for node in nodes:
            node.destroy_node()
        rclpy.shutdown(context=context)


def _play(
    player: BagPlayer, span: tuple[int, int], ticks: range, rate: float, progress: bool
) -> None:
    seconds = (span[1] - ticks[0]) / NS_PER_S
    with tqdm(total=round(seconds, 1), unit="s", desc="play", disable=not progress) as bar:

        def advance(time_ns: int) -> None:
            bar.update(round((time_ns - ticks[0]) / NS_PER_S, 1) - bar.n)

        player.play(clock_times(span, ticks, period_ns(CLOCK_STEP_S)), rate, advance)


def node_counts(rec: Recording, node: str) -> Counts:
    """What `node` last reported on /diagnostics (skips by reason, misses, overruns)."""
    return Counts(
        skipped=rec.node_skips(node),
        deadline_misses=rec.node_count(node, DEADLINE_MISSES),
        overruns=rec.node_count(node, OVERRUNS),
        errors=rec.node_count(node, FRAME_ERRORS),
    )
