"""`oxygen_ros.spin.run_node`, the start and stop of every node process, in real processes.

A small child process hosts a plain rclpy node through `run_node`, in one of a few modes,
and prints a marker when it reaches the phase under test; the test then signals it and
checks its status, how quickly it ended, and what it printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys, time
from rclpy.node import Node
from oxygen_ros.spin import CannotStart, Hosted, run_node

mode = sys.argv[1]

def build():
    if mode == "cannot":
        raise CannotStart("no such thing", status=3)
    node = Node("spin_probe")
    def start():
        print("started", flush=True)
        if mode == "start":
            time.sleep(600)  # a configure that takes long
    done = (lambda: True) if mode == "done" else None
    return Hosted(node, start=start, done=done, close=lambda: print("closed", flush=True))

code = run_node("spin-probe", build, ["spin-probe"])
print(f"returned {code}", flush=True)
sys.exit(code)
"""


def _start(mode: str, log: Path) -> subprocess.Popen:
    out = log.open("w")  # a file: a full pipe would block the child
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, mode], cwd=ROOT, env=os.environ.copy(),
        stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _wait_for(log: Path, marker: str, process: subprocess.Popen, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while marker not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {marker!r} in {timeout_s} s: {log.read_text()}"
        time.sleep(0.05)  # polling a file for a condition, with a deadline


def _stop(process: subprocess.Popen, signals: list[signal.Signals]) -> float:
    """Send the signals; seconds until the process ended."""
    begin = time.monotonic()
    for signum in signals:
        process.send_signal(signum)
    try:
        process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    return time.monotonic() - begin


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_during_a_long_start_ends_the_process_at_once(tmp_path, signum):
    log = tmp_path / "child.log"
    process = _start("start", log)
    _wait_for(log, "started", process)
    elapsed = _stop(process, [signum])
    output = log.read_text()
    assert process.returncode == 0, output
    assert elapsed < 5.0, output
    assert "Traceback" not in output and "returned" not in output, output  # os._exit


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_spinning_a_node_without_timers_cleans_up(tmp_path, signum):
    log = tmp_path / "child.log"
    process = _start("spin", log)
    _wait_for(log, "started", process)
    elapsed = _stop(process, [signum])
    output = log.read_text()
    assert process.returncode == 0, output
    assert elapsed < 5.0, output
    assert output.count("closed") == 1 and "returned 0" in output, output
    assert "Traceback" not in output, output


def test_a_burst_of_signals_is_one_stop(tmp_path):
    log = tmp_path / "child.log"
    process = _start("spin", log)
    _wait_for(log, "started", process)
    _stop(process, [signal.SIGINT, signal.SIGTERM, signal.SIGINT, signal.SIGTERM] * 3)
    output = log.read_text()
    assert process.returncode == 0, output
    assert output.count("closed") == 1 and "Traceback" not in output, output


def test_done_ends_the_spin_and_cannot_start_is_one_line(tmp_path):
    log = tmp_path / "done.log"
    process = _start("done", log)
    process.wait(timeout=60)
    assert process.returncode == 0
    assert log.read_text().splitlines()[-2:] == ["closed", "returned 0"]

    log = tmp_path / "cannot.log"
    process = _start("cannot", log)
    process.wait(timeout=60)
    assert process.returncode == 3
    assert log.read_text() == "spin-probe: no such thing\nreturned 3\n"
