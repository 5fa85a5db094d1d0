"""`oxygen-bag-recover`: a rosbag2 folder's metadata.yaml rebuilt from its complete files.

`BagWriter` writes a bag as a sequence of storage files, each one closed (mcap footer
and summary written) before the next is opened, and rewrites metadata.yaml (bag_metadata)
after every file it closes: a process killed mid-run leaves a folder that rosbags and
`ros2 bag` read, holding every closed file; only the file still open is lost. The file
being written sits in a hidden sub-folder until it is closed, so no reader ever sees a
half-written file.

`recover` rebuilds metadata.yaml from the complete storage files in a folder, for a bag
whose metadata is missing or stale (say a folder copied off a robot without it). A file
counts as complete when rosbags opens it on its own (an mcap needs its footer);
incomplete ones are reported and left alone. Run it as

    oxygen-bag-recover BAG_FOLDER      # or: python -m oxygen_ros.tools.bag_recover BAG_FOLDER
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rosbags.rosbag2 import Reader
from rosbags.rosbag2.errors import ReaderError

from oxygen_ros.tools.bag_metadata import METADATA, SUFFIXES, FileSummary, Topic, write_metadata
from oxygen_ros.tools.bagio import CORRUPT, typestore


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
