"""A killed writer loses at most its last mcap chunk: flushes, the record reader, recovery.

Writers are killed with SIGKILL in real subprocesses, as in test_bagio; what they leave is
recovered and read back with rosbags, exactly as a user would after a crash.
"""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from rosbags.rosbag2 import Reader

from oxygen_ros.tools.bag_metadata import METADATA
from oxygen_ros.tools.bag_recover import (
    CHUNK,
    MESSAGE_INDEX,
    McapError,
    SalvagedMcap,
    main,
    records,
    recover,
)
from oxygen_ros.tools.bagio import BagWriter, from_cdr

sys.path.insert(0, str(Path(__file__).parent))
from test_bagio import TOPIC, indices, listed_files, message  # noqa: E402

PERIOD_S = 0.005  # the writer's sleep between messages

# A writer that never stops and reports, after each write, how many messages it wrote.
WRITER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {test_dir!r})
from test_bagio import message
from oxygen_ros.tools.bagio import BagWriter
with BagWriter(Path({bag!r}), split_s={split_s}, flush_s={flush_s}) as writer:
    i = 0
    while True:
        writer.write(message(i))
        i += 1
        print(i, flush=True)
        time.sleep({period_s})
"""


def kill_writer(bag: Path, split_s: float, flush_s: float, until) -> int:
    """Run WRITER, SIGKILL it once until(messages written) holds; the count it reported."""
    code = WRITER.format(
        test_dir=str(Path(__file__).parent),
        bag=str(bag),
        split_s=split_s,
        flush_s=flush_s,
        period_s=PERIOD_S,
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    written, deadline = 0, time.monotonic() + 60
    try:
        for line in child.stdout:
            written = int(line)
            if until(written) or time.monotonic() > deadline:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert until(written), f"the writer stopped after {written} messages"
    return max([written, *map(int, child.stdout.read().split())])


def lost_at_most(flush_s: float) -> int:
    """Messages a kill may lose: those written since the last flush, PERIOD_S apart or more."""
    return int(flush_s / PERIOD_S) + 1


def salvage(path: Path) -> tuple[list[int], str]:
    salvaged = SalvagedMcap(path)
    got = [int(from_cdr(m.data, m.msgtype).data) for m in salvaged]
    return got, salvaged.torn


def flushed_bag(path: Path, count: int) -> Path:
    """A closed one-file bag of `count` messages, one chunk each; its mcap file."""
    with BagWriter(path, split_s=None, flush_s=1e-9) as writer:
        for i in range(count):
            writer.write(message(i))
    return path / f"{path.name}_0.mcap"


def offsets(data: bytes, opcode: int) -> list[int]:
    """Where the records of `opcode` start in an MCAP file's bytes."""
    return [at for at, op, _ in records(io.BytesIO(data), len(data)) if op == opcode]


@pytest.mark.slow
def test_a_writer_killed_inside_its_first_file_keeps_all_but_its_last_chunk(tmp_path: Path):
    bag, flush_s = tmp_path / "out", 0.1
    written = kill_writer(bag, split_s=60, flush_s=flush_s, until=lambda n: n >= 100)
    assert not (bag / METADATA).exists()  # the issue: nothing closed, nothing listed
    assert {p.name for p in bag.iterdir()} == {".out_0"}
    with pytest.raises(FileNotFoundError):  # rosbags cannot open it
        Reader(bag).open()
    recovery = recover(bag)
    got = indices(bag)
    assert got == list(range(len(got)))
    assert written - lost_at_most(flush_s) <= len(got) <= written + 1
    assert recovery.salvaged == [f".out_0/.out_0.mcap into out_0.mcap: {len(got)} messages"]
    assert all(
        re.fullmatch(r"\.out_0/\.out_0\.mcap: \d+ bytes of .+", r) for r in recovery.left_out
    )
    assert sorted(p.name for p in bag.iterdir()) == sorted([METADATA, "out_0.mcap"])
    with Reader(bag) as reader:  # rosbags reads the folder as it is
        assert [c.topic for c in reader.connections] == [TOPIC]
        assert reader.message_count == len(got)
    metadata = (bag / METADATA).read_text()
    assert recover(bag).salvaged == [] and (bag / METADATA).read_text() == metadata


@pytest.mark.slow
def test_a_writer_killed_after_some_files_keeps_all_but_its_last_chunk(tmp_path: Path):
    bag, flush_s = tmp_path / "out", 0.05

    def three_files(n: int) -> bool:
        return n % 10 == 0 and (bag / METADATA).exists() and len(listed_files(bag)) >= 3

    written = kill_writer(bag, split_s=0.2, flush_s=flush_s, until=three_files)
    recover(bag)
    got = indices(bag)
    assert got == list(range(len(got)))
    assert written - lost_at_most(flush_s) <= len(got) <= written + 1
    with Reader(bag) as reader:
        assert reader.message_count == len(got)
    assert listed_files(bag)[:3] == ["out_0.mcap", "out_1.mcap", "out_2.mcap"]


def test_an_open_file_holds_every_message_written_before_a_flush(tmp_path: Path):
    """flush_mcap's reach into rosbags' writer: breaks here if a rosbags upgrade breaks it."""
    with BagWriter(tmp_path / "b", split_s=None, flush_s=1e-9) as writer:
        for i in range(5):
            writer.write(message(i))
        hidden = tmp_path / "b" / ".b_0" / ".b_0.mcap"
        assert salvage(hidden) == (list(range(5)), "")
        assert len(offsets(hidden.read_bytes(), CHUNK)) == 5  # a chunk per flush


def test_the_record_reader_keeps_the_chunks_before_a_cut(tmp_path: Path):
    path = flushed_bag(tmp_path / "b", 10)
    data = path.read_bytes()
    assert salvage(path) == (list(range(10)), "")  # a complete file: read to Data End
    chunk, index = offsets(data, CHUNK)[6], offsets(data, MESSAGE_INDEX)[6]
    cases = {
        chunk + 30: (6, "30 bytes of an incomplete chunk"),
        index + 5: (7, "5 bytes of a record cut inside its opcode and length"),
        index + 12: (7, "12 bytes of an incomplete message index"),
    }
    for cut, (kept, torn) in cases.items():
        path.write_bytes(data[:cut])
        assert salvage(path) == (list(range(kept)), torn)


def test_the_record_reader_stops_at_a_chunk_that_does_not_decode(tmp_path: Path):
    path = flushed_bag(tmp_path / "b", 10)
    data = bytearray(path.read_bytes())
    at = offsets(bytes(data), CHUNK)[3]
    data[at + 60 : at + 64] = b"\xa5" * 4  # inside the compressed records
    path.write_bytes(bytes(data))
    got, torn = salvage(path)
    assert got == [0, 1, 2]
    assert torn.startswith(f"{len(data) - at} bytes of a chunk that does not decode (")


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", "cut inside its header: 0 bytes"),
        (b"\x89MCAP0\r\n\x01\x10", "cut inside its header: 10 bytes"),
        (b"\x89MCAP0\r\n\x01" + (40).to_bytes(8, "little") + b"ros2", "cut inside its header: 21"),
        (b"\x89MCAP0\r\n\x06" + bytes(8), "no header record after the MCAP magic (opcode 0x06)"),
        (b"PK\x03\x04 not mcap", "not an MCAP file (no MCAP magic)"),
    ],
)
def test_the_record_reader_fails_in_one_line_on_a_file_cut_inside_its_header(
    tmp_path: Path, data: bytes, error: str
):
    path = tmp_path / "x.mcap"
    path.write_bytes(data)
    with pytest.raises(McapError) as err:
        list(SalvagedMcap(path))
    assert str(err.value).startswith(error) and "\n" not in str(err.value)


def test_recovery_rewrites_a_torn_top_level_file_in_its_place(tmp_path: Path, capsys):
    bag = tmp_path / "bag"
    with BagWriter(bag, split_s=None, flush_s=1e-9) as writer:
        for i in range(10):
            writer.write(message(i))
    (bag / METADATA).unlink()
    data = (bag / "bag_0.mcap").read_bytes()
    cut = offsets(data, CHUNK)[8] + 30
    (bag / "bag_0.mcap").write_bytes(data[:cut])
    assert main([str(bag)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{bag / METADATA}: 1 files, 8 messages",
        "salvaged bag_0.mcap into bag_0.mcap: 8 messages",
        "left out bag_0.mcap: 30 bytes of an incomplete chunk",
    ]
    assert indices(bag) == list(range(8))
    assert sorted(p.name for p in bag.iterdir()) == ["bag_0.mcap", METADATA]
    info = yaml.safe_load((bag / METADATA).read_text())["rosbag2_bagfile_information"]
    assert info["message_count"] == 8
