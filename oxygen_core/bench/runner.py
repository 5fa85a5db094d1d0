"""Drive every engine row through the same workload, interleaved frame by frame.

All rows (isolated, shared, OxyGen at each k, OxyGen with k=auto) live in one process and
share one policy. They are warmed up (every shape compiled) before anything is timed,
then stepped in turn within each frame, in a rotating order, so a burst of load from other
processes falls on all of them alike and the ratios between rows are measured side by
side. Each row gets its own count of warm-up frames (the longest request over k for
OxyGen, as the paper: the batch must fill), aligned so that every row's measured frames
start at the same time and see identical arrivals. The measured frames' arrivals are the
workload's schedule for `frames` frames, drawn apart from the warm-up's, so they do not
depend on which rows (and so how many warm-up frames) a run has.

After the measured frames each OxyGen row runs drain frames (as many as its warm-up
would: the longest request over k) so that the requests submitted near the end finish
and their completion latency is measured, not cut off; arrivals go on through them
(a third draw), so those requests finish under the same load. Drain frames, like
warm-up frames, count in no throughput, and their requests in no latency.

A frame is timed from the first request call to the end of the language phase: the
engine returns host numpy values, so the clock already includes `block_until_ready`.
Each row's `RequestTracker` follows its requests on that clock (`requests.py`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from typing import Literal

import jax
import numpy as np

from oxygen_core.bench.requests import RequestTiming, RequestTracker
from oxygen_core.bench.workloads import Workload
from oxygen_core.engine import EngineConfig, StreamConfig, make_engine
from oxygen_core.engine.engine import Engine
from oxygen_core.observation import Observation
from oxygen_core.policy import Policy

STREAM = "narration"
BASELINES = ("isolated", "shared")
MODES = ("isolated", "shared", "oxygen", "oxygen-apart", "oxygen-auto")
FIXED_K = ("oxygen", "oxygen-apart")  # a row per k


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """What to run: the engine rows (modes x k), request length, denoise steps, frames."""

    modes: tuple[str, ...]
    ks: tuple[int, ...]
    n: int = 30
    steps: int = 10
    frames: int = 30
    warmup_frames: int | None = None  # None: N/k per OxyGen row (N for auto), 1 otherwise
    budget_s: float | None = None
    seed: int = 0
    max_active: int = 32

    def __post_init__(self) -> None:
        unknown = sorted(set(self.modes) - set(MODES))
        if unknown:
            raise ValueError(f"unknown modes {unknown}; choose from {MODES}")
        if "oxygen-auto" in self.modes and self.budget_s is None:
            raise ValueError("mode oxygen-auto needs a frame budget (--budget seconds)")
        if any(k < 1 for k in self.ks):
            raise ValueError(f"every k must be >= 1, got {self.ks}")
        object.__setattr__(self, "ks", tuple(dict.fromkeys(self.ks)))  # one row per k

    def buckets(self) -> tuple[int, ...]:
        """Powers of two below the pool size, then the pool size: few compiled shapes, at
        most 2x padding, none larger than the pool."""
        below = (1 << i for i in range(self.max_active.bit_length()))
        return (*(b for b in below if b < self.max_active), self.max_active)


@dataclasses.dataclass(frozen=True)
class FrameRecord:
    """One frame of one row, as measured."""

    measured: bool  # False during the row's warm-up and drain frames
    frame_s: float
    prefill_s: float
    denoise_s: float
    language_s: float
    tokens: int
    requests: int
    arrived_tokens: int  # tokens the frame's arrivals ask for
    rejected: int  # requests the engine refused this frame (pool full, queue full)
    queued: int  # requests waiting for a pool row after the frame
    k: int
    batch: int
    bucket: int
    new_compiles: int
    memory_bytes: int


@dataclasses.dataclass(frozen=True)
class RowRecord:
    """What one row recorded under one workload: every frame, and every request it took."""

    frames: list[FrameRecord]
    requests: list[RequestTiming]


@dataclasses.dataclass
class Row:
    """One engine under test and its counts of warm-up and drain frames."""

    mode: str  # one of MODES
    k: int | Literal["auto"] | None  # None for the baselines (they have no k)
    engine: Engine
    warmup: int
    drain: int  # frames after the measured ones until their requests are done

    @property
    def label(self) -> str:
        if self.k is None or self.mode == "oxygen-auto":
            return self.mode
        return f"{self.mode} k={self.k}"


def demo_observation(policy: Policy, seed: int) -> Observation:
    """A random camera image per slot the robot fills, zero state, a fixed instruction."""
    rng = np.random.default_rng(seed)
    size = policy.config.vision.image_size
    images = {s: rng.integers(0, 256, (size, size, 3), np.uint8) for s in policy.robot.cameras}
    return Observation(images, np.zeros(policy.robot.state_dim, np.float32), "pick up the cup")


def _engine_config(cfg: BenchConfig, mode: str, k: int | str, max_tokens: int) -> EngineConfig:
    # EOS is off: a random-weight model would stop requests at random lengths, and the
    # workload, not the model, must decide how many tokens each request costs.
    stream = StreamConfig(
        STREAM, "Narrate:", max_tokens=max_tokens, trigger="on_demand", stop_at_eos=False
    )
    return EngineConfig(
        engine_mode="oxygen" if mode.startswith("oxygen") else mode,
        admit_in_step=mode != "oxygen-apart",
        steps_per_frame=k,
        denoise_steps=cfg.steps,
        max_active_requests=cfg.max_active,
        batch_buckets=cfg.buckets(),
        frame_budget_s=cfg.budget_s,
        # The engine alone is measured: nothing is published after its decode, so auto k
        # keeps no margin for it (the node's default keeps 10 ms).
        budget_margin_s=0.0,
        streams=(stream,),
        seed=cfg.seed,
    )


def build_rows(policy: Policy, cfg: BenchConfig, max_tokens: int, obs: Observation) -> list[Row]:
    """One warmed-up engine per row; every shape is compiled before this returns."""
    specs: list[tuple[str, int | Literal["auto"] | None]] = []
    for mode in cfg.modes:
        if mode in BASELINES:
            specs.append((mode, None))
        elif mode in FIXED_K:
            specs += [(mode, k) for k in cfg.ks]
        else:
            specs.append((mode, "auto"))
    rows = []
    for mode, k in specs:
        engine = make_engine(policy, _engine_config(cfg, mode, k or 1, max_tokens))
        engine.warmup(obs)
        warmup = _warmup_frames(cfg, k, max_tokens)
        rows.append(Row(mode, k, engine, warmup, drain=_fill_frames(k, max_tokens)))
    return rows


def _fill_frames(k: int | str | None, max_tokens: int) -> int:
    """Frames a request of `max_tokens` takes at k (0 for the baselines, which finish every
    request in its own frame): after that many, the longest request has finished once."""
    if k is None:
        return 0
    return math.ceil(max_tokens / (1 if k == "auto" else k))


def _warmup_frames(cfg: BenchConfig, k: int | str | None, max_tokens: int) -> int:
    """Frames until the batch is full (one for the baselines: their first frame's work)."""
    if cfg.warmup_frames is not None:
        return cfg.warmup_frames
    return 1 if k is None else _fill_frames(k, max_tokens)


def _device_stats() -> dict | None:
    """The accelerator's memory statistics; None on a CPU (the process is measured)."""
    device = jax.devices()[0]
    return device.memory_stats() if device.platform != "cpu" else None


def memory_bytes() -> int:
    """Bytes in use now: device memory on an accelerator, process RSS on a CPU."""
    stats = _device_stats()
    if stats:
        return int(stats.get("bytes_in_use", 0))
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory_bytes() -> int:
    """The process's high-water mark so far: device peak_bytes_in_use on an accelerator,
    VmHWM (peak RSS) on a CPU. One figure per run: every row shares the process."""
    stats = _device_stats()
    if stats:
        return int(stats.get("peak_bytes_in_use", stats.get("bytes_in_use", 0)))
    with open("/proc/self/status") as f:
        hwm = next(line for line in f if line.startswith("VmHWM:"))
    return int(hwm.split()[1]) * 1024


def run_frame(
    row: Row,
    obs: Observation,
    lengths: tuple[int, ...],
    measured: bool,
    tracker: RequestTracker,
) -> FrameRecord:
    """One frame of one row: arrivals, actions, language; its requests go to `tracker`."""
    engine = row.engine
    compiles = engine.compile_count()
    t0 = time.perf_counter()
    refusals = [engine.request(STREAM, max_tokens=n) for n in lengths]
    act = engine.act(obs)
    lang = engine.language()
    frame_s = time.perf_counter() - t0
    refused = sum(r is not None for r in refusals)
    for _ in range(len(lengths) - refused):
        tracker.submit(measured)
    tracker.deliver(lang, refused, frame_s)
    return FrameRecord(
        measured=measured,
        frame_s=frame_s,
        prefill_s=act.prefill_s,
        denoise_s=act.denoise_s,
        language_s=lang.decode_s,
        tokens=sum(len(e.token_ids) for e in lang.events),
        requests=len(lengths),
        arrived_tokens=sum(lengths),
        rejected=lang.rejected,
        queued=lang.queued,
        k=lang.k,
        batch=lang.batch,
        bucket=lang.bucket,
        new_compiles=engine.compile_count() - compiles,
        memory_bytes=memory_bytes(),
    )


def arrivals(
    workload: Workload, cfg: BenchConfig, warmup: int, drain: int = 0
) -> list[tuple[int, ...]]:
    """Request lengths per frame: `warmup` frames, the measured ones, `drain` frames. The
    measured ones are the same for any warm-up and drain (three separate draws: the rows a
    run has do not shift them)."""
    before = workload.schedule(warmup, cfg.n, cfg.seed + 1) if warmup else []
    after = workload.schedule(drain, cfg.n, cfg.seed + 2) if drain else []
    return before + workload.schedule(cfg.frames, cfg.n, cfg.seed) + after


def run_workload(
    rows: list[Row],
    workload: Workload,
    cfg: BenchConfig,
    obs: Observation,
    between_rounds: Callable[[], None],
    tick: Callable[[str], None],
) -> dict[str, RowRecord]:
    """Run every row through `workload`: aligned warm-ups, interleaved frames, drains.

    between_rounds() runs after each frame's round of rows (the probes sample there);
    tick(label) after each row-frame (progress reporting). Returns records by row label.
    """
    w_max, d_max = max(r.warmup for r in rows), max(r.drain for r in rows)
    schedule = arrivals(workload, cfg, w_max, d_max)
    frames: dict[str, list[FrameRecord]] = {row.label: [] for row in rows}
    trackers = {row.label: RequestTracker() for row in rows}
    for row in rows:
        row.engine.restart()  # request ids from 0: the tracker counts them (requests.py)
    for f, lengths in enumerate(schedule):
        shift = f % len(rows)
        for row in rows[shift:] + rows[:shift]:
            if w_max - row.warmup <= f < w_max + cfg.frames + row.drain:
                measured = w_max <= f < w_max + cfg.frames
                frame = run_frame(row, obs, lengths, measured, trackers[row.label])
                frames[row.label].append(frame)
                tick(row.label)
        between_rounds()
    return {label: RowRecord(frames[label], trackers[label].timings) for label in frames}


def total_row_frames(rows: list[Row], cfg: BenchConfig) -> int:
    """Row-frames one workload costs (for the progress bar)."""
    return sum(r.warmup + cfg.frames + r.drain for r in rows)
