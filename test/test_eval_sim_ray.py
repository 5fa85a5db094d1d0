"""oxygen-eval manifest's sim tasks on a local Ray instance (slow: Ray start-up and a sim run).

One sim task (the expert on pick seeds 0 and 1, no model: the episodes are
deterministic) runs under oxygen-eval manifest and again directly through sim.evaluate.run_sim_eval.
The task's report.json must equal the direct run's in what is not measured on the wall
clock: the episodes, their seeds, outcomes and steps, and the success rates. Both wall
times are printed (the cost of the Ray path for one batch).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from oxygen_ros.tools.eval.aggregate import aggregate, collect
from oxygen_ros.tools.eval.manifest import load_manifest
from oxygen_ros.tools.eval.tasks import ATTEMPT, MARKER, sim_spec, task_dir
from oxygen_ros.tools.sim.evaluate import run_sim_eval

pytest.importorskip("ray")
from oxygen_ros.tools.eval import cli  # noqa: E402  (imports ray)

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SIM = Path(__file__).resolve().parents[1] / "config" / "sim.yaml"
_EPISODE_KEYS = ("index", "family", "seed", "instruction", "success", "steps", "narration")


def _deterministic(report: dict[str, Any]) -> dict[str, Any]:
    """What a sim report holds that does not depend on wall-clock timing."""
    return {
        "setup": {k: report[k] for k in ("policy", "families", "seeds", "rtf", "camera_size")},
        "episodes_run": report["episodes_run"],
        "success": report["success"],
        "episodes": [{k: e[k] for k in _EPISODE_KEYS} for e in report["episodes"]],
        "time_to_success_s": [e["time_to_success_s"] for e in report["episodes"]],
    }


def test_one_sim_task_on_ray_equals_sim_eval(tmp_path: Path, capsys: pytest.CaptureFixture):
    sim = {"family": "pick", "seeds": {"start": 0, "count": 2}, "rtf": 4, "camera_size": 64}
    manifest = {
        "inputs": {"sim": [sim]},
        "configurations": {"expert": {"params": str(SIM), "policy": "expert"}},
    }
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest))
    out = tmp_path / "out"
    started = time.monotonic()
    assert cli.main([str(path), "--out", str(out), "--no-progress"]) == 0
    ray_s = time.monotonic() - started
    (task,) = load_manifest(path).tasks()
    folder = task_dir(out, task)
    assert folder == out / "pick-seeds0-1" / "expert"
    got = json.loads((folder / "report.json").read_text())

    started = time.monotonic()
    paths = run_sim_eval(sim_spec(task, domain_id=None), tmp_path / "direct")
    direct_s = time.monotonic() - started
    expected = json.loads(paths["json"].read_text())
    print(
        f"one sim task (expert, pick x 2 seeds): oxygen-eval manifest {ray_s:.1f} s, "
        f"direct {direct_s:.1f} s"
    )

    assert _deterministic(got) == _deterministic(expected)
    assert got["seeds"] == [0, 1] and got["families"] == ["pick"]
    assert got["success"]["all"] == {
        "episodes": 2, "successes": 2, "rate": 1.0, "ci95": [0.3424, 1.0]
    }  # fmt: skip
    # The task ran on its worker's own ROS domain (the sim and the recorder both on it, or
    # no outcome would have arrived), recorded in its attempt and its marker.
    attempt = json.loads((folder / ATTEMPT).read_text())
    marker = json.loads((folder / MARKER).read_text())
    assert (
        1 <= attempt["domain_id"] <= 100 and marker["worker"]["domain_id"] == attempt["domain_id"]
    )
    assert (marker["episodes"], marker["successes"], marker["engine_reused"]) == (2, 2, False)
    assert marker["engines_built"] == 0  # the expert starts no node
    assert (folder / "output_bag" / "metadata.yaml").is_file() and (folder / "sim.log").is_file()
    run = json.loads((out / "run.json").read_text())
    assert (run["finished"], run["failed"], run["engines_built"]) == (1, [], 0)
    summary = aggregate(collect(out, [task]))
    assert summary["configurations"]["expert"]["success"]["pick"]["rate"] == 1.0
    assert "Closed-loop success" in (out / "eval_report.md").read_text()
