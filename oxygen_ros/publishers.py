"""The node's lifecycle publishers: the table of outputs (oxygen_ros.topics) on DDS.

Created at configure, destroyed at cleanup. Every publish goes through the node's `LifecycleGate`:
deactivation closes it before anything else, so a frame still running on the worker
publishes nothing once the node is inactive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rclpy.duration import Duration
from rclpy.event_handler import PublisherEventCallbacks
from rclpy.lifecycle import LifecycleNode, LifecyclePublisher
from rclpy.qos import QoSProfile, ReliabilityPolicy

from oxygen_ros import topics
from oxygen_ros.params import NodeConfig
from oxygen_ros.topics import Key, LifecycleGate

_ACK_WAIT = Duration(seconds=1.0)


class LifecyclePublishers:
    """An `OutputPort` over one lifecycle publisher per row of the table."""

    def __init__(
        self,
        node: LifecycleNode,
        cfg: NodeConfig,
        gate: LifecycleGate,
        on_deadline_missed: Callable[[int], None],
    ) -> None:
        self._node, self._gate = node, gate
        self._on_deadline_missed = on_deadline_missed
        # The robot needs a chunk every frame period: a QoS deadline lets DDS flag a silent
        # publisher, and subscribers may ask for one. It is offered with a margin
        # (qos_deadline_factor x the period): chunks go out one period apart only on
        # average, and a deadline of exactly one period fired for most of them with no
        # real miss. Events are counted once, on the chunk publisher (the trajectory has the
        # same frames), and apart from the misses the node measures itself.
        events = PublisherEventCallbacks(deadline=self._deadline_missed)
        self._publishers: dict[Key, LifecyclePublisher] = {}
        for t in topics.output_topics(cfg):
            qos: QoSProfile | int = t.output.depth
            if t.output.deadline:
                qos = QoSProfile(
                    depth=t.output.depth,
                    reliability=ReliabilityPolicy.RELIABLE,
                    deadline=Duration(seconds=cfg.qos_deadline_s),
                )
            extra = {"event_callbacks": events} if t.output.name == topics.ACTION_CHUNK else {}
            self._publishers[t.key] = node.create_lifecycle_publisher(
                t.output.msg_class, t.topic, qos, **extra
            )

    def publish(self, name: str, msg: Any, stream: str | None = None) -> bool:
        """Publish unless the gate is closed; False when the message was dropped."""
        publisher = self._publishers[(name, stream)]
        return self._gate.run(lambda: publisher.publish(msg))

    def _deadline_missed(self, info: Any) -> None:
        """DDS keeps counting missed deadlines while the node is inactive and silent on
        purpose: only misses while open are the node's."""
        self._gate.run(lambda: self._on_deadline_missed(info.total_count_change))

    def destroy(self) -> None:
        """The controller's subscribers get the last hold before its publisher goes (a
        reliable sample the writer still holds dies with it), waiting at most _ACK_WAIT."""
        for (name, _), publisher in self._publishers.items():
            if name == topics.JOINT_TRAJECTORY:  # one per trajectory controller
                publisher.wait_for_all_acked(_ACK_WAIT)
        for publisher in self._publishers.values():
            self._node.destroy_lifecycle_publisher(publisher)
        self._publishers.clear()
