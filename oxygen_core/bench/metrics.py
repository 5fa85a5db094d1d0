"""Row metrics with the paper's definitions (docs/DESIGN.md section 2), and the bound.

- action_hz = H * frames / sum(frame seconds): chunk throughput, not a per-action rate.
- lang_tps = tokens produced / sum(frame seconds): total tokens over total time, like
  action_hz. The mean over frames of (tokens in the frame / frame seconds), the figure
  before, is kept as `lang_tps_frame_mean`: it weighs a short frame's rate like a long
  one's, so it penalises isolated execution, whose frames with requests are long and
  full of tokens and whose frames without are short and empty.
Only measured frames count (warm-up frames and compiles are dropped by the runner).
`action_hz` and `lang_tps` below are the one copy of these formulas: the benchmark rows
and oxygen-bag replay's report (oxygen_ros.tools.report) both call them. A frame whose time
is not positive has no measured time: all three leave it out, and are 0.0 when no frame
is left.

Per request (`requests.py`), the first-token and completion latencies of the requests
submitted in measured frames: p50 and p99, in frames (the submitting frame counts as 1)
and in seconds of the row's own frame time. Requests still unfinished when the row's
drain frames end (a row behind its arrivals) are counted, not timed.

The bound says what OxyGen can gain over isolated execution given the measured phase
times, so a measured ratio can be judged against it rather than against the paper's GPU
numbers. Per frame, isolated execution pays P + D + r * (P + n * d_1) (its own prefill and
n batch-1 decode steps per request, r requests per frame) and OxyGen pays P + D + k * d_B
(one shared prefill, k steps at the batch's bucket). With r = 1, n = N and k = 1 this is
the headline bound (2P + D + N d_1) / (P + D + d_B). Both deliver the same tokens per
frame in steady state, so the bound holds for tok/s as well as for action Hz.

Every term is measured in the same interleaved run: P and D are the medians over all rows,
d_1 and d_B the pool's step at bucket 1 and at the OxyGen row's bucket (`DecodeProbe`).
What either side spends beyond prefills and steps (a decode call's fixed overhead,
admitting a request's prompt) is left out on purpose; OxyGen's is reported next to the
bound: it is the gap an engine fix can close.

"Same tokens per frame" fails when OxyGen falls behind its arrivals (a full pool, a
growing queue, refused requests): such a row serves less than isolated, and its ratios
compare unequal work. `RowResult` carries arrived and served tokens, refusals and the
final queue, and the report flags those rows.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

import numpy as np

from oxygen_core.bench.floors import Floors
from oxygen_core.bench.requests import RequestTiming
from oxygen_core.bench.runner import FrameRecord, Row, RowRecord


@dataclasses.dataclass(frozen=True)
class Latency:
    """p50 and p99 of one latency over a row's requests: in frames, counting the frame that
    submitted the request, and in seconds of the row's own frame time (nan: no request).
    A `Comparison` holds OxyGen's over isolated's in the same shape."""

    frames_p50: float
    frames_p99: float
    s_p50: float
    s_p99: float

    @classmethod
    def of(cls, samples: Sequence[tuple[int, float]]) -> Latency:
        """From (frames, seconds) per request."""
        if not samples:
            return cls(*[float("nan")] * 4)
        frames, seconds = np.array(samples, dtype=float).T
        f50, f99 = np.percentile(frames, [50, 99])
        s50, s99 = np.percentile(seconds, [50, 99])
        return cls(float(f50), float(f99), float(s50), float(s99))

    def over(self, other: Latency) -> Latency:
        """Field by field self / other (nan where other is 0 or nan)."""
        mine, theirs = dataclasses.astuple(self), dataclasses.astuple(other)
        return Latency(*[a / b if b else float("nan") for a, b in zip(mine, theirs, strict=True)])


@dataclasses.dataclass(frozen=True)
class RowResult:
    """One table row: a mode at one k under one workload (times in seconds)."""

    label: str
    mode: str
    k: int | str | None
    n: int
    steps: int
    workload: str
    frames: int
    action_hz: float
    lang_tps: float  # total tokens / total frame seconds
    lang_tps_frame_mean: float  # mean of per-frame tokens / frame seconds (the old figure)
    frame_p50_s: float
    frame_p99_s: float
    frame_max_s: float
    avg_batch: float
    avg_k: float
    bucket: int  # most frequent decode bucket (1 for the baselines)
    requests_per_frame: float
    tokens_per_frame: float  # produced
    arrived_tokens_per_frame: float  # asked for by the frame's arrivals
    rejected: int  # requests refused over the measured frames (pool or queue full)
    queued_end: int  # requests still waiting for a row after the last measured frame
    requests_completed: int  # submitted in measured frames, finished: the latencies' samples
    requests_unfinished: int  # submitted in measured frames, taken, not done after the drain
    first_token: Latency
    completion: Latency
    prefill_s: float
    prefill_floor_s: float
    denoise_s: float
    denoise_floor_s: float
    language_s: float  # whole language phase per frame (admission + decode)
    decode_step_s: float
    decode_floor_s: float
    deadline_misses: int | None
    memory_bytes: int  # largest in-use sample at a frame's end; the run's peak is in the JSON
    new_compiles: int  # executables compiled after warm-up, all frames: must be 0
    frame_s: tuple[float, ...]  # measured frame times, in order (the timeline)


def action_hz(horizon: int, frame_s: Sequence[float]) -> float:
    """H * frames / sum(frame seconds) over the frames with a positive time (else 0.0)."""
    timed = [s for s in frame_s if s > 0]
    return horizon * len(timed) / sum(timed) if timed else 0.0


def _timed(tokens: Sequence[int], frame_s: Sequence[float]) -> list[tuple[int, float]]:
    """(tokens, seconds) of the frames with a positive time."""
    return [(n, s) for n, s in zip(tokens, frame_s, strict=True) if s > 0]


def lang_tps(tokens: Sequence[int], frame_s: Sequence[float]) -> float:
    """Tokens / seconds summed over the frames with a positive time (else 0.0)."""
    timed = _timed(tokens, frame_s)
    return sum(n for n, _ in timed) / sum(s for _, s in timed) if timed else 0.0


def lang_tps_frame_mean(tokens: Sequence[int], frame_s: Sequence[float]) -> float:
    """Mean over the frames with a positive time of tokens / frame seconds (else 0.0)."""
    timed = _timed(tokens, frame_s)
    return float(np.mean([n / s for n, s in timed])) if timed else 0.0


def decode_step_s(row: Row, measured: list[FrameRecord], probe: dict[int, float]) -> float:
    """One decode step at the row's batch.

    OxyGen: the pool's step at the row's usual bucket, timed alone under the run's load
    (`DecodeProbe`).
    Baselines: language time per token after removing the isolated task's own prefill
    (so it includes each request's prompt admission, amortised over its tokens).
    """
    if row.mode.startswith("oxygen"):
        return probe.get(usual_bucket(measured), float("nan"))
    own_prefill = row.mode == "isolated"
    spent = sum(r.language_s - own_prefill * r.requests * r.prefill_s for r in measured)
    tokens = sum(r.tokens for r in measured)
    return spent / tokens if tokens else float("nan")


def usual_bucket(measured: list[FrameRecord]) -> int:
    buckets = [r.bucket for r in measured if r.bucket]
    return statistics.mode(buckets) if buckets else 0


def summarize(
    row: Row,
    record: RowRecord,
    workload: str,
    floors: Floors,
    probe: dict[int, float],
    budget_s: float | None,
) -> RowResult:
    """The row's metrics over its measured frames and the requests they submitted."""
    records = record.frames
    measured = [r for r in records if r.measured]
    frame_s = np.array([r.frame_s for r in measured])
    tokens = [r.tokens for r in measured]
    asked: list[RequestTiming] = [t for t in record.requests if t.measured]
    done = [t for t in asked if t.completed]
    cfg = row.engine.cfg
    horizon = row.engine.model.action_horizon
    bucket = usual_bucket(measured) or 1
    return RowResult(
        label=row.label,
        mode=row.mode,
        k=row.k,
        n=row.engine.max_new,
        steps=cfg.denoise_steps,
        workload=workload,
        frames=len(measured),
        action_hz=action_hz(horizon, frame_s.tolist()),
        lang_tps=lang_tps(tokens, frame_s.tolist()),
        lang_tps_frame_mean=lang_tps_frame_mean(tokens, frame_s.tolist()),
        frame_p50_s=float(np.percentile(frame_s, 50)),
        frame_p99_s=float(np.percentile(frame_s, 99)),
        frame_max_s=float(frame_s.max()),
        avg_batch=float(np.mean([r.batch for r in measured])),
        avg_k=float(np.mean([r.k for r in measured])),
        bucket=bucket,
        requests_per_frame=float(np.mean([r.requests for r in measured])),
        tokens_per_frame=float(np.mean([r.tokens for r in measured])),
        arrived_tokens_per_frame=float(np.mean([r.arrived_tokens for r in measured])),
        rejected=sum(r.rejected for r in measured),
        queued_end=measured[-1].queued,
        requests_completed=len(done),
        requests_unfinished=sum(t.done_frame is None and not t.dropped for t in asked),
        first_token=Latency.of([t.first_token() for t in asked if t.first_frame is not None]),
        completion=Latency.of([t.completion() for t in done]),
        prefill_s=float(np.median([r.prefill_s for r in measured])),
        prefill_floor_s=floors.prefill_s(),
        denoise_s=float(np.median([r.denoise_s for r in measured])),
        denoise_floor_s=floors.denoise_s(cfg.denoise_steps),
        language_s=float(np.mean([r.language_s for r in measured])),
        decode_step_s=decode_step_s(row, measured, probe),
        decode_floor_s=floors.decode_step_s(bucket, row.engine.capacity),
        deadline_misses=None if budget_s is None else int(np.sum(frame_s > budget_s)),
        memory_bytes=max(r.memory_bytes for r in measured),
        new_compiles=sum(r.new_compiles for r in records),
        frame_s=tuple(float(s) for s in frame_s),
    )


@dataclasses.dataclass(frozen=True)
class Comparison:
    """An OxyGen row against isolated execution under the same workload, same run."""

    workload: str
    label: str
    bound: float  # what the phase times allow (module docstring)
    action_ratio: float  # measured, OxyGen / isolated
    tps_ratio: float
    first_token_ratio: Latency  # OxyGen's request latencies over isolated's
    completion_ratio: Latency
    admission_s: float  # OxyGen language time per frame beyond its decode call


def compare(
    results: list[RowResult], steps: dict[int, float], overheads: dict[int, float]
) -> list[Comparison]:
    """Bound and measured ratios of every OxyGen row over the isolated row.

    steps, overheads: seconds of a pool decode step, and of a decode call that runs no
    step, per bucket (`DecodeProbe`).
    """
    isolated = next((r for r in results if r.mode == "isolated"), None)
    if isolated is None:
        return []
    prefill = float(np.median([r.prefill_s for r in results]))
    denoise = float(np.median([r.denoise_s for r in results]))
    # r * (P + n * d_1) = r * P + (tokens per frame) * d_1
    isolated_s = (
        prefill
        + denoise
        + isolated.requests_per_frame * prefill
        + isolated.tokens_per_frame * steps.get(1, isolated.decode_step_s)
    )
    out = []
    for r in results:
        if not r.mode.startswith("oxygen"):
            continue
        steps_s = r.avg_k * r.decode_step_s
        out.append(
            Comparison(
                workload=r.workload,
                label=r.label,
                bound=isolated_s / (prefill + denoise + steps_s),
                action_ratio=r.action_hz / isolated.action_hz,
                tps_ratio=r.lang_tps / isolated.lang_tps if isolated.lang_tps else float("nan"),
                first_token_ratio=r.first_token.over(isolated.first_token),
                completion_ratio=r.completion.over(isolated.completion),
                admission_s=r.language_s - steps_s - overheads.get(r.bucket, float("nan")),
            )
        )
    return out
