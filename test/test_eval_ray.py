"""oxygen-eval manifest end to end on a local Ray instance (slow: Ray start-up and engine compiles).

One run covers what needs Ray: two generated bags x three configurations on two
workers. "oxygen" samples narration at temperature 0.8, so its tokens depend on the
request ids and the seed, which a reused engine must restart; "broken" names an empty
checkpoint folder, so its tasks raise in the worker and are recorded after one retry
while the others finish; and a watcher SIGKILLs the worker process while it replays
s2/oxygen, which must be retried on a new worker and complete. Every finished task's
report.json and output bag must equal a sequential replay_offline of the same bag and
configuration (the deterministic fields; times are measured). A rerun then does no work.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from oxygen_ros.tools.bagio import from_cdr, read_bag
from oxygen_ros.tools.demo_bag import Scene, scene_topics, write_scene
from oxygen_ros.tools.eval.manifest import load_manifest
from oxygen_ros.tools.eval.tasks import ATTEMPT, ERRORS, MARKER
from oxygen_ros.tools.replay import replay_offline
from oxygen_ros.tools.replay_job import OUTPUT_BAG, Job
from oxygen_ros.tools.report import MEASURED_KEYS, MEASURED_SERIES

pytest.importorskip("ray")
from oxygen_ros.tools.eval import cli  # noqa: E402  (imports ray)

pytestmark = [pytest.mark.ros, pytest.mark.slow]

TINY = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
GOOD = {
    "oxygen": {"engine_mode": "oxygen", "steps_per_frame": 2, "streams.narration.temperature": 0.8},
    "isolated": {"engine_mode": "isolated", "steps_per_frame": 2},
}
KILLED = ("s2", "oxygen")


def _deterministic(report: dict[str, Any]) -> dict[str, Any]:
    """A report without what is measured on the wall clock."""
    kept = {k: v for k, v in report.items() if k not in MEASURED_KEYS}
    kept["timeline"] = {k: v for k, v in report["timeline"].items() if k not in MEASURED_SERIES}
    return kept


def _bag_view(folder: Path) -> list[tuple]:
    """Every output message's topic and bag time; the content of the deterministic ones."""
    view = []
    for message in read_bag(folder / OUTPUT_BAG):
        msg = from_cdr(message.data, message.msgtype)
        kind = message.msgtype.rsplit("/", 1)[-1]
        if kind == "ActionChunk":
            content: Any = (msg.sequence, np.asarray(msg.actions, np.float32).tobytes())
        elif kind == "LanguageTokens":
            content = (msg.request_id, msg.stream, tuple(msg.token_ids), msg.text, msg.finished)
        elif kind == "String":
            content = msg.data
        else:  # stats, diagnostics, markers, trajectories: times inside or derived
            content = None
        view.append((message.topic, message.time_ns, content))
    return view


class _Killer(threading.Thread):
    """SIGKILLs the worker process of one task while it replays (output bag begun, no marker)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder = folder
        self.killed: int | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            attempt = self.folder / ATTEMPT
            if (self.folder / OUTPUT_BAG).exists() and not (self.folder / MARKER).exists():
                self.killed = json.loads(attempt.read_text())["pid"]
                os.kill(self.killed, signal.SIGKILL)
                return
            time.sleep(0.005)


def test_eval_on_local_ray(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    topics = scene_topics(TINY)
    for seed in (1, 2):
        write_scene(tmp_path / "bags" / f"s{seed}", Scene(seconds=3.0, seed=seed), topics)
    (tmp_path / "empty_checkpoint").mkdir()
    configurations = {
        name: {"params": str(TINY), "overrides": overrides} for name, overrides in GOOD.items()
    }
    broken = {"params": str(TINY), "overrides": {"checkpoint_dir": "empty_checkpoint"}}
    manifest = {"inputs": {"bags": ["bags/s*"]}, "configurations": configurations}
    path = tmp_path / "manifest.yaml"
    everything = {**manifest, "configurations": {**configurations, "broken": broken}}
    path.write_text(yaml.safe_dump(everything))
    out = tmp_path / "out"

    killer = _Killer(out / KILLED[0] / KILLED[1])
    killer.start()
    started = time.monotonic()
    args = ["--workers", "2", "--retries", "1", "--no-progress"]
    status = cli.main([str(path), "--out", str(out), *args])
    elapsed = time.monotonic() - started
    killer.stop.set()
    printed = capsys.readouterr().out
    print(f"oxygen-eval manifest: 6 tasks, 2 workers, {elapsed:.1f} s\n{printed}")
    assert status == 1  # the broken configuration's tasks failed

    # Failure isolation: both broken tasks recorded with both attempts, others done.
    for bag in ("s1", "s2"):
        errors = json.loads((out / bag / "broken" / ERRORS).read_text())["attempts"]
        assert [(e["attempt"], e["type"]) for e in errors] == [
            (1, "FileNotFoundError"),
            (2, "FileNotFoundError"),
        ]
        assert "no Orbax params" in errors[0]["message"]
        assert not (out / bag / "broken" / MARKER).exists()
    run = json.loads((out / "run.json").read_text())
    assert sorted(run["failed"]) == ["s1/broken", "s2/broken"]
    assert (run["finished"], run["retried"]) == (4, 3)  # 2 broken retries + the killed one

    # The killed worker lost only its task, which was retried on a new worker and completed.
    assert killer.killed is not None
    folder = out / KILLED[0] / KILLED[1]
    died = json.loads((folder / ERRORS).read_text())["attempts"]
    assert [(e["type"], e["worker"]["pid"]) for e in died] == [("WorkerDied", killer.killed)]
    marker = json.loads((folder / MARKER).read_text())
    assert marker["attempts"] == 2 and marker["worker"]["pid"] != killer.killed

    # Every finished task equals a sequential replay of the same bag and configuration.
    tasks = {t.id: t for t in load_manifest(path).tasks()}
    for bag in ("s1", "s2"):
        for name in GOOD:
            task = tasks[f"{bag}/{name}"]
            ref = tmp_path / "ref" / bag / name
            job = Job.load(task.input.path, task.config.params, ref, task.config.override_dict())
            expected = replay_offline(job, progress=False)
            got = json.loads((out / bag / name / "report.json").read_text())
            assert _deterministic(got) == _deterministic(expected), task.id
            assert _bag_view(out / bag / name) == _bag_view(ref), task.id
            assert expected["tokens"] > 0 and expected["frames"] == 29  # 30 ticks, the first
            # before any input
    # Workers kept their engine: which tasks reused one depends on timing, but some did.
    markers = [json.loads(p.read_text()) for p in out.glob(f"*/*/{MARKER}")]
    assert any(m["engine_reused"] for m in markers)
    assert run["engines_built"] == sum(not m["engine_reused"] for m in markers)

    # A rerun of the finished configurations does no work (no Ray starts).
    path.write_text(yaml.safe_dump(manifest))
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*/report.json")}
    assert cli.main([str(path), "--out", str(out), "--no-progress"]) == 0
    assert "0 tasks run, 4 finished before, 0 failed" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*/report.json")} == stamps
