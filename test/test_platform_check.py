"""`oxygen-node` on a platform it cannot run on says so in one line, before any traceback.

A Humble-like rclpy is this venv's rclpy with `rclpy.event_handler` hidden (an import hook
in a sitecustomize on PYTHONPATH), as Humble's rclpy has no such module; an old Python is
the pyenv Python 3.10, Humble's, running the check on its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from node_harness import console_script

from oxygen_ros.platform_check import SUPPORTED, problem

ROOT = Path(__file__).resolve().parents[1]

_HIDE_EVENT_HANDLER = """
import importlib.abc, sys
class HumbleLike(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "rclpy.event_handler":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, HumbleLike())
"""


def test_this_platform_runs_the_node():
    assert problem() is None


def test_a_humble_like_rclpy_ends_oxygen_node_with_one_line(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(_HIDE_EVENT_HANDLER)
    paths = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    env["ROS_DISTRO"] = "humble"
    result = subprocess.run(
        [console_script(), "--ros-args", "--params-file", str(ROOT / "config" / "tiny.yaml")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "oxygen-node: this rclpy (ROS_DISTRO humble) has no rclpy.event_handler, which Iron "
        f"added; it runs on {SUPPORTED}"
    ]


def _python_3_10() -> str | None:
    """A Python 3.10 that runs (a pyenv shim exists even where that version is not on)."""
    pyenv = Path.home().glob(".pyenv/versions/3.10*/bin/python3.10")
    for candidate in (shutil.which("python3.10"), *map(str, pyenv)):
        ran = candidate and subprocess.run([candidate, "--version"], capture_output=True)
        if ran and ran.returncode == 0:
            return candidate
    return None


PYTHON_3_10 = _python_3_10()


@pytest.mark.skipif(PYTHON_3_10 is None, reason="no Python 3.10 here")
def test_python_3_10_is_refused_in_one_line():
    code = "import sys; from oxygen_ros.platform_check import node_main; sys.exit(node_main([]))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [PYTHON_3_10, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (
        f"oxygen-node: Python 3.10 is older than 3.11; it runs on {SUPPORTED}"
    )
