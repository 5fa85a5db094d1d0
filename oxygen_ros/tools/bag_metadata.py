"""metadata.yaml of a rosbag2 folder: what it says about each storage file, and its writer.

`BagWriter` (bagio) rewrites metadata.yaml after every file it closes, and `recover`
(bag_recover) rebuilds it from the complete files of a folder and those it rewrites from
unfinished ones; both describe the files as `FileSummary`s and write them with
`write_metadata`, in rosbag2 format version 9.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

import yaml
from rosbags.rosbag2.metadata import dump_qos_v9

METADATA = "metadata.yaml"
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
