"""A task's folder in the output tree, its markers, and what a worker runs for it.

`OUT/<input>/<configuration>/` holds what the task's tool writes (oxygen-bag replay for a
bag: output_bag/, report.json, report.md, timeline.png, replay.log; oxygen-eval node for
a sim batch: output_bag/, report.json, report.md, episodes.png, episodes.gif,
timeline.png, node.log, sim.log; oxygen-eval node --world metaworld for a metaworld batch:
output_bag/, report.json, report.md, node.log, sim.log) and three files of the tool's own:

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

A bag task is `replay_offline` with the worker's pipeline, reused across tasks of the
same settings. A sim task is `sim.evaluate.run_sim_eval` on the input's family and seeds
with the configuration's params, overrides and policy: the node is its own process,
started and stopped by the run, so there is no engine for the worker to keep and every
sim task of the model policy compiles one (in that process). It runs on the worker's
ROS_DOMAIN_ID (domains.py), so concurrent tasks' sims and nodes do not see each other. A
metaworld task is the same with `task_eval.run_task_eval` on the input's task
and seeds (imported when one runs: it loads MuJoCo).

This module imports no Ray: runner.py makes `Worker` a Ray actor.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from oxygen_ros.pipeline import Pipeline, make_pipeline
from oxygen_ros.tools.eval.manifest import BagInput, MetaWorldInput, SimInput, Task, describe
from oxygen_ros.tools.replay import replay_offline
from oxygen_ros.tools.replay_job import Job
from oxygen_ros.tools.sim.evaluate import SimEvalSpec, run_sim_eval
from oxygen_ros.tools.task_eval import TaskEvalSpec, run_task_eval

MARKER, ERRORS, ATTEMPT = "task.json", "error.json", "attempt.json"


class StaleOutput(RuntimeError):
    """The output folder holds a finished task that was run with other settings."""


# --------------------------------------------------------------------------- output tree


def task_dir(root: Path, task: Task) -> Path:
    return Path(root) / task.input.name / task.config.name


def fingerprint(task: Task) -> dict[str, Any]:
    """What makes a finished task's results valid for this task."""
    source: Any = str(task.input.path) if isinstance(task.input, BagInput) else vars(task.input)
    found = {
        "kind": task.input.kind,
        "input": source,
        "params_sha256": hashlib.sha256(task.config.params.read_bytes()).hexdigest(),
        "overrides": task.config.override_dict(),
    }
    if not isinstance(task.input, BagInput):
        found["policy"] = task.config.policy
    return found


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


def sim_spec(task: Task, domain_id: int | None) -> SimEvalSpec:
    """The oxygen-eval node run that is this sim task."""
    sim = task.input
    assert isinstance(sim, SimInput)
    return SimEvalSpec(
        params=task.config.params,
        policy=task.config.policy,
        overrides=task.config.override_dict(),
        families=(sim.family,),
        episodes=sim.count,
        first_seed=sim.start,
        rtf=sim.rtf,
        camera_size=sim.camera_size,
        domain_id=domain_id,
    )


def metaworld_spec(task: Task, domain_id: int | None) -> TaskEvalSpec:
    """The oxygen-eval node --world metaworld run that is this metaworld task."""
    from oxygen_ros.tools.metaworld_eval import METAWORLD  # loads MuJoCo: not at the top

    batch = task.input
    assert isinstance(batch, MetaWorldInput)
    return TaskEvalSpec(
        world=METAWORLD,
        params=task.config.params,
        policy=task.config.policy,
        overrides=task.config.override_dict(),
        tasks=(batch.task,),
        episodes=batch.count,
        first_seed=batch.start,
        rtf=batch.rtf,
        camera_size=batch.camera_size,
        domain_id=domain_id,
    )


class Worker:
    """One worker process's tasks. Keeps the last pipeline it built (the compiled engine)
    and reuses it for the next bag task of the same settings; replay_offline restarts it,
    so a task's outputs do not depend on what ran before it in the worker. Sim tasks run
    on `domain_id` (the driver's, distinct for every live worker)."""

    def __init__(self, domain_id: int | None = None) -> None:
        self._pipeline: Pipeline | None = None
        self.domain_id = domain_id
        self.identity = {"pid": os.getpid(), "host": socket.gethostname(), "domain_id": domain_id}

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
            "engines_built": int(not reused),
            "compile_s": round(built - start, 3),
            "replay_s": round(time.monotonic() - built, 3),
            "frames": report["frames"],
        }

    def _run_sim(self, task: Task, folder: Path) -> dict[str, Any]:
        spec = sim_spec(task, self.domain_id)
        start = time.monotonic()
        report = read_json(run_sim_eval(spec, folder)["json"])
        return _closed_loop_result(spec.policy, report, time.monotonic() - start)

    def _run_metaworld(self, task: Task, folder: Path) -> dict[str, Any]:
        spec = metaworld_spec(task, self.domain_id)
        start = time.monotonic()
        report = read_json(run_task_eval(spec, folder)["json"])
        return _closed_loop_result(spec.policy, report, time.monotonic() - start)


def _closed_loop_result(policy: str, report: Mapping[str, Any], run_s: float) -> dict[str, Any]:
    """A closed-loop task's line in its marker: the node is a process of its own, started
    per task, so no engine is reused."""
    return {
        "engine_reused": False,
        "engines_built": int(policy == "model"),
        "sim_eval_s": round(run_s, 3),
        "episodes": report["episodes_run"],
        "successes": report["success"]["all"]["successes"],
    }


# Input kind -> how a worker runs it.
_RUNNERS: dict[str, Callable[[Worker, Task, Path], dict[str, Any]]] = {
    "bag": Worker._run_bag,
    "sim": Worker._run_sim,
    "metaworld": Worker._run_metaworld,
}
