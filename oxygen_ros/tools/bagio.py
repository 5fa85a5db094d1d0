"""rosbag2 files in and out with `rosbags` (pure Python), where rosbag2_py is not installed.

A bag message stays CDR bytes from the file to its consumer: the replay decodes it with
rclpy, so the frame assembler gets the very message classes a live subscription hands
the node, and the live player publishes the bytes as they are. Bags are written in mcap
(zstd chunks, what Foxglove and `ros2 bag` read) or sqlite3, rosbag2 format version 9.

rosbags needs the definitions of this package's own messages to write their connections
and to decode them; they are read from the same `msg/*.msg` files rosidl built the rclpy
classes from (`typestore`).

One rclpy quirk is handled here: `rclpy.serialization.serialize_message` returns the
serializer's estimated size, which can exceed the real CDR size by a few trailing bytes
(a JointTrajectory with empty velocity arrays gets 12). Those bytes are never sent over
DDS, and rosbags rejects them; `to_cdr` cuts them off.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from rclpy.serialization import deserialize_message, serialize_message
from rosbags.interfaces import Connection
from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

Storage = Literal["mcap", "sqlite3"]
STORAGES: tuple[Storage, ...] = ("mcap", "sqlite3")
INTERFACE_PACKAGE = "oxygen_ros"


@dataclasses.dataclass(frozen=True)
class BagMessage:
    """One recorded message: its topic, type, log time and CDR bytes."""

    topic: str
    msgtype: str  # e.g. "sensor_msgs/msg/Image"
    time_ns: int  # when it was recorded (the bag clock)
    data: bytes


# --------------------------------------------------------------------------- types


def interface_dir() -> Path:
    """The folder of this package's .msg files: the checkout, the venv, or a colcon install."""
    candidates = [Path(__file__).resolve().parents[2] / "msg"]  # oxygen_ros/tools/bagio.py
    prefixes = [sys.prefix, *os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)]
    candidates += [Path(p) / "share" / INTERFACE_PACKAGE / "msg" for p in prefixes if p]
    for folder in candidates:
        if any(folder.glob("*.msg")):
            return folder
    raise FileNotFoundError(
        f"no {INTERFACE_PACKAGE} .msg files in any of {[str(c) for c in candidates]}"
    )


@functools.cache
def typestore() -> Typestore:
    """ROS 2 Kilted's standard types plus this package's messages."""
    store = get_typestore(Stores.ROS2_KILTED)
    types: dict[str, Any] = {}
    for path in sorted(interface_dir().glob("*.msg")):
        name = f"{INTERFACE_PACKAGE}/msg/{path.stem}"
        types.update(get_types_from_msg(path.read_text(), name))
    store.register(types)
    return store


def message_class(msgtype: str) -> type:
    """The rclpy class of "pkg/msg/Name" (raises ImportError/AttributeError naming it)."""
    package, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.{kind}"), name)


def type_name(msg: Any) -> str:
    """ "pkg/msg/Name" of an rclpy message (its module is pkg.msg._name)."""
    package, kind = type(msg).__module__.split(".")[:2]
    return f"{package}/{kind}/{type(msg).__name__}"


# --------------------------------------------------------------------------- CDR


def to_cdr(msg: Any) -> bytes:
    """rclpy message -> its exact CDR bytes (rclpy's trailing estimate removed)."""
    data = serialize_message(msg)
    msgtype = type_name(msg)
    msgdef = typestore().get_msgdef(msgtype)
    little_endian = bool(data[1])
    decode = msgdef.deserialize_cdr_le if little_endian else msgdef.deserialize_cdr_be
    _, end = decode(memoryview(data)[4:], 0, msgdef.cls, typestore())
    return bytes(data[: 4 + end])


def from_cdr(data: bytes, msgtype: str) -> Any:
    """CDR bytes -> the rclpy message a subscription of that type would receive."""
    return deserialize_message(data, message_class(msgtype))


# --------------------------------------------------------------------------- reading


def bag_topics(path: Path) -> dict[str, str]:
    """topic -> message type of every connection in the bag."""
    with Reader(path) as reader:
        return {c.topic: c.msgtype for c in reader.connections}


def bag_span_ns(path: Path) -> tuple[int, int]:
    """(first, last) log time of the bag in nanoseconds."""
    with Reader(path) as reader:
        return reader.start_time, reader.end_time - 1


def read_bag(path: Path, topics: Collection[str] | None = None) -> Iterator[BagMessage]:
    """Messages in log-time order (all topics, or those listed), mcap or sqlite3."""
    with Reader(path) as reader:
        connections = [c for c in reader.connections if topics is None or c.topic in topics]
        if not connections:
            return
        for connection, time_ns, data in reader.messages(connections=connections):
            yield BagMessage(connection.topic, connection.msgtype, time_ns, bytes(data))


# --------------------------------------------------------------------------- writing


class BagWriter:
    """A new rosbag2 folder; connections are added as topics first appear.

    Use as a context manager: the metadata is written when it closes.
    """

    def __init__(self, path: Path, storage: Storage = "mcap") -> None:
        if storage not in STORAGES:
            raise ValueError(f"storage {storage!r} is not one of {list(STORAGES)}")
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(Path(path), version=9, storage_plugin=plugin)
        if storage == "mcap":
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._connections: dict[str, Connection] = {}

    def __enter__(self) -> BagWriter:
        self._writer.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._writer.close()

    def write(self, message: BagMessage) -> None:
        """Append CDR bytes; a topic keeps the type it first appeared with."""
        connection = self._connections.get(message.topic)
        if connection is None:
            connection = self._writer.add_connection(
                message.topic, message.msgtype, typestore=typestore()
            )
            self._connections[message.topic] = connection
        elif connection.msgtype != message.msgtype:
            raise ValueError(
                f"topic {message.topic} has type {connection.msgtype}, got {message.msgtype}"
            )
        self._writer.write(connection, message.time_ns, message.data)

    def write_ros(self, topic: str, time_ns: int, msg: Any) -> None:
        """Append an rclpy message."""
        self.write(BagMessage(topic, type_name(msg), time_ns, to_cdr(msg)))
