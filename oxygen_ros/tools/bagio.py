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

Output bags survive a killed writer. `BagWriter` splits a bag into storage files as rosbag2
does (`<bag>_0.mcap`, `<bag>_1.mcap`, ...) and rewrites metadata.yaml after each
(`bag_metadata`); the file being written sits in a hidden folder `.<bag>_<n>/` until it is
closed, so a reader never sees it. A file is closed by the first write that finds it open
`split_s` seconds of wall time or longer. An mcap file is also flushed while open: the first
write `flush_s` seconds or longer after the last flush (or the opening) ends rosbags' chunk
and hands the file's buffer to the OS (`flush_mcap`), so from its first flush on, the open
file on disk is an MCAP header and complete chunks, perhaps followed by a torn one;
`oxygen-bag recover` (bag_recover) rewrites those chunks as the bag's next complete file.
What SIGKILL can lose is therefore at most the last chunk: the messages written since the
last flush, at most `flush_s` of wall time while messages keep coming (default 0.5 s; a replay
writes every frame and every diagnostics period). There is no timer: after a quiet spell,
the messages from before it wait for the next write. Measured with a message every 5 ms,
8 SIGKILLs 1-4 s into the writing each, then `recover` (`python
scripts/experiments/bag_kill_loss.py --kills 8 --flush-s F`): `flush_s` 0.1 lost 0 to 12
messages, the default 0.5 lost 3 to 89; before flushes, a kill lost the whole open file (up
to `split_s`, and all of a bag killed before its first file closed). A writer killed before
its first flush leaves nothing to recover (the tool says so in one line). A flush reaches the OS,
not the disk: SIGKILL is covered, a power cut is not. sqlite3 files are not flushed (rosbags
commits them only when closed): there a kill loses the open file, up to `split_s` of
messages.

Each rotation rewrites the whole metadata.yaml, which lists every file so far: about 0.2 ms
per closed file with a dozen topics (27 ms at 100 files, 0.38 s at 1800, an hour at the
default 2 s), once per `split_s`; a long recording wants a larger `split_s`. A reader sees a
normal multi-file rosbag2 bag; files are read in order, as rosbag2's sequential reader does.

Reading fails in one line: a corrupt input bag raises `BagReadError` naming the bag and
how many messages were read, so a tool can stop cleanly and keep what it processed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import shutil
import struct
import sys
import time
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from rclpy.serialization import deserialize_message, serialize_message
from rosbags.interfaces import Connection
from rosbags.rosbag2 import CompressionFormat, CompressionMode, Reader, StoragePlugin, Writer
from rosbags.rosbag2.errors import ReaderError
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from oxygen_ros import convert
from oxygen_ros.tools.bag_metadata import FileSummary, Topic, write_metadata

try:  # the zstd module rosbags decompresses mcap chunks with
    from compression import zstd
except ImportError:
    from backports import zstd

Storage = Literal["mcap", "sqlite3"]
STORAGES: tuple[Storage, ...] = ("mcap", "sqlite3")
INTERFACE_PACKAGE = "oxygen_ros"
DEFAULT_SPLIT_S = 2.0  # wall seconds per file
DEFAULT_FLUSH_S = 0.5  # wall seconds between flushes of an open mcap file: what a kill loses
# What rosbags and its decompressor raise on a damaged or truncated file (rosbags' mcap
# reader fails with TypeError, struct.error or IndexError on a file cut short).
CORRUPT = (
    ReaderError,
    zstd.ZstdError,
    struct.error,
    EOFError,
    KeyError,
    IndexError,
    TypeError,
    ValueError,
)


class BagReadError(RuntimeError):
    """An input bag that cannot be read further; the message names it and where."""


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


# --------------------------------------------------------------------------- CDR


def to_cdr(msg: Any) -> bytes:
    """rclpy message -> its exact CDR bytes (rclpy's trailing estimate removed)."""
    data = serialize_message(msg)
    msgtype = convert.msgtype(type(msg))
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
    """Messages in log-time order (all topics, or those listed), mcap or sqlite3.

    Raises BagReadError naming the bag and the messages read before the damage.
    """
    read, last_ns = 0, None
    try:
        with Reader(path) as reader:
            connections = [c for c in reader.connections if topics is None or c.topic in topics]
            if not connections:
                return
            for connection, time_ns, data in reader.messages(connections=connections):
                yield BagMessage(connection.topic, connection.msgtype, time_ns, bytes(data))
                read, last_ns = read + 1, time_ns
    except CORRUPT as error:
        where = f"after message {read} (log time {last_ns} ns)" if read else "before any message"
        raise BagReadError(
            f"bag {path} is unreadable {where}: {type(error).__name__}: {error}"
        ) from error


# --------------------------------------------------------------------------- writing


class BagWriter:
    """A new rosbag2 folder written as closed storage files; connections are added as
    topics first appear.

    Use as a context manager: the last file is closed and the metadata written when it
    closes. split_s: wall-clock seconds per file (None: one file, metadata at the end).
    flush_s: wall-clock seconds between flushes of the open mcap file's chunks to the OS,
    checked at each write: what a kill loses (None: rosbags' own 1 MiB chunks only, and
    they may wait in Python's file buffer; sqlite3 ignores it).
    """

    def __init__(
        self,
        path: Path,
        storage: Storage = "mcap",
        split_s: float | None = DEFAULT_SPLIT_S,
        flush_s: float | None = DEFAULT_FLUSH_S,
    ) -> None:
        if storage not in STORAGES:
            raise ValueError(f"storage {storage!r} is not one of {list(STORAGES)}")
        for name, value in (("split_s", split_s), ("flush_s", flush_s)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, got {value}")
        self.path = Path(path)
        self._storage = storage
        self._split_s = split_s
        self._flush_s = flush_s
        self._types: dict[str, str] = {}  # topic -> msgtype, across files
        self._closed: list[FileSummary] = []
        self._file: _OpenFile | None = None

    def __enter__(self) -> BagWriter:
        self.path.mkdir(parents=True)  # FileExistsError: never overwrite a bag
        self._file = self._open_file()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._close_file()

    def write(self, message: BagMessage) -> None:
        """Append CDR bytes; a topic keeps the type it first appeared with."""
        known = self._types.setdefault(message.topic, message.msgtype)
        if known != message.msgtype:
            raise ValueError(f"topic {message.topic} has type {known}, got {message.msgtype}")
        if self._file is None:
            raise RuntimeError(f"bag {self.path} is not open")
        if self._split_s is not None and self._file.due(self._split_s):
            self._close_file()
            self._file = self._open_file()
        self._file.write(message)

    def write_ros(self, topic: str, time_ns: int, msg: Any) -> None:
        """Append an rclpy message."""
        self.write(BagMessage(topic, convert.msgtype(type(msg)), time_ns, to_cdr(msg)))

    def _open_file(self) -> _OpenFile:
        name = f"{self.path.name}_{len(self._closed)}"
        return _OpenFile(self.path / f".{name}", name, self._storage, self._flush_s)

    def _close_file(self) -> None:
        """Close the open file, move it into the bag and list it in metadata.yaml."""
        if self._file is None:
            return
        summary = self._file.close(self.path)
        self._file = None
        if summary.count or not self._closed:  # an empty file only for an empty bag
            self._closed.append(summary)
        else:
            (self.path / summary.name).unlink()
        write_metadata(self.path, self._closed)


def write_storage_file(bag: Path, name: str, messages: Iterable[BagMessage]) -> FileSummary | None:
    """Write `messages` as the complete mcap file `bag/<name>.mcap`, replacing any file of
    that name in one rename; nothing is written for no message (None). For recovery: the
    file is built in the hidden folder `.<name>.recovering`, first cleared of what a killed
    run may have left there.
    """
    stream = iter(messages)
    first = next(stream, None)  # an error of the source is raised before anything is made
    if first is None:
        return None
    work = bag / f".{name}.recovering"
    shutil.rmtree(work, ignore_errors=True)
    file = _OpenFile(work, name, "mcap", flush_s=None)
    try:
        file.write(first)
        for message in stream:
            file.write(message)
    except BaseException:
        file.abort()
        raise
    return file.close(bag)


def flush_mcap(writer: Writer) -> None:
    """End the chunk rosbags' mcap writer is building and hand the file's bytes to the OS.

    rosbags (0.11) offers no call for this, so this is the one reach into its storage:
    `McapWriter` builds the current chunk in memory (`chunk.bio`) and writes it only past
    1 MiB of records (`close_chunk`), into a buffered file (`bio`). Schema and channel
    records go into the chunk too, so a flushed chunk carries the definitions of its
    messages. test_bag_recover_chunks fails if a rosbags upgrade breaks this.
    """
    storage = writer.storage
    if storage is None or not hasattr(storage, "close_chunk"):
        raise RuntimeError(f"not an open rosbags mcap writer: {type(storage).__name__}")
    if storage.chunk.bio.tell():
        storage.close_chunk()
    storage.bio.flush()


class _OpenFile:
    """One storage file being written in a working folder of its own (hidden) until closed."""

    def __init__(self, work: Path, name: str, storage: Storage, flush_s: float | None) -> None:
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._name = name
        self._hidden = work  # rosbags writes <folder>/<folder name>.<suffix>
        self._flush_s = flush_s if storage == "mcap" else None
        self._writer = Writer(self._hidden, version=9, storage_plugin=plugin)
        if storage == "mcap":
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._writer.open()
        self._connections: dict[str, Connection] = {}
        self._counts: dict[Topic, int] = {}
        self._first_ns, self._last_ns = 2**63 - 1, -(2**63)
        self._opened = self._flushed = time.monotonic()

    def due(self, split_s: float) -> bool:
        """Whether the file holds messages and has been open split_s or longer."""
        return bool(self._counts) and time.monotonic() - self._opened >= split_s

    def write(self, message: BagMessage) -> None:
        connection = self._connections.get(message.topic)
        if connection is None:
            connection = self._writer.add_connection(
                message.topic, message.msgtype, typestore=typestore()
            )
            self._connections[message.topic] = connection
        self._writer.write(connection, message.time_ns, message.data)
        self._flush_if_due()
        topic = Topic(message.topic, message.msgtype, connection.digest)
        self._counts[topic] = self._counts.get(topic, 0) + 1
        self._first_ns = min(self._first_ns, message.time_ns)
        self._last_ns = max(self._last_ns, message.time_ns)

    def _flush_if_due(self) -> None:
        """Flush (this message included) when the last flush is flush_s old or older."""
        now = time.monotonic()
        if self._flush_s is not None and now - self._flushed >= self._flush_s:
            flush_mcap(self._writer)
            self._flushed = now

    def abort(self) -> None:
        """Drop the file unfinished, and its folder."""
        self._writer.abort()
        shutil.rmtree(self._hidden, ignore_errors=True)

    def close(self, bag: Path) -> FileSummary:
        """Finish the file (footer, summary) and move it into `bag`."""
        self._writer.close()
        (stored,) = [p for p in self._hidden.iterdir() if p.name != "metadata.yaml"]
        name = f"{self._name}{stored.suffix}"
        os.replace(stored, bag / name)
        shutil.rmtree(self._hidden)
        if not self._counts:
            return FileSummary(name, 0, 0, {})
        return FileSummary(name, self._first_ns, self._last_ns, dict(self._counts))
