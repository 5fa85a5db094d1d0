"""A sim node (oxygen-sim, any world) in this process, with a probe node that reads what it
publishes and sends it commands, each in its own rclpy context (test_sim_node,
test_metaworld)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence

import rclpy
from rclpy.context import Context
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy

from oxygen_ros.tools.sim.node import SimNode

# Reliable and deeper than the most any test publishes on one topic (842 joint states): the
# probe's own history never drops a sample that reached it.
PROBE_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


class Probe:
    """A node in its own context that records `topics` and publishes commands."""

    def __init__(self, topics: Sequence[tuple[str, type]], command: tuple[str, type]) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = Node("probe", context=self.context, start_parameter_services=False)
        self.received: dict[str, list] = collections.defaultdict(list)
        self._lock = threading.Lock()
        self.subscriptions = {
            topic: self.node.create_subscription(kind, topic, self._keep(topic), PROBE_QOS)
            for topic, kind in topics
        }
        self.command_topic = command[0]
        self.commands = self.node.create_publisher(command[1], command[0], 10)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _keep(self, topic: str) -> Callable:
        def keep(msg) -> None:
            with self._lock:
                self.received[topic].append(msg)

        return keep

    def get(self, topic: str) -> list:
        with self._lock:
            return list(self.received[topic])

    def wait(self, ready: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def send(self, *commands) -> None:
        """Publish to the matched sim and wait until its reader has acknowledged each one
        (reliable: from then on it is in the sim's reader, not on the way)."""
        assert self.commands.get_subscription_count() > 0, "the sim does not listen"
        for msg in commands:
            self.commands.publish(msg)
        acked = self.commands.wait_for_all_acked(Duration(seconds=60))
        assert acked, "the sim did not acknowledge the commands within 60 s"

    def close(self) -> None:
        self.executor.shutdown()
        self.thread.join()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


class Sim:
    """The sim node of `world` in its own context, its loop on a thread (as oxygen-sim
    runs it) once everything is matched."""

    def __init__(self, world: str, probe: Probe, **parameters) -> None:
        self.probe = probe
        self.context = Context()
        rclpy.init(context=self.context)
        overrides = [Parameter(k, value=v) for k, v in parameters.items()]
        self.node = SimNode(world, context=self.context, parameter_overrides=overrides)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self.spinner.start()
        self.runner = threading.Thread(target=self.node.run, daemon=True)

    def _matched(self) -> bool:
        """Each sim writer sees the probe's reader and each reader sees its writer."""
        probe, writers = self.probe, {p.topic_name: p for p in self.node.publishers}
        readers = [s for s in self.node.subscriptions if s.topic_name == probe.command_topic]
        return (
            all(
                topic in writers and writers[topic].get_subscription_count() > 0
                for topic in probe.subscriptions
            )
            and all(s.get_publisher_count() > 0 for s in probe.subscriptions.values())
            and probe.commands.get_subscription_count() > 0
            and all(r.get_publisher_count() > 0 for r in readers)
        )

    def start(self, *commands) -> None:
        """Start the loop once every topic between the sim and the probe is matched from
        both ends (a sample published before its reader matched is lost: the tests would
        be timing discovery), with `commands` already in the sim's reader."""
        self.probe.wait(self._matched, "the sim and the probe to match")
        if commands:
            self.probe.send(*commands)
        self.runner.start()

    def close(self) -> None:
        self.node.stop.set()
        if self.runner.ident is not None:  # started
            self.runner.join()
        self.executor.shutdown()
        self.spinner.join()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)
