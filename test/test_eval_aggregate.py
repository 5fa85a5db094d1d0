"""oxygen-eval manifest's aggregate report from hand-written per-task files: exact numbers.

The tree holds configuration "fast" done on three inputs and "slow" done on one, failed
on one (error.json, no marker) and pending on the third; one input is a closed-loop
batch. A second tree holds only sim batches, as oxygen-eval node writes their reports,
under a model configuration and the expert (no node figures).
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


def _success(**families: tuple[int, int]) -> dict:
    """oxygen-eval node's "success": family -> (successes, episodes), and "all"."""
    rates = {
        f: {"episodes": n, "successes": k, "rate": round(k / n, 4)}
        for f, (k, n) in families.items()
    }
    k, n = sum(k for k, _ in families.values()), sum(n for _, n in families.values())
    return rates | {"all": {"episodes": n, "successes": k, "rate": round(k / n, 4)}}


def _sim(success: dict, seams: int, jump: float, node: dict | None = None) -> dict:
    """A sim report's aggregated fields; `node` adds the model's (absent for the expert)."""
    seam = {"seams": seams, "jump_mean": jump, "jump_max": 2 * jump, "arm_jump_mean": jump / 2}
    seam |= {"jerk_mean": 1.0}
    return {"policy": "model" if node else "expert", "success": success, "seams": seam} | (
        node or {}
    )


REPORTS = {
    ("x", "fast"): _report(100.0, 10.0, 0, {"stale_camera": 2, "missing_camera": 1}, 40),
    ("y", "fast"): _report(200.0, 20.0, 1, {"stale_camera": 0}, 50),
    ("pick-seeds0-3", "fast"): _sim(
        _success(pick=(3, 4)), 5, 0.01, _report(300.0, 60.0, 5, {}, 60)
    ),
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
    assert "success_rate" not in slow["metrics"] and "success" not in slow
    assert fast["metrics"]["seams"] == {"n": 1, "mean": 5, "std": None, "min": 5, "max": 5}
    assert fast["success"] == {
        "pick": {
            "tasks": 1,
            "episodes": 4,
            "successes": 3,
            "rate": 0.75,
            "ci95": [pytest.approx(0.3006, abs=1e-4), pytest.approx(0.9544, abs=1e-4)],
            "task_rate": {"n": 1, "mean": 0.75, "std": None, "min": 0.75, "max": 0.75},
            "seed_range": "other",
        },
        "all": {
            "tasks": 1,
            "episodes": 4,
            "successes": 3,
            "rate": 0.75,
            "ci95": [pytest.approx(0.3006, abs=1e-4), pytest.approx(0.9544, abs=1e-4)],
            "task_rate": {"n": 1, "mean": 0.75, "std": None, "min": 0.75, "max": 0.75},
            "seed_range": "other",
        },
    }
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
        "| fast | 3 | 200 ± 100 | 30 ± 26.5 | 2 ± 2.65 | 1 ± 1.73 | 50 ± 10 | 500 ± 100 | 0.75 "
        "| 5 | 0.01 | 0.005 |\n" in md
    )
    assert "| slow | 1 | 50 | 5 | 7 | 4 | 30 | 300 | - | - | - | - |\n" in md
    assert "| fast | pick | other | 1 | 4 | 3 | 0.75 (0.30-0.95) | 0.75 |\n" in md
    assert "| action Hz | 3 | 200 | 100 | 100 | 300 |" in md
    assert "- y/slow: WorkerDied: gone" in md
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


SIM_INPUTS = (SimInput("pick", 0, 4), SimInput("pick", 4, 2), SimInput("push", 0, 3))
SIM_REPORTS = {
    "oxygen": [
        _sim(_success(pick=(3, 4)), 6, 0.02, _report(10.0, 40.0, 1, {"stale_camera": 1}, 80)),
        _sim(_success(pick=(2, 2)), 2, 0.04, _report(12.0, 44.0, 0, {}, 40)),
        _sim(_success(push=(0, 3)), 7, 0.03, _report(11.0, 42.0, 2, {}, 60)),
    ],
    "expert": [
        _sim(_success(pick=(4, 4)), 3, 0.001),
        _sim(_success(pick=(2, 2)), 1, 0.003),
        _sim(_success(push=(3, 3)), 2, 0.002),
    ],
}


def test_closed_loop_success_from_sim_reports(tmp_path: Path) -> None:
    configs = [
        Configuration("oxygen", Path("/sim.yaml"), (), Resources()),
        Configuration("expert", Path("/sim.yaml"), (), Resources(), policy="expert"),
    ]
    tasks = [Task(i, c) for c in configs for i in SIM_INPUTS]
    for task, report in zip(tasks, SIM_REPORTS["oxygen"] + SIM_REPORTS["expert"], strict=True):
        folder = task_dir(tmp_path, task)
        folder.mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps(report))
        (folder / MARKER).write_text("{}")
    summary = aggregate(collect(tmp_path, tasks))
    oxygen, expert = (summary["configurations"][n] for n in ("oxygen", "expert"))
    # Success rate over tasks: 0.75, 1.0, 0.0.
    rate = oxygen["metrics"]["success_rate"]
    assert (rate["n"], rate["min"], rate["max"]) == (3, 0.0, 1.0)
    assert rate["mean"] == pytest.approx(1.75 / 3, rel=1e-12)
    mean = 1.75 / 3
    var = ((0.75 - mean) ** 2 + (1 - mean) ** 2 + mean**2) / 2
    assert rate["std"] == pytest.approx(math.sqrt(var), rel=1e-12)
    # Pooled: pick 5 of 6 episodes over 2 tasks (task rates 0.75, 1.0), push 0 of 3.
    pick = oxygen["success"]["pick"]
    assert (pick["tasks"], pick["episodes"], pick["successes"]) == (2, 6, 5)
    assert pick["rate"] == pytest.approx(5 / 6, rel=1e-12)
    assert pick["task_rate"]["mean"] == 0.875
    assert pick["task_rate"]["std"] == pytest.approx(0.25 / math.sqrt(2), rel=1e-12)
    assert oxygen["success"]["push"] == {
        "tasks": 1,
        "episodes": 3,
        "successes": 0,
        "rate": 0.0,
        "ci95": [0.0, pytest.approx(0.5615, abs=1e-4)],
        "task_rate": {"n": 1, "mean": 0.0, "std": None, "min": 0.0, "max": 0.0},
        "seed_range": "other",
    }
    everything = oxygen["success"]["all"]
    assert (everything["episodes"], everything["successes"]) == (9, 5)
    assert everything["rate"] == pytest.approx(5 / 9, rel=1e-12)
    assert list(oxygen["success"]) == ["pick", "push", "all"]
    # Next to the node's figures and the seams.
    assert oxygen["metrics"]["action_hz"]["mean"] == 11.0
    assert oxygen["metrics"]["deadline_misses"] == {"n": 3, "mean": 1, "std": 1, "min": 0, "max": 2}
    assert oxygen["metrics"]["skipped_frames"]["max"] == 1
    assert oxygen["metrics"]["seams"]["mean"] == 5
    assert oxygen["metrics"]["seam_jump_mean"]["mean"] == pytest.approx(0.03, rel=1e-12)
    assert oxygen["metrics"]["seam_arm_jump_mean"]["mean"] == pytest.approx(0.015, rel=1e-12)
    # The expert has no node: success and seams only.
    assert set(expert["metrics"]) == {
        "success_rate",
        "seams",
        "seam_jump_mean",
        "seam_arm_jump_mean",
    }
    assert expert["metrics"]["success_rate"]["mean"] == 1.0
    assert expert["success"]["all"]["rate"] == 1.0 and expert["success"]["all"]["episodes"] == 9
    md = write_aggregate(summary, tmp_path)["md"].read_text()
    assert "| oxygen | pick | other | 2 | 6 | 5 | 0.8333 (0.44-0.97) | 0.875 ± 0.177 |\n" in md
    assert "| oxygen | all | other | 3 | 9 | 5 | 0.5556 (0.27-0.81) | 0.5833 ± 0.52 |\n" in md
    assert "| expert | push | other | 1 | 3 | 3 | 1 (0.44-1.00) | 1 |\n" in md
    assert (
        "| expert | 3 | - | - | - | - | - | - | 1 ± 0 | 2 ± 1 | 0.002 ± 0.001 | 0.001 ± 0.0005 |\n"
        in md
    )
