"""metadata.yaml of a rosbag2 folder split into closed files, and its recovery.

`BagWriter` writes a bag as a sequence of storage files, each one closed (mcap footer
and summary written) before the next is opened, and rewrites metadata.yaml after every
file it closes: a process killed mid-run leaves a folder that rosbags and `ros2 bag` read,
holding every closed file; only the file still open is lost. The file being written sits
in a hidden sub-folder until it is closed, so no reader ever sees a half-written file.

`recover` rebuilds metadata.yaml from the complete storage files in a folder, for a bag
whose metadata is missing or stale (say a folder copied off a robot without it). A file
counts as complete when rosbags opens it on its own (an mcap needs its footer);
incomplete ones are reported and left alone. Run it as

    oxygen-bag-recover BAG_FOLDER      # or: python -m oxygen_ros.tools.bag_recover BAG_FOLDER
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from rosbags.rosbag2 import Reader
from rosbags.rosbag2.errors import ReaderError
from rosbags.rosbag2.metadata import dump_qos_v9

try:  # the zstd module rosbags decompresses mcap chunks with
    from compression import zstd
except ImportError:
    from backports import zstd

METADATA = "metadata.yaml"
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
VERSION = 9
SUFFIXES = {".mcap": "mcap", ".db3": "sqlite3"}


@dataclasses.dataclass(frozen=True)
class Topic:
    name: str
    msgtype: str
    digest: str  # rosbag2's type_description_hash (RIHS01)


@dataclasses.dataclass(frozen=True)
class FileSummary:
    """What metadata.yaml says about one closed storage file."""

    name: str  # file name inside the bag folder
    first_ns: int  # earliest log time; meaningless when count is 0
    last_ns: int  # latest log time
    counts: dict[Topic, int]  # messages per topic (topics without messages included)

    @property
    def count(self) -> int:
        return sum(self.counts.values())


def write_metadata(folder: Path, files: Sequence[FileSummary]) -> None:
    """Write metadata.yaml for `files` atomically (temporary file, then rename)."""
    tmp = folder / f".{METADATA}.tmp"
    tmp.write_text(_metadata_yaml(files), "utf8")
    os.replace(tmp, folder / METADATA)


def _metadata_yaml(files: Sequence[FileSummary]) -> str:
    full = [f for f in files if f.count]
    start = min((f.first_ns for f in full), default=0)
    end = max((f.last_ns for f in full), default=0)
    counts: dict[Topic, int] = {}
    for summary in files:
        for topic, n in summary.counts.items():
            counts[topic] = counts.get(topic, 0) + n
    storage = SUFFIXES[Path(files[0].name).suffix] if files else "mcap"
    info = {
        "version": VERSION,
        "storage_identifier": storage,
        "relative_file_paths": [f.name for f in files],
        "duration": {"nanoseconds": end - start},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": sum(counts.values()),
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": topic.name,
                    "type": topic.msgtype,
                    "serialization_format": "cdr",
                    "offered_qos_profiles": dump_qos_v9([]),
                    "type_description_hash": topic.digest,
                },
                "message_count": n,
            }
            for topic, n in counts.items()
        ],
        "compression_format": "",
        "compression_mode": "",
        "files": [
            {
                "path": f.name,
                "starting_time": {"nanoseconds_since_epoch": f.first_ns if f.count else 0},
                "duration": {"nanoseconds": f.last_ns - f.first_ns if f.count else 0},
                "message_count": f.count,
            }
            for f in files
        ],
        "custom_data": None,
        "ros_distro": "rosbags",
    }
    return yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False)


def summarize_file(path: Path) -> FileSummary:
    """Read one storage file's own index (raises ReaderError when it is incomplete)."""
    from oxygen_ros.tools.bagio import typestore  # bagio writes through this module

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


def recover(folder: Path) -> tuple[list[FileSummary], list[str]]:
    """Rewrite metadata.yaml from the complete storage files in `folder`, in name order.

    Returns the files listed and, for every file left out, why.
    """
    kept: list[FileSummary] = []
    skipped: list[str] = []
    candidates = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    for path in sorted(candidates, key=_split_index):
        try:
            kept.append(summarize_file(path))
        except (*CORRUPT, OSError) as error:
            skipped.append(f"{path.name}: {type(error).__name__}: {error}")
    if not kept:
        raise ReaderError(f"no complete storage file in {folder}")
    write_metadata(folder, kept)
    return kept, skipped


def _split_index(path: Path) -> tuple[int, str]:
    """rosbag2 names split files <bag>_<index>: order by index, then by name."""
    stem = path.stem.rpartition("_")[2]
    return (int(stem) if stem.isdigit() else -1, path.name)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-bag-recover`."""
    parser = argparse.ArgumentParser(
        prog="oxygen-bag-recover",
        description="Rebuild a rosbag2 folder's metadata.yaml from its complete storage files.",
    )
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        kept, skipped = recover(args.folder)
    except (ReaderError, OSError) as error:
        print(f"oxygen-bag-recover: {error}", file=sys.stderr)
        return 1
    messages = sum(f.count for f in kept)
    print(f"{args.folder / METADATA}: {len(kept)} files, {messages} messages")
    for reason in skipped:
        print(f"left out {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
