"""The oxygen node as a child process of a tool, started and stopped as on a robot.

`oxygen-demo` and `oxygen-eval node` run the real node (`python -m oxygen_ros.node`) as its
own process, so its frame loop does not share an interpreter lock with the tool's player,
sim or recorder; it ends with the tool (tools.child_processes).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from oxygen_ros.ros_args import parameter_args
from oxygen_ros.tools import child_processes

_STOP_TIMEOUT_S = 15.0  # for the node to shut down cleanly after Ctrl-C


def start_node(
    params: Path,
    log: IO[bytes],
    overrides: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """The node as its own process: autostart, on the simulated clock of the player. It
    gets SIGTERM if this process dies first (tools.child_processes).

    overrides: parameter values after the params file, as `-p name:=value`.
    env: the process's environment (default: this one's), e.g. with its own ROS_DOMAIN_ID."""
    command = [
        sys.executable, "-m", "oxygen_ros.node",
        "--ros-args", "--params-file", str(params),
        "-p", "use_sim_time:=true", "-p", "autostart:=true",
    ]  # fmt: skip
    command += parameter_args(overrides or {})
    return child_processes.popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def stop_node(node: subprocess.Popen) -> None:
    """Ctrl-C (the node releases the engine and shuts down), then kill if it hangs."""
    if node.poll() is None:
        node.send_signal(signal.SIGINT)
        try:
            node.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
