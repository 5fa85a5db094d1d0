"""oxygen-eval's aggregate report from hand-written per-task files: exact numbers.

The tree holds configuration "fast" done on three inputs and "slow" done on one, failed
on one (error.json, no marker) and pending on the third; one input is a closed-loop
batch whose report carries success_rate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from oxygen_ros.tools.eval.aggregate import aggregate, collect, write_aggregate
from oxygen_ros.tools.eval.manifest import BagInput, Configuration, Resources, SimInput, Task
from oxygen_ros.tools.eval.tasks import ERRORS, MARKER, task_dir

pytestmark = pytest.mark.ros  # the modules import rclpy message types

INPUTS = (BagInput("x", Path("/bags/x")), BagInput("y", Path("/bags/y")), SimInput("pick", 0, 4))
CONFIGS = tuple(Configuration(n, Path("/p.yaml"), (), Resources()) for n in ("fast", "slow"))


def _report(hz: float, tps: float, misses: int, skipped: dict, frames: int, **extra) -> dict:
    return {
        "action_hz": hz,
        "lang_tps": tps,
        "deadline_misses": misses,
        "skipped_frames": skipped,
        "frames": frames,
        "tokens": 10 * frames,
        **extra,
    }


REPORTS = {
    ("x", "fast"): _report(100.0, 10.0, 0, {"stale_camera": 2, "missing_camera": 1}, 40),
    ("y", "fast"): _report(200.0, 20.0, 1, {"stale_camera": 0}, 50),
    ("pick-seeds0-3", "fast"): _report(300.0, 60.0, 5, {}, 60, success_rate=0.75),
    ("x", "slow"): _report(50.0, 5.0, 7, {"bad_image": 4}, 30),
}


@pytest.fixture
def tree(tmp_path: Path) -> list[Task]:
    tasks = [Task(i, c) for c in CONFIGS for i in INPUTS]
    for task in tasks:
        folder = task_dir(tmp_path, task)
        folder.mkdir(parents=True)
        report = REPORTS.get((task.input.name, task.config.name))
        if report is not None:
            (folder / "report.json").write_text(json.dumps(report))
            (folder / MARKER).write_text("{}")
    failed = task_dir(tmp_path, tasks[4])  # y/slow
    attempts = [
        {"type": "ValueError", "message": "first"},
        {"type": "WorkerDied", "message": "gone"},
    ]
    (failed / ERRORS).write_text(json.dumps({"task": "y/slow", "attempts": attempts}))
    return tasks


def test_statuses_and_spread(tmp_path: Path, tree: list[Task]) -> None:
    outcomes = collect(tmp_path, tree)
    assert [o.status for o in outcomes] == ["done"] * 3 + ["done", "failed", "pending"]
    summary = aggregate(outcomes)
    assert summary["tasks"] == {"done": 4, "failed": 1, "pending": 1}
    assert summary["failed"] == [{"task": "y/slow", "error": "WorkerDied: gone"}]
    fast = summary["configurations"]["fast"]
    assert fast["tasks"] == {"done": 3, "failed": 0, "pending": 0}
    assert fast["metrics"]["action_hz"] == {
        "n": 3,
        "mean": 200.0,
        "std": 100.0,
        "min": 100.0,
        "max": 300.0,
    }
    tps = fast["metrics"]["lang_tps"]
    assert (tps["mean"], tps["min"], tps["max"]) == (30.0, 10.0, 60.0)
    assert tps["std"] == pytest.approx(math.sqrt(700.0), rel=1e-12)  # (400 + 100 + 900) / 2
    assert fast["metrics"]["skipped_frames"] == {
        "n": 3,
        "mean": 1.0,
        "std": math.sqrt(3.0),
        "min": 0,
        "max": 3,
    }
    assert fast["metrics"]["deadline_misses"]["mean"] == 2.0
    assert fast["metrics"]["tokens"]["mean"] == 500.0
    # Success rate only where closed-loop: one input of "fast", none of "slow".
    assert fast["metrics"]["success_rate"] == {
        "n": 1,
        "mean": 0.75,
        "std": None,
        "min": 0.75,
        "max": 0.75,
    }
    slow = summary["configurations"]["slow"]
    assert slow["tasks"] == {"done": 1, "failed": 1, "pending": 1}
    assert slow["metrics"]["action_hz"] == {
        "n": 1,
        "mean": 50.0,
        "std": None,
        "min": 50.0,
        "max": 50.0,
    }
    assert slow["metrics"]["skipped_frames"]["mean"] == 4.0
    assert "success_rate" not in slow["metrics"]
    assert slow["inputs"] == {
        "x": {
            "action_hz": 50.0,
            "lang_tps": 5.0,
            "deadline_misses": 7,
            "skipped_frames": 4,
            "frames": 30,
            "tokens": 300,
        }
    }


def test_files(tmp_path: Path, tree: list[Task]) -> None:
    summary = aggregate(collect(tmp_path, tree))
    paths = write_aggregate(summary, tmp_path)
    assert json.loads(paths["json"].read_text()) == summary
    md = paths["md"].read_text()
    assert (
        "| fast | 3 | 200 ± 100 | 30 ± 26.5 | 2 ± 2.65 | 1 ± 1.73 | 50 ± 10 | 500 ± 100 | 0.75 |"
        in md
    )
    assert "| slow | 1 | 50 | 5 | 7 | 4 | 30 | 300 | - |" in md
    assert "| action Hz | 3 | 200 | 100 | 100 | 300 |" in md
    assert "- y/slow: WorkerDied: gone" in md
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
