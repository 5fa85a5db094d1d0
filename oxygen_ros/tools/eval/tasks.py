"""A task's folder in the output tree, its markers, and what a worker runs for it.

`OUT/<input>/<configuration>/` holds what oxygen-replay writes (output_bag/,
report.json, report.md, timeline.png, replay.log) and three files of the tool's own:

- attempt.json: the attempt now running (worker pid and host), written first, so an
  operator (or a test) can see which process runs which task;
- error.json: every failed attempt, by the driver: the error, its traceback, the worker;
- task.json: the completion marker, written by the driver last and atomically (a
  temporary file renamed) once the worker has returned, so a task with a marker has
  every file. It holds the task's fingerprint (input, params file hash, overrides): a
  rerun into the same folder with a configuration of the same name but other settings
  is refused instead of mixing results.

An attempt starts by clearing what an earlier, interrupted attempt left (all but
error.json), because a replay refuses to write into an existing output bag.

This module imports no Ray: runner.py makes `Worker` a Ray actor.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from oxygen_ros.pipeline import Pipeline, make_pipeline
from oxygen_ros.tools.eval.manifest import BagInput, Task, describe
from oxygen_ros.tools.job import Job
from oxygen_ros.tools.replay import replay_offline

MARKER, ERRORS, ATTEMPT = "task.json", "error.json", "attempt.json"


class NotRunnable(RuntimeError):
    """A task kind the manifest accepts but this installation cannot run yet."""


class StaleOutput(RuntimeError):
    """The output folder holds a finished task that was run with other settings."""


# --------------------------------------------------------------------------- output tree


def task_dir(root: Path, task: Task) -> Path:
    return Path(root) / task.input.name / task.config.name


def fingerprint(task: Task) -> dict[str, Any]:
    """What makes a finished task's results valid for this task."""
    source: Any = str(task.input.path) if isinstance(task.input, BagInput) else vars(task.input)
    return {
        "kind": task.input.kind,
        "input": source,
        "params_sha256": hashlib.sha256(task.config.params.read_bytes()).hexdigest(),
        "overrides": task.config.override_dict(),
    }


def is_done(root: Path, task: Task) -> bool:
    """Whether the task finished in an earlier run; StaleOutput if with other settings."""
    marker = task_dir(root, task) / MARKER
    if not marker.is_file():
        return False
    if json.loads(marker.read_text()).get("fingerprint") != fingerprint(task):
        raise StaleOutput(
            f"{marker.parent} holds task {task.id} run with other settings "
            "(input, params file or overrides): choose a new --out folder"
        )
    return True


def write_json(path: Path, data: Any) -> None:
    """Write atomically: readers see the old file or the whole new one, never a part."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def record_failure(root: Path, task: Task, attempt: Mapping[str, Any]) -> None:
    """Append a failed attempt to the task's error.json."""
    folder = task_dir(root, task)
    folder.mkdir(parents=True, exist_ok=True)
    errors = read_json(folder / ERRORS) or {"task": task.id, "attempts": []}
    errors["attempts"].append(dict(attempt))
    write_json(folder / ERRORS, errors)


def mark_done(root: Path, task: Task, result: Mapping[str, Any], attempts: int) -> None:
    """The completion marker: written last, so every other file is there."""
    marker = {
        "task": task.id,
        "input": task.input.name,
        "configuration": task.config.name,
        "spec": describe(task.config),
        "fingerprint": fingerprint(task),
        "attempts": attempts,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **result,
    }
    write_json(task_dir(root, task) / MARKER, marker)


def _clear_attempt(folder: Path) -> None:
    """Remove what an interrupted attempt left, keeping the error history."""
    for entry in folder.iterdir():
        if entry.name == ERRORS:
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


# --------------------------------------------------------------------------- workers


def check_runnable(tasks: Sequence[Task]) -> None:
    """Refuse, before anything starts, task kinds that have no runner yet."""
    for task in tasks:
        if task.input.kind not in _RUNNERS:
            raise NotRunnable(
                f"input {task.input.name!r}: closed-loop sim tasks are accepted by the "
                "manifest but cannot run yet: they need oxygen-sim-eval, which this "
                "installation does not have; remove inputs.sim to run the bags"
            )


class Worker:
    """One worker process's tasks. Keeps the last pipeline it built (the compiled engine)
    and reuses it for the next task of the same settings; replay_offline restarts it,
    so a task's outputs do not depend on what ran before it in the worker."""

    def __init__(self) -> None:
        self._pipeline: Pipeline | None = None
        self.identity = {"pid": os.getpid(), "host": socket.gethostname()}

    def run(self, task: Task, root: Path) -> dict[str, Any]:
        """Run one task into its folder; timings and whether the engine was reused."""
        folder = task_dir(root, task)
        folder.mkdir(parents=True, exist_ok=True)
        _clear_attempt(folder)
        write_json(folder / ATTEMPT, {**self.identity, "task": task.id, "started": time.time()})
        return {**_RUNNERS[task.input.kind](self, task, folder), "worker": self.identity}

    def _run_bag(self, task: Task, folder: Path) -> dict[str, Any]:
        job = Job.load(task.input.path, task.config.params, folder, task.config.override_dict())
        start = time.monotonic()
        reused = self._pipeline is not None and self._pipeline.settings == job.settings
        if not reused:
            self._pipeline = None  # free the old engine before compiling the new one
            self._pipeline = make_pipeline(job.settings)
        built = time.monotonic()
        report = replay_offline(job, progress=False, pipeline=self._pipeline)
        return {
            "engine_reused": reused,
            "compile_s": round(built - start, 3),
            "replay_s": round(time.monotonic() - built, 3),
            "frames": report["frames"],
        }


# Input kind -> how a worker runs it. "sim" (manifest.SimInput: a family and a seed range)
# gets its runner here once oxygen-sim-eval exists; until then check_runnable refuses it.
_RUNNERS: dict[str, Callable[[Worker, Task, Path], dict[str, Any]]] = {"bag": Worker._run_bag}
