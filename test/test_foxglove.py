"""oxygen-config foxglove forwards the node's topics, as CDR with ros2msg schemas, to a websocket.

A client speaking the Foxglove WebSocket protocol (subprotocol foxglove.sdk.v1, the
`websockets` package) reads the server's channel advertisements, subscribes, and decodes
the forwarded bytes with rclpy, as Foxglove in a browser would with the advertised schema.
First a probe publishes one ActionChunk with known fields; then the real node (tiny model,
its own process) runs and every topic it publishes must reach the client.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("foxglove")
websockets_sync = pytest.importorskip("websockets.sync.client")

import rclpy  # noqa: E402
import yaml  # noqa: E402
from builtin_interfaces.msg import Duration  # noqa: E402
from node_harness import Probe, SensorFaults, Spinners  # noqa: E402
from rclpy.serialization import deserialize_message  # noqa: E402

from oxygen_ros import topics  # noqa: E402
from oxygen_ros.msg import ActionChunk  # noqa: E402
from oxygen_ros.tools import foxglove as bridge  # noqa: E402
from oxygen_ros.tools.configure import load_settings  # noqa: E402

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]
_MESSAGE_DATA = 0x01  # server -> client binary opcode: subscription id, log time, payload
_POLL_S = 0.2  # longest a read blocks before the condition is checked again


class Client:
    """A Foxglove WebSocket client: channels by topic, messages by topic."""

    def __init__(self, ws) -> None:  # noqa: ANN001 (a websockets ClientConnection)
        self.ws = ws
        self.received: dict[str, list[bytes]] = {}
        self.channels: dict[str, dict] = {}
        self._topic_of: dict[int, str] = {}

    def receive(self, until, timeout_s: float) -> None:  # noqa: ANN001 (a predicate)
        """Read frames until until() holds; TimeoutError if it does not in time. until()
        is checked at least every _POLL_S, frames or not (it may publish what it waits for)."""
        deadline = time.monotonic() + timeout_s
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the condition did not hold in time")
            try:
                frame = self.ws.recv(timeout=min(left, _POLL_S))
            except TimeoutError:
                continue
            if isinstance(frame, str):
                self._on_text(json.loads(frame))
            elif frame[0] == _MESSAGE_DATA:
                subscription, _log_time = struct.unpack_from("<IQ", frame, 1)
                self.on_message(self._topic_of[subscription], bytes(frame[13:]))

    def _on_text(self, message: dict) -> None:
        if message.get("op") == "advertise":
            for channel in message["channels"]:
                self.channels[channel["topic"]] = channel

    def subscribe(self, topics: list[str]) -> None:
        subscriptions = []
        for topic in topics:
            sub_id = len(self._topic_of) + 1
            self._topic_of[sub_id] = topic
            subscriptions.append({"id": sub_id, "channelId": self.channels[topic]["id"]})
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subscriptions}))

    def on_message(self, topic: str, payload: bytes) -> None:
        self.received.setdefault(topic, []).append(payload)


@pytest.fixture
def served():
    """The bridge for tiny.yaml on a free port, spun in the background.

    The client's queue of frames is unbounded: one that stopped reading with the queue
    full would wait out its close timeout (10 s) for a close frame stuck behind data.
    """
    rclpy.init()
    node, fox, server = bridge.serve(TINY, port=0)
    spinners = Spinners()
    spinners.add(node)
    url = f"ws://127.0.0.1:{server.port}"
    options = {"subprotocols": ["foxglove.sdk.v1"], "max_size": None, "max_queue": None}
    try:
        with websockets_sync.connect(url, **options) as ws:
            yield fox, Client(ws), spinners
    finally:
        server.stop()
        fox.close()
        spinners.shutdown()
        rclpy.shutdown()


def test_every_output_topic_and_camera_is_advertised_with_its_ros2msg_schema(served):
    fox, client, _ = served
    _, names = load_settings(TINY)
    expected = set(names.outputs()) | set(names.cameras)
    client.receive(lambda: set(client.channels) >= expected, timeout_s=30)
    assert set(client.channels) == expected == set(fox.channels)
    chunk = client.channels[names.output(topics.ACTION_CHUNK)]
    assert (chunk["encoding"], chunk["schemaEncoding"]) == ("cdr", "ros2msg")
    assert chunk["schemaName"] == "oxygen_ros/msg/ActionChunk"
    # The definition itself, and the types it uses, e.g. the header's.
    assert "float32[] actions" in chunk["schema"] and "MSG: std_msgs/Header" in chunk["schema"]
    camera = client.channels[names.cameras[0]]
    assert camera["schemaName"] == "sensor_msgs/msg/Image"


def test_a_forwarded_action_chunk_decodes_to_what_was_published(served):
    _, client, spinners = served
    _, names = load_settings(TINY)
    client.receive(lambda: names.output(topics.ACTION_CHUNK) in client.channels, timeout_s=30)
    client.subscribe([names.output(topics.ACTION_CHUNK)])
    publisher_node = spinners.add(rclpy.create_node("chunk_probe"))
    publisher = publisher_node.create_publisher(ActionChunk, names.output(topics.ACTION_CHUNK), 10)
    sent = ActionChunk(
        sequence=41, horizon=2, action_dim=3, actions=[0.5, -1.0, 2.0, 3.25, 0.0, -0.125],
        joint_names=["a", "b", "c"], latency=Duration(sec=0, nanosec=12_000_000),
        deadline_met=True,
    )  # fmt: skip
    sent.header.frame_id = "base_link"

    def arrived() -> bool:
        if names.output(topics.ACTION_CHUNK) not in client.received:
            publisher.publish(sent)  # again until the subscription has matched
            return False
        return True

    client.receive(arrived, timeout_s=30)
    got = deserialize_message(client.received[names.output(topics.ACTION_CHUNK)][0], ActionChunk)
    assert (got.sequence, got.horizon, got.action_dim) == (41, 2, 3)
    assert list(got.actions) == [0.5, -1.0, 2.0, 3.25, 0.0, -0.125]
    assert list(got.joint_names) == ["a", "b", "c"]
    assert (got.latency.nanosec, got.deadline_met, got.header.frame_id) == (
        12_000_000,
        True,
        "base_link",
    )


@pytest.mark.slow
def test_every_topic_of_a_running_node_reaches_the_client(served, tmp_path):
    _, client, spinners = served
    _, names = load_settings(TINY)
    client.receive(lambda: set(names.outputs()) <= set(client.channels), timeout_s=30)
    client.subscribe(sorted(client.channels))
    log = (tmp_path / "node.log").open("w+")
    node = subprocess.Popen(
        [sys.executable, "-m", "oxygen_ros.node", "--ros-args", "--params-file", str(TINY),
         "-p", "autostart:=true"],
        env=os.environ.copy(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    probe = spinners.add(
        Probe(
            cameras=PARAMS["camera_topics"],
            joints=PARAMS["joint_names"],
            streams=PARAMS["stream_names"],
        )  # fmt: skip
    )
    probe.faults = SensorFaults()
    try:
        probe.inbox["/oxygen/action_chunk"].wait_count(1, timeout_s=300)  # active
        probe.enable()  # random weights: the controller output needs ~/enable
        expected = set(client.channels)
        client.receive(lambda: set(client.received) >= expected, timeout_s=300)
    except TimeoutError:
        log.seek(0)
        missing = expected - set(client.received)
        pytest.fail(f"nothing arrived on {sorted(missing)}; node log:\n{log.read()}")
    finally:
        node.terminate()
        node.wait(timeout=30)
    chunk = deserialize_message(client.received[names.output(topics.ACTION_CHUNK)][-1], ActionChunk)
    # rows from d on: the robot runs the d before while the chunk is computed
    assert 1 <= chunk.horizon <= PARAMS["action_horizon"] and chunk.action_dim == 7
    assert len(chunk.actions) == chunk.horizon * 7
    assert list(chunk.joint_names) == PARAMS["joint_names"]
