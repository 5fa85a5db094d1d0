"""A simulated robot's ROS side, shared by every world (`oxygen-sim [--world W]`): its topic
table, publishers, an external policy's command subscriptions (one topic, or one per
trajectory controller), waiting for peers, the loop ticked on its own thread at a
real-time factor, and the process around the node.

The world's loop (tools.sim.loop.SimLoop) publishes by
topic key through the node (`SimHost.publish` is its port) and is ticked by `SimHost.pace`:
each tick at its wall time, a late one at once. The node's parameters always include
real_time_factor, wait_for_peers_s and exit_when_done (`HOST_PARAMETERS`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from std_msgs.msg import String
from std_srvs.srv import SetBool

from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.spin import CannotStart, Hosted

# Reliable writers serve reliable and best-effort readers alike (the oxygen node reads
# sensors best effort, instructions reliably).
QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
_POLL_S = 0.05

HOST_PARAMETERS: tuple[ParamDoc, ...] = (
    ParamDoc("real_time_factor", 1.0, "Sim seconds per wall second (below 1: slower)."),
    ParamDoc(
        "wait_for_peers_s",
        0.0,
        "Hold the first episode up to this long for an outcome subscriber and the policy "
        "(0: start at once).",
    ),
    ParamDoc("exit_when_done", True, "Exit after the last episode (false: spin on)."),
)


@dataclasses.dataclass(frozen=True)
class SimTopic:
    """One row: a key the loop publishes by, its default topic and message class."""

    key: str
    topic: str
    msg_class: type
    doc: str
    parameter: str | None = None  # the node parameter that renames it


# Every world publishes each episode's instruction where the oxygen node reads it.
INSTRUCTION = SimTopic(
    "instruction",
    "/oxygen/instruction",
    String,
    "the episode's instruction, at its start and every second",
    parameter="instruction_topic",
)


def topic_parameters(topics: Sequence[SimTopic]) -> tuple[ParamDoc, ...]:
    """The parameters that rename the table's topics."""
    return tuple(ParamDoc(t.parameter, t.topic, f"Topic: {t.doc}.") for t in topics if t.parameter)


class SimHost(Node):
    """Declared parameters (`p`), publishers by key, the command subscription, peers, pacing."""

    def __init__(
        self, name: str, parameters: Sequence[ParamDoc], topics: Sequence[SimTopic], **kwargs
    ) -> None:
        super().__init__(name, **kwargs)
        for parameter in parameters:
            self.declare_parameter(parameter.name, parameter.default)
        self.p = {q.name: self.get_parameter(q.name).value for q in parameters}
        if not self.p["real_time_factor"] > 0:
            raise ValueError(f"real_time_factor must be > 0, got {self.p['real_time_factor']}")
        self.rtf = self.p["real_time_factor"]
        self.wait_for_peers_s = self.p["wait_for_peers_s"]
        self.exit_when_done = self.p["exit_when_done"]
        self.topics = {t.key: (self.p[t.parameter] if t.parameter else t.topic) for t in topics}
        self._outlets = {
            t.key: self.create_publisher(t.msg_class, self.topics[t.key], QOS) for t in topics
        }
        self.command_topics: tuple[str, ...] = ()  # set by `listen` (an external policy)
        self.policy_switch: PolicySwitch | None = None  # set by `switched_by`
        self.finished = threading.Event()
        self.stop = threading.Event()  # set before the node goes away
        self.wall_s = 0.0

    def listen(
        self, msg_class: type, topics: str | Sequence[str], receive: Callable[[Any], None]
    ) -> None:
        """Take an external policy's commands from `topics` (one, or several taken alike:
        a robot's trajectory controllers)."""
        self.command_topics = (topics,) if isinstance(topics, str) else tuple(topics)
        for topic in self.command_topics:
            self.create_subscription(msg_class, topic, receive, 10)

    def switched_by(self, service: str) -> PolicySwitch:
        """Switch the external policy on and off around resets through `service`."""
        self.policy_switch = PolicySwitch(self, service)
        return self.policy_switch

    def publish(self, key: str, msg: Any, time_ns: int) -> None:
        """The loop's port: onto the topic of `key`."""
        self._outlets[key].publish(msg)

    def warn(self, text: str) -> None:
        self.get_logger().warning(text, throttle_duration_sec=2.0)

    def pace(
        self,
        tick: Callable[[], bool],
        period_s: float,
        restarted: Callable[[], bool] = lambda: False,
    ) -> None:
        """Call `tick` (False: done) every `period_s` of sim time at the real-time factor
        until done or stopped; a late tick runs at once. `restarted()` after a tick says
        the pacing starts afresh from now (a slow episode reset whose ticks are not owed)."""
        start = anchor = time.monotonic()
        ticks, wall_period = 0, period_s / self.rtf
        while not self.stop.is_set() and tick():
            ticks += 1
            if restarted():
                anchor, ticks = time.monotonic(), 0
            delay = anchor + ticks * wall_period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.wall_s = time.monotonic() - start

    def wait_for_peers(self) -> bool:
        """Until an outcome subscriber and (with `listen`) the policy node are there: one
        that reads the instruction and publishes commands (and serves its switch, with
        `switched_by`); False after wait_for_peers_s."""
        deadline = time.monotonic() + self.wait_for_peers_s
        instruction, episode = self.topics["instruction"], self.topics["episode"]
        commands, switch = self.command_topics, self.policy_switch
        self.get_logger().info(
            f"waiting up to {self.wait_for_peers_s:g} s for a subscriber on {episode}"
            + (f" and a policy on {instruction} and {', '.join(commands)}" if commands else "")
        )
        while not self.stop.is_set():
            policy = not commands or (
                self.count_subscribers(instruction) > 0
                and all(self.count_publishers(c) > 0 for c in commands)
                and (switch is None or switch.ready())
            )
            if policy and self.count_subscribers(episode) > 0:
                return True
            if time.monotonic() > deadline:
                self.get_logger().error(f"no peers after {self.wait_for_peers_s:g} s")
                return False
            time.sleep(_POLL_S)
        return False


class PolicySwitch:
    """An external policy's std_srvs/SetBool switch (the oxygen node's ~/enable), called
    from a sim's loop thread while the node spins on another: `__call__` returns once the
    policy has answered that it is as asked. A policy that does not answer within
    `timeout_s`, or refuses, stops the run (`host.stop`) with an error: episodes whose
    resets the policy did not see would not be comparable."""

    def __init__(self, host: SimHost, service: str, timeout_s: float = 10.0) -> None:
        self._host, self._service, self._timeout_s = host, service, timeout_s
        self._client = host.create_client(SetBool, service)

    def ready(self) -> bool:
        return self._client.service_is_ready()

    def __call__(self, on: bool) -> None:
        if self._host.stop.is_set():
            return
        answered = threading.Event()
        future = self._client.call_async(SetBool.Request(data=on))
        future.add_done_callback(lambda _: answered.set())
        if not answered.wait(self._timeout_s):
            self._fail(f"no answer from {self._service} within {self._timeout_s:g} s")
        elif not future.result().success:
            self._fail(f"{self._service} refused {on}: {future.result().message}")

    def _fail(self, reason: str) -> None:
        self._host.get_logger().error(f"cannot switch the policy, stopping the run: {reason}")
        self._host.stop.set()


def hosted(make: Callable[[], SimHost], run: Callable[[SimHost], None], thread: str) -> Hosted:
    """The node from `make`, `run(node)` on its own thread started with the spin (it must
    set node.finished when it ends), and the exit condition; a node that cannot be built
    from its parameters is a one-line exit 2."""
    try:
        node = make()
    except (ValueError, TypeError) as error:
        raise CannotStart(str(error), status=2) from None
    runner = threading.Thread(target=run, args=(node,), name=thread, daemon=True)

    def close() -> None:
        node.stop.set()
        if runner.ident is not None:  # started
            runner.join()

    return Hosted(
        node,
        start=runner.start,
        done=lambda: node.exit_when_done and node.finished.is_set(),
        close=close,
    )
