"""Children started by the tools end with their parent (tools.child_processes, closed_loop).

A parent process starts a child the way the tools do, prints its pid and waits; the test
SIGKILLs the parent, which then runs no clean-up at all, and the child must be gone
within a few seconds instead of running on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oxygen_ros.tools import closed_loop, demo
from oxygen_ros.tools.sim import evaluate

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny.yaml"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only"
)

SLEEPER = """
import sys, time
from oxygen_ros.tools.child_processes import popen
child = popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""

NODE = f"""
import time
from pathlib import Path
from oxygen_ros.tools.demo import start_node
node = start_node(Path({str(TINY)!r}), open({os.devnull!r}, "wb"))
print(node.pid, flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether pid is a live process (a zombie waiting to be reaped is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _kill_parent_and_watch_child(parent_code: str) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert _running(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10.0
        while _running(child) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling /proc for a condition, with a deadline
        assert not _running(child), "the child outlived its SIGKILLed parent"
    finally:
        if _running(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_dies_with_its_sigkilled_parent():
    _kill_parent_and_watch_child(SLEEPER)


@pytest.mark.ros
def test_the_oxygen_node_started_by_a_tool_dies_with_it():
    _kill_parent_and_watch_child(NODE)


@pytest.mark.ros
def test_sim_eval_stops_the_node_when_the_sim_fails_to_start(tmp_path, monkeypatch):
    nodes: list[subprocess.Popen] = []

    def start_node(*args):
        nodes.append(demo.start_node(*args))
        return nodes[-1]

    def start_world(*args):
        raise OSError("no simulator (a fault injected by the test)")

    monkeypatch.setattr(closed_loop, "start_node", start_node)
    monkeypatch.setattr(closed_loop, "start_world", start_world)
    try:
        with pytest.raises(OSError, match="fault injected"):
            evaluate.run_sim_eval(evaluate.SimEvalSpec(episodes=1), tmp_path / "out")
        (node,) = nodes
        assert node.poll() is not None, "the node runs on after the sim failed"
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
