"""`oxygen-bag recover`: a killed writer's rosbag2 folder made whole, losing at most a chunk.

`BagWriter` (bagio) writes a bag as a sequence of storage files, each one closed (mcap footer
and summary written) before the next is opened, and rewrites metadata.yaml (bag_metadata)
after every file it closes. The file being written sits in the hidden folder
`.<bag>_<n>/` until it is closed, and its complete chunks are flushed to the OS at least
every `flush_s` (bagio). A process killed mid-run therefore leaves the closed files, listed,
and that unfinished file: an MCAP header and complete chunks, perhaps a torn last one, and
no summary or footer, which rosbags cannot open.

`recover(folder)` makes the folder a bag that rosbags and `ros2 bag` read:
- every storage file that rosbags opens on its own (an mcap needs its footer) is kept;
- every other mcap file, the unfinished one in `.<bag>_<n>/` included, is read record by
  record (`SalvagedMcap`) up to its last complete record, and the messages of its complete
  chunks are rewritten as a complete file named as the bag's next split, `<bag>_<n>.mcap`.
  The original is then deleted: all it held that a reader can decode is in the new file,
  the rest (the torn chunk) is reported with its size, and a copy left in the folder
  would be salvaged a second time by the next run. An mcap from which nothing can be
  salvaged is left alone and reported, as is any file that is not mcap (an unfinished
  sqlite3 file holds nothing: rosbags commits it only when it is closed);
- metadata.yaml is rewritten listing the kept and rewritten files, in split order.
So a bag loses, at a kill, only the messages of its last chunk: those written in the
`flush_s` (default 0.5 s) before the kill. Running `recover` again changes nothing. Run it as

    oxygen-bag recover BAG_FOLDER      # or: python -m oxygen_ros.tools.bag_recover BAG_FOLDER

The MCAP reader here is small on purpose (what `mcap recover` does, for the files rosbags
writes): MCAP is a magic `\\x89MCAP0\\r\\n`, a Header record, then records of an opcode (u8),
a content length (u64, little endian) and the content. rosbags puts Schema, Channel and
Message records inside zstd Chunk records and appends the Chunk's Message Index records
after it; Data End, the summary and the Footer come only at close.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import struct
import sys
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from rosbags.rosbag2 import Reader
from rosbags.rosbag2.errors import ReaderError
from rosbags.typesys.base import TypesysError

from oxygen_ros.tools.bag_metadata import METADATA, SUFFIXES, FileSummary, Topic, write_metadata
from oxygen_ros.tools.bagio import CORRUPT, BagMessage, typestore, write_storage_file, zstd

MAGIC = b"\x89MCAP0\r\n"
HEADER, FOOTER, SCHEMA, CHANNEL, MESSAGE, CHUNK, MESSAGE_INDEX = range(1, 8)  # opcodes
DATA_END = 0x0F
RECORD = struct.Struct("<BQ")  # opcode, content length
NAMES = {
    SCHEMA: "schema",
    CHANNEL: "channel",
    MESSAGE: "message",
    CHUNK: "chunk",
    MESSAGE_INDEX: "message index",
}
DECOMPRESS = {"": bytes, "zstd": zstd.decompress}  # what rosbags writes (no lz4 here)


class McapError(ValueError):
    """An MCAP file with nothing to salvage: not MCAP, or cut inside its header."""


class TornRecord(Exception):
    """Where the decodable part of an MCAP file ends: `size` bytes from there are left out."""

    def __init__(self, size: int, what: str) -> None:
        super().__init__(f"{size} bytes of {what}")


def records(stream: BinaryIO, size: int) -> Iterator[tuple[int, int, bytes]]:
    """(offset, opcode, content) of each complete record after the header of an MCAP stream
    of `size` bytes, up to Data End or the Footer (after Data End comes the summary: an
    index, which a writer rebuilds). Raises McapError for a stream that is not MCAP or is
    cut inside its header, and TornRecord at the first record cut short or invalid
    (opcode 0: a file's tail of zeros).
    """
    _skip_header(stream, size)
    while (offset := stream.tell()) < size:
        if size - offset < RECORD.size:
            raise TornRecord(size - offset, "a record cut inside its opcode and length")
        opcode, length = RECORD.unpack(stream.read(RECORD.size))
        if opcode == 0:
            raise TornRecord(size - offset, "an invalid record (opcode 0x00)")
        if length > size - offset - RECORD.size:
            raise TornRecord(size - offset, f"an incomplete {_name(opcode)}")
        if opcode in (DATA_END, FOOTER):
            return
        yield offset, opcode, stream.read(length)


def _skip_header(stream: BinaryIO, size: int) -> None:
    """Read past the magic and the Header record, or raise McapError saying why not."""
    head = stream.read(len(MAGIC) + RECORD.size)
    if not MAGIC.startswith(head[: len(MAGIC)]):
        raise McapError("not an MCAP file (no MCAP magic)")
    if len(head) == len(MAGIC) + RECORD.size:
        opcode, length = RECORD.unpack_from(head, len(MAGIC))
        if opcode != HEADER:
            raise McapError(f"no header record after the MCAP magic (opcode 0x{opcode:02x})")
        if len(head) + length <= size:
            stream.seek(length, os.SEEK_CUR)
            return
    raise McapError(f"cut inside its header: {size} bytes")


def _name(opcode: int) -> str:
    return NAMES.get(opcode, f"record (opcode 0x{opcode:02x})")


def chunk_records(content: bytes) -> Iterator[tuple[int, bytes]]:
    """(opcode, content) of the records in a Chunk record's content, decompressed and checked
    against the chunk's uncompressed size and CRC (struct.error, KeyError, ValueError or
    zstd's error when they do not match).
    """
    _start, _end, raw_size, crc, name_size = struct.unpack_from("<QQQII", content)
    compression = content[32 : 32 + name_size].decode()
    (data_size,) = struct.unpack_from("<Q", content, 32 + name_size)
    data = content[40 + name_size : 40 + name_size + data_size]
    if len(data) != data_size:
        raise ValueError(f"chunk data of {len(data)} bytes, {data_size} declared")
    raw = DECOMPRESS[compression](data)
    if len(raw) != raw_size or (crc and zlib.crc32(raw) != crc):
        raise ValueError("chunk size or CRC mismatch")
    at = 0
    while at < len(raw):
        opcode, length = RECORD.unpack_from(raw, at)
        body = raw[at + RECORD.size : at + RECORD.size + length]
        if len(body) != length:
            raise ValueError(f"record at {at} of the chunk runs past its end")
        yield opcode, body
        at += RECORD.size + length


def _string(content: bytes, at: int) -> str:
    """The MCAP String (u32 length, UTF-8) at `at`."""
    (size,) = struct.unpack_from("<I", content, at)
    return content[at + 4 : at + 4 + size].decode()


class SalvagedMcap:
    """The messages of an MCAP file read front to back without its index: those of every
    complete chunk (and any outside chunks), in file order, up to the first record that is
    cut short or does not decode. After iterating, `torn` says what was left out
    ("812 bytes of an incomplete chunk"; "" when the file was read to its end).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.torn = ""
        self._types: dict[int, str] = {}  # schema id -> message type
        self._channels: dict[int, tuple[str, str]] = {}  # channel id -> (topic, type)

    def __iter__(self) -> Iterator[BagMessage]:
        self.torn, self._types, self._channels = "", {}, {}
        with self.path.open("rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            try:
                for offset, opcode, content in records(stream, size):
                    yield from self._decode_record(opcode, content, size - offset)
            except TornRecord as torn:
                self.torn = str(torn)

    def _decode_record(self, opcode: int, content: bytes, left: int) -> list[BagMessage]:
        """A top-level record's messages, all or none (TornRecord of `left` bytes)."""
        try:
            inner = list(chunk_records(content)) if opcode == CHUNK else [(opcode, content)]
            return [m for op, body in inner if (m := self._decode(op, body)) is not None]
        except (struct.error, KeyError, ValueError, zstd.ZstdError) as error:
            why = f"{type(error).__name__}: {error}"
            raise TornRecord(left, f"a {_name(opcode)} that does not decode ({why})") from error

    def _decode(self, opcode: int, content: bytes) -> BagMessage | None:
        """Schemas and channels are remembered; a Message becomes a BagMessage."""
        if opcode == SCHEMA:
            (schema_id,) = struct.unpack_from("<H", content)
            self._types[schema_id] = _string(content, 2)
        elif opcode == CHANNEL:
            channel_id, schema_id = struct.unpack_from("<HH", content)
            self._channels[channel_id] = (_string(content, 4), self._types[schema_id])
        elif opcode == MESSAGE:
            channel_id, _sequence, log_time, _publish_time = struct.unpack_from("<HIQQ", content)
            topic, msgtype = self._channels[channel_id]
            return BagMessage(topic, msgtype, log_time, content[22:])
        return None


@dataclasses.dataclass(frozen=True)
class Recovery:
    """What `recover` did to a folder."""

    files: list[FileSummary]  # listed in metadata.yaml, in split order
    salvaged: list[str]  # "SOURCE into NAME: N messages"
    left_out: list[str]  # "PATH: why"


def summarize_file(path: Path) -> FileSummary:
    """Read one storage file's own index (raises ReaderError when it is incomplete)."""
    store = typestore()
    with Reader(path) as reader:
        # A storage file alone carries no type hash; it is the message definition's.
        counts = {
            Topic(c.topic, c.msgtype, c.digest or store.hash_rihs01(c.msgtype)): c.msgcount
            for c in reader.connections
        }
        if reader.message_count:
            first, last = reader.start_time, reader.end_time - 1
        else:
            first = last = 0
    return FileSummary(path.name, first, last, counts)


def recover(folder: Path) -> Recovery:
    """Keep the complete storage files of `folder`, rewrite the complete chunks of the others
    (mcap) as new complete files, and write metadata.yaml listing them all.

    Raises ReaderError when no file is left to list.
    """
    kept: list[FileSummary] = []
    salvaged: list[str] = []
    left_out: list[str] = []
    unfinished = _unfinished_files(folder)
    for path in _storage_files(folder):
        try:
            kept.append(summarize_file(path))
        except (*CORRUPT, OSError) as error:
            if path.suffix == ".mcap":
                unfinished.append(path)
            else:
                left_out.append(f"{path.name}: {type(error).__name__}: {error}")
    for path in sorted(unfinished, key=_split_index):
        summary, note = _salvage(folder, path)
        name = path.relative_to(folder)
        if summary is not None:
            kept.append(summary)
            salvaged.append(f"{name} into {summary.name}: {summary.count} messages")
        if note:
            left_out.append(f"{name}: {note}")
    if not kept:
        raise ReaderError(f"no complete storage file in {folder}")
    kept.sort(key=lambda f: _split_index(Path(f.name)))
    write_metadata(folder, kept)
    return Recovery(kept, salvaged, left_out)


def _storage_files(folder: Path) -> list[Path]:
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES]
    return sorted(files, key=_split_index)


def _unfinished_files(folder: Path) -> list[Path]:
    """The files `BagWriter` was writing: `.<bag>_<n>/<anything>.mcap` or `.db3`."""
    hidden = re.compile(rf"\.{re.escape(folder.name)}_\d+")
    return [
        path
        for sub in folder.iterdir()
        if sub.is_dir() and hidden.fullmatch(sub.name)
        for path in sub.iterdir()
        if path.suffix in SUFFIXES
    ]


def _salvage(folder: Path, source: Path) -> tuple[FileSummary | None, str]:
    """Rewrite what `SalvagedMcap` reads of `source` as the folder's next split and delete
    `source` (its hidden folder too). Returns the new file's summary (None when nothing
    was salvaged and nothing changed) and what was left out ("" for nothing).
    """
    if source.suffix != ".mcap":
        return None, "an unfinished sqlite3 file (rosbags commits it only when it is closed)"
    salvage = SalvagedMcap(source)
    try:
        summary = write_storage_file(folder, _next_split(folder, source), salvage)
    except (McapError, TypesysError, OSError) as error:
        return None, str(error)
    if summary is None:
        return None, salvage.torn or "no message"
    if source.parent != folder:
        shutil.rmtree(source.parent)
    elif source.name != summary.name:
        source.unlink()
    return summary, salvage.torn


def _next_split(folder: Path, source: Path) -> str:
    """<bag>_<n> after every storage file of the folder but `source` (whose name it may take)."""
    indices = [_split_index(p)[0] for p in _storage_files(folder) if p != source]
    return f"{folder.name}_{max(indices, default=-1) + 1}"


def _split_index(path: Path) -> tuple[int, str]:
    """rosbag2 names split files <bag>_<index>: order by index, then by name."""
    stem = path.stem.rpartition("_")[2]
    return (int(stem) if stem.isdigit() else -1, path.name)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-bag recover`."""
    parser = argparse.ArgumentParser(
        prog="oxygen-bag recover",
        description="Make a killed writer's rosbag2 folder readable: keep its complete "
        "storage files, rewrite the complete chunks of unfinished mcap files, and rebuild "
        "metadata.yaml.",
    )
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        recovery = recover(args.folder)
    except (ReaderError, OSError) as error:
        print(f"oxygen-bag recover: {error}", file=sys.stderr)
        return 1
    messages = sum(f.count for f in recovery.files)
    print(f"{args.folder / METADATA}: {len(recovery.files)} files, {messages} messages")
    for line in recovery.salvaged:
        print(f"salvaged {line}")
    for reason in recovery.left_out:
        print(f"left out {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
