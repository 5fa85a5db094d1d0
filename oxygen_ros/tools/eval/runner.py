"""Tasks on Ray: worker actors bound to a configuration, retries owned by the driver.

`--workers N` slots each hold at most one actor (tasks.Worker in its own process). A
free slot keeps its configuration while that configuration has queued tasks, so its
actor replays bag after bag with the engine it compiled once; when the queue is empty
the actor is killed and the slot starts one for the configuration with the most queued
tasks per worker. With `reuse=False` every task gets a new actor (a new process, so not
even JAX's in-process compile cache helps): the cost of a plain task-per-bag design.

Failures: a task that raises comes back as a RayTaskError; a worker process that dies
(SIGKILL, out of memory, a lost node) as a RayActorError for its one task. Either way
the driver appends the attempt to error.json and queues the task again, at most
`retries` times, while the other slots go on. Actors are created with max_restarts=0:
the driver decides what to retry, so one path handles both kinds of failure.

ROS domains: when the run has closed-loop tasks (sim or metaworld), every actor is
created with its own ROS_DOMAIN_ID from a DomainPool (domains.py) and gives it back when
it is retired; the id of an actor that died is tainted (its sim and node processes may
outlive it).

The local instance is started with address="local" (never attaching to a Ray someone
else started on this machine), bound to 127.0.0.1, with no dashboard and no usage
statistics, and workers inherit ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST: loading a
configuration creates a DDS participant, which must not look beyond the machine.
Worker output goes to Ray's session logs (/tmp/ray/session_latest/logs on the machine
that runs the worker), not to the terminal; a failed task's traceback is in error.json.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import ray
from tqdm import tqdm

from oxygen_ros.tools.eval.domains import DomainPool
from oxygen_ros.tools.eval.manifest import BagInput, Configuration, Task
from oxygen_ros.tools.eval.tasks import ATTEMPT, Worker, mark_done, read_json, record_failure

_ENV = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "RAY_USAGE_STATS_ENABLED": "0"}


@dataclasses.dataclass(frozen=True)
class RunOptions:
    workers: int = 1
    reuse: bool = True
    retries: int = 2  # attempts after the first
    progress: bool = True


@dataclasses.dataclass
class RunSummary:
    """What one run did (run.json)."""

    tasks: int  # in the manifest
    finished_before: int
    finished: int = 0
    failed: list[str] = dataclasses.field(default_factory=list)
    retried: int = 0  # failed attempts that were queued again
    engines_built: int = 0
    elapsed_s: float = 0.0

    @property
    def tasks_per_min(self) -> float:
        return 60.0 * self.finished / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "tasks_per_min": round(self.tasks_per_min, 3)}


@contextlib.contextmanager
def ray_session(address: str | None, configs: Sequence[Configuration], workers: int) -> Iterator:
    """Connect to `address`, or start (and at the end stop) a local instance sized for
    `workers` slots; checks that one task of every configuration fits on the cluster."""
    os.environ.update(_ENV)  # read by ray.init and inherited by a local instance
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,  # worker output stays in Ray's session logs, off the bar
        "logging_level": logging.WARNING,
        "runtime_env": {"env_vars": dict(_ENV)},
    }
    if address is None:
        cpus = max(c.resources.num_cpus for c in configs)
        options.update(address="local", num_cpus=max(1, round(workers * cpus)))
        options["_node_ip_address"] = "127.0.0.1"
    else:
        options["address"] = address
    ray.init(**options)
    try:
        _check_fits(configs, ray.cluster_resources())
        yield
    finally:
        ray.shutdown()


def _check_fits(configs: Sequence[Configuration], cluster: dict[str, float]) -> None:
    for config in configs:
        needs = {"num_cpus": ("CPU", config.resources.num_cpus)}
        needs["num_gpus"] = ("GPU", config.resources.num_gpus)
        for name, (key, need) in needs.items():
            have = cluster.get(key, 0.0)
            if need > have:
                raise RuntimeError(
                    f"configuration {config.name!r} asks {name}={need:g} per task but the "
                    f"Ray cluster has {have:g}"
                )


@dataclasses.dataclass
class _Slot:
    """One worker slot: its actor (bound to `config`) and the task it runs."""

    actor: Any = None
    config: str | None = None
    task: Task | None = None
    ref: Any = None
    domain: int | None = None  # the actor's ROS_DOMAIN_ID


class Scheduler:
    """Hands queued tasks to slots until every task finished or ran out of attempts."""

    def __init__(self, tasks: Sequence[Task], root: Path, opts: RunOptions, total: int) -> None:
        self.root, self.opts = root, opts
        self.queues: dict[str, collections.deque[Task]] = collections.defaultdict(collections.deque)
        for task in tasks:
            self.queues[task.config.name].append(task)
        self.configs = {t.config.name: t.config for t in tasks}
        self.attempts: collections.Counter[str] = collections.Counter()
        self.slots = [_Slot() for _ in range(opts.workers)]
        self.summary = RunSummary(tasks=total, finished_before=total - len(tasks))
        self.actor_class = ray.remote(max_restarts=0, max_task_retries=0)(Worker)
        closed_loop = any(not isinstance(t.input, BagInput) for t in tasks)
        self.domains = DomainPool() if closed_loop else None

    def run(self) -> RunSummary:
        start = time.monotonic()
        bar = tqdm(
            total=self.summary.tasks,
            initial=self.summary.finished_before,
            unit="task",
            desc="eval",
            disable=not self.opts.progress,
        )
        try:
            while True:
                for slot in self.slots:
                    if slot.ref is None:
                        self._assign(slot)
                busy = {slot.ref: slot for slot in self.slots if slot.ref is not None}
                if not busy:
                    break
                bar.set_postfix(
                    running=len(busy), failed=len(self.summary.failed), retried=self.summary.retried
                )
                ready, _ = ray.wait(list(busy), num_returns=1)
                if self._collect(busy[ready[0]]):
                    bar.update()
        finally:
            bar.close()
            for slot in self.slots:
                self._retire(slot)
            self.summary.elapsed_s = round(time.monotonic() - start, 3)
        return self.summary

    def _assign(self, slot: _Slot) -> None:
        config = self._next_config(slot)
        if config is None:
            self._retire(slot)
            return
        if slot.config != config or not self.opts.reuse:
            self._retire(slot)
        if slot.actor is None:
            resources = self.configs[config].resources
            slot.domain = self.domains.acquire() if self.domains else None
            slot.actor = self.actor_class.options(
                num_cpus=resources.num_cpus, num_gpus=resources.num_gpus
            ).remote(slot.domain)
            slot.config = config
        slot.task = self.queues[config].popleft()
        self.attempts[slot.task.id] += 1
        slot.ref = slot.actor.run.remote(slot.task, self.root)

    def _next_config(self, slot: _Slot) -> str | None:
        """The slot's own configuration while it has work, else the one most in need."""
        if self.opts.reuse and self.queues.get(slot.config or ""):
            return slot.config
        waiting = [name for name, queue in self.queues.items() if queue]
        if not waiting:
            return None
        workers = collections.Counter(s.config for s in self.slots if s.ref is not None)
        return max(waiting, key=lambda name: len(self.queues[name]) / (1 + workers[name]))

    def _collect(self, slot: _Slot) -> bool:
        """Record the slot's finished call; True when its task is done for good."""
        task, ref = slot.task, slot.ref
        slot.task = slot.ref = None
        assert task is not None
        try:
            result = ray.get(ref)
        except ray.exceptions.RayActorError as error:  # the worker process died (or is lost)
            self._retire(slot, died=True)
            first = str(error).strip().splitlines()[:1]
            return self._failed(task, "WorkerDied", "".join(first), str(error))
        except ray.exceptions.RayTaskError as error:  # the task raised in the worker
            cause = error.cause
            message = str(cause).strip().splitlines()[-1:] if cause is not None else []
            kind = type(cause).__name__ if cause is not None else "RayTaskError"
            return self._failed(task, kind, "".join(message), str(error))
        self.summary.engines_built += result["engines_built"]
        self.summary.finished += 1
        mark_done(self.root, task, result, self.attempts[task.id])
        return True

    def _failed(self, task: Task, kind: str, message: str, trace: str) -> bool:
        worker = read_json(self.root / task.input.name / task.config.name / ATTEMPT) or {}
        attempt = self.attempts[task.id]
        record_failure(
            self.root,
            task,
            {
                "attempt": attempt,
                "type": kind,
                "message": message,
                "traceback": trace,
                "worker": {k: worker.get(k) for k in ("pid", "host")},
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )
        if attempt <= self.opts.retries:
            self.summary.retried += 1
            self.queues[task.config.name].append(task)
            return False
        self.summary.failed.append(task.id)
        return True

    def _retire(self, slot: _Slot, died: bool = False) -> None:
        if slot.actor is not None:
            ray.kill(slot.actor)
            if self.domains is not None and slot.domain is not None:
                self.domains.release(slot.domain, tainted=died)
        slot.actor = slot.config = slot.domain = None
