"""`oxygen-node` as the user runs it: its own process, autostart, Ctrl-C.

    oxygen-node --ros-args --params-file config/tiny.yaml -p autostart:=true

The console script must configure and activate itself, publish action chunks to a node
in another process, and exit cleanly (status 0, no traceback) on SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import rclpy
import yaml
from node_harness import Probe, SensorFaults, Spinners, console_script, start_tiny_node

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]


def test_console_script_autostarts_publishes_and_exits_on_sigint(tmp_path):
    log = (tmp_path / "oxygen-node.log").open("w+")  # a file: a full pipe would block it
    process = start_tiny_node(log)
    rclpy.init()
    probe = Probe(
        cameras=PARAMS["camera_topics"],
        joints=PARAMS["joint_names"],
        streams=PARAMS["stream_names"],
    )
    probe.faults = SensorFaults()
    spinners = Spinners()
    spinners.add(probe)
    try:
        chunks = probe.inbox["/oxygen/action_chunk"].wait_count(3, timeout_s=240)
        assert all(c.msg.action_dim == 7 for c in chunks)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        spinners.shutdown()
        rclpy.shutdown()
    log.seek(0)
    output = log.read()
    assert process.returncode == 0, output
    assert "Traceback" not in output, output
    assert "configured tiny for robot demo" in output


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("control_rate_hz:=20", "decimal point"),
        ("control_rate_hz:=-5.0", "control_rate_hz"),
        # rcl drops this one silently (the params file's 20.0 stands): the node refuses it
        ("control_rate_hz:=fast", "-p control_rate_hz:=fast was not applied"),
    ],
)
def test_a_bad_parameter_at_start_is_one_clear_line_not_a_traceback(value, says):
    result = subprocess.run(
        [console_script(), "--ros-args", "--params-file", str(TINY), "-p", value],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "oxygen-node: bad parameter:" in result.stderr and says in result.stderr
    assert "Traceback" not in result.stderr


def test_an_autostart_that_cannot_configure_exits_with_its_reason():
    """A node that starts itself and fails to configure ends its process (status 1), the
    reason in its log, instead of idling unconfigured where nobody drives its lifecycle."""
    result = subprocess.run(
        [
            console_script(),
            "--ros-args",
            "--params-file",
            str(TINY),
            "-p",
            "autostart:=true",
            "-p",
            "action_horizon:=8",
        ],  # fmt: skip
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "action_horizon=8 exceeds the model's horizon 4" in output
    assert "oxygen-node: autostart failed: the node did not become active" in output
    assert "Traceback" not in output
