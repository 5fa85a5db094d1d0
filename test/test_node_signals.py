"""`oxygen-node` stops cleanly on SIGINT and SIGTERM, whenever they come.

A burst of SIGINTs: the first stops it, the rest are ignored.

Under `ros2 launch` in a terminal, Ctrl-C reaches the node twice (the terminal signals the
process group, then launch forwards its own SIGINT); the second used to land while the
engine was being released, or in JAX's exit handler, ending the node with status -2 or a
KeyboardInterrupt traceback. Here the running node gets SIGINT five times, 20 ms apart,
which covers its whole cleanup, and must still exit 0 without a traceback.

The stop holds the robot: the trajectory publisher's last message is the hold. A second
signal sends the node's hold at once, on a thread of its own (StopRequest, in this process).

SIGTERM (how `ros2 launch` and systemd stop a node) during start-up: rclpy's own handler
used to shut the context down under the running configure, which went on for seconds,
then failed against the dead context (or spun forever when the shutdown raced the spin).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import rclpy
import yaml
from node_harness import Probe, SensorFaults, Spinners, stamp_s, start_tiny_node

from oxygen_ros.spin import StopRequest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]


def test_repeated_sigint_during_shutdown_still_exits_cleanly(tmp_path):
    log = (tmp_path / "oxygen-node.log").open("w+")  # a file: a full pipe would block it
    process = start_tiny_node(log)
    rclpy.init()
    probe = Probe(
        cameras=PARAMS["camera_topics"], joints=PARAMS["joint_names"],
        streams=PARAMS["stream_names"],
    )  # fmt: skip
    probe.faults = SensorFaults()
    spinners = Spinners()
    spinners.add(probe)
    try:
        probe.inbox["/oxygen/action_chunk"].wait_count(2, timeout_s=240)  # running, active
        probe.enable()
        trajectories = probe.inbox["/oxygen/joint_trajectory"]
        trajectories.wait_count(1, timeout_s=10)  # matched: the hold will reach the probe
        for _ in range(5):
            if process.poll() is not None:
                break
            process.send_signal(signal.SIGINT)
            time.sleep(0.02)  # pacing the burst, not waiting for a condition
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        spinners.shutdown()
        rclpy.shutdown()
    log.seek(0)
    output = log.read()
    assert process.returncode == 0, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    last = trajectories.items()[-1].msg
    assert len(last.points) == 1 and stamp_s(last.header.stamp) == 0.0, "the last is a hold"
    assert "holding the robot where it is" in output, output


def test_a_second_stop_signal_runs_the_hold_once_on_its_own_thread():
    held: list[str] = []
    done = threading.Event()

    def hold() -> None:
        held.append(threading.current_thread().name)
        done.set()

    stop = StopRequest(on_repeat=hold)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    stop.install()
    try:
        signal.raise_signal(signal.SIGTERM)
        assert stop.signal == signal.SIGTERM and held == []
        for _ in range(3):
            signal.raise_signal(signal.SIGINT)
        assert done.wait(5)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert stop.signal == signal.SIGTERM
    assert held == ["oxygen-hold"]


def _wait_for(log, marker: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while marker not in Path(log.name).read_text():
        assert process.poll() is None, Path(log.name).read_text()
        assert time.monotonic() < deadline, f"no {marker!r} within {timeout_s} s"
        time.sleep(0.05)  # polling the log for a condition, with a deadline


@pytest.mark.parametrize("after_s", [None, 0.0, 0.5, 2.0])
def test_sigterm_during_start_up_ends_the_node_promptly(tmp_path, after_s):
    """after_s: seconds after the node logs that autostart configures (None: 0.3 s after
    the spawn, while Python still imports, where the default action ends it: 143)."""
    log = (tmp_path / "oxygen-node.log").open("w+")
    process = start_tiny_node(log)
    try:
        if after_s is None:
            time.sleep(0.3)  # a moment after the spawn, not a condition
        else:
            _wait_for(log, "autostart: configuring", process, timeout_s=120)
            time.sleep(after_s)  # into the configure, not waiting for a condition
        begin = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        elapsed = time.monotonic() - begin
    finally:
        if process.poll() is None:
            process.kill()
    log.seek(0)
    output = log.read()
    assert process.returncode in (0, -signal.SIGTERM), output
    assert elapsed < 20, output
    assert "Traceback" not in output and "configure failed" not in output, output
    assert "context is invalid" not in output, output
