"""What a replay or a live run measured: report.json, report.md and a timeline PNG.

The report is built from the node's output messages only (EngineStats, ActionChunk,
LanguageTokens, /diagnostics), collected by `Recording`, so an offline replay and a live
run of the real node are summarised by the same code. Frames are joined by header stamp:
every message of one frame carries its tick's stamp.

Metrics follow docs/DESIGN.md section 2, so numbers compare with the paper's, computed by
the benchmark's own functions (oxygen_core.bench.metrics.action_hz and lang_tps):
`action_hz = H * frames / sum(frame_s)` and `lang_tps = tokens / sum(frame_s)`
over the frames after the warm-up (the first ceil(N/k) frames, while the batch fills; the
first compile happens before any frame). Values measured on the wall clock are listed in
`MEASURED_KEYS` and `MEASURED_SERIES`: everything else is a pure function of the bag,
the parameters and the seed (with a fixed steps_per_frame: "auto" picks k from measured
times).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from oxygen_core.bench.metrics import action_hz, lang_tps
from oxygen_core.clock import NS_PER_S
from oxygen_core.engine.types import EngineConfig
from oxygen_core.offline_score import Chunk
from oxygen_core.text import excerpt
from oxygen_ros.convert import action_chunk_rows, stamp_to_ns, stamp_to_seconds
from oxygen_ros.diagnostics import INPUTS_STATUS, SKIPPED_PREFIX
from oxygen_ros.msg import ActionChunk, EngineStats, LanguageTokens
from oxygen_ros.tools import score_report

MEASURED_KEYS = ("action_hz", "lang_tps", "deadline_misses", "overruns", "phase_ms")
MEASURED_SERIES = ("frame_ms", "latency_ms")  # timeline entries measured per frame
SCORE_PNG = "score.png"  # a scored replay's plot, next to report.md


@dataclasses.dataclass(frozen=True)
class _Frame:
    """The EngineStats fields of one frame that the report uses."""

    stamp_ns: int
    frame: int
    frame_s: float
    budget_s: float
    prefill_s: float
    denoise_s: float
    decode_s: float
    k: int
    batch: int

    @classmethod
    def of(cls, msg: EngineStats) -> _Frame:
        return cls(
            stamp_ns=stamp_to_ns(msg.header.stamp),
            frame=msg.frame,
            frame_s=msg.frame_s,
            budget_s=msg.budget_s,
            prefill_s=msg.prefill_s,
            denoise_s=msg.denoise_s,
            decode_s=msg.decode_s,
            k=msg.k,
            batch=msg.batch,
        )


class Recording:
    """The node's output messages of one run, as they arrive (any order across topics)."""

    def __init__(self) -> None:
        self.frames: list[_Frame] = []
        self.horizon = 0
        self.latency_s: dict[int, float] = {}  # chunk stamp -> observation-to-publish time
        self.tokens: collections.Counter[tuple[int, str]] = collections.Counter()
        self.requests: set[int] = set()
        self.finished: list[tuple[str, str, str]] = []  # (stream, reason, text) in order
        self.running: dict[int, tuple[str, str]] = {}  # request id -> (stream, text so far)
        self.diagnostics: dict[str, dict[str, str]] = {}  # status -> key -> value, latest
        # (stream, the tick of the frame it describes, text) of every finished text
        self.said: list[tuple[str, int, str]] = []
        self.published: list[Chunk] = []  # the chunks as published, row 0 at their stamp

    def add(self, msg: Any) -> None:
        """Take one output message; types the report does not use are ignored."""
        match msg:
            case EngineStats():
                self.frames.append(_Frame.of(msg))
            case ActionChunk():
                self.horizon = msg.horizon
                rows = action_chunk_rows(msg, np.float32)
                self.published.append(Chunk(stamp_to_ns(msg.header.stamp), rows))
                self.latency_s[stamp_to_ns(msg.header.stamp)] = stamp_to_seconds(msg.latency)
            case LanguageTokens():
                self.tokens[(stamp_to_ns(msg.header.stamp), msg.stream)] += len(msg.token_ids)
                self.requests.add(msg.request_id)
                self.running[msg.request_id] = (msg.stream, msg.text)
                if msg.finished:
                    self.finished.append((msg.stream, msg.finish_reason, msg.text))
                    self.said.append((msg.stream, stamp_to_ns(msg.origin_stamp), msg.text))
                    del self.running[msg.request_id]
            case DiagnosticArray():
                for status in msg.status:
                    self.diagnostics[status.name] = {kv.key: kv.value for kv in status.values}

    def node_skips(self, node: str) -> dict[str, int]:
        """Skipped frames by reason, as `node` last reported them on /diagnostics."""
        values = self.diagnostics.get(f"{node}: {INPUTS_STATUS}", {})
        return {
            key.removeprefix(SKIPPED_PREFIX): int(value)
            for key, value in values.items()
            if key.startswith(SKIPPED_PREFIX)
        }

    def node_count(self, node: str, key: str) -> int:
        """A counter `node` last reported on /diagnostics (0 before its first report)."""
        for name, values in self.diagnostics.items():
            if name.startswith(f"{node}:") and key in values:
                return int(values[key])
        return 0


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What was run: the inputs of the report that are not messages."""

    source: str  # "offline" or "live"
    bag: str
    params: str
    mode: str
    seed: int
    frame_period_s: float
    warmup_frames: int
    origin_ns: int  # bag time 0 of the timeline
    instructions: tuple[tuple[int, str], ...] = ()  # (bag time ns, text) as each takes effect


@dataclasses.dataclass(frozen=True)
class Counts:
    """Frame accounting that no output message carries (offline: exact; live: /diagnostics)."""

    skipped: Mapping[str, int]
    deadline_misses: int
    overruns: int = 0
    errors: int = 0
    ticks: int | None = None  # frame timer ticks (known offline)
    stopped: str = ""  # why the run ended early (a signal, a corrupt input bag); "" if not


def warmup_frames(engine: EngineConfig) -> int:
    """Frames while the OxyGen batch fills: ceil(N / k); the baselines have none."""
    if engine.engine_mode != "oxygen" or not engine.streams:
        return 0
    k = engine.max_decode_tokens if engine.steps_per_frame == "auto" else engine.steps_per_frame
    return math.ceil(max(s.max_tokens for s in engine.streams) / k)


# --------------------------------------------------------------------------- report.json


def _warnings(frames: list[_Frame], counts: Counts) -> list[str]:
    """What makes this report less than it seems: a partial run, no frames at all, a live
    node that ran before."""
    warnings = [f"partial: {counts.stopped}"] if counts.stopped else []
    if not frames:
        warnings.append(no_frames(counts.skipped))
    first = min((f.frame for f in frames), default=0)
    if first != 0:
        warnings.append(
            f"the node's first frame in this run is #{first}: it ran before, so the counts it "
            "reports on /diagnostics (skips, misses, overruns) include that earlier run; "
            "restart the node for a clean report"
        )
    return warnings


def no_frames(skipped: Mapping[str, int]) -> str:
    """Why a run produced no frame, e.g. "0 frames, 100 skipped: bad_image"."""
    reasons = sorted(((n, r) for r, n in skipped.items() if n), reverse=True)
    total = sum(n for n, _ in reasons)
    if not reasons:
        return "0 frames: no frame tick ran"
    return f"0 frames, {total} skipped: " + ", ".join(
        r if len(reasons) == 1 else f"{r} ({n})" for n, r in reasons
    )


def build_report(rec: Recording, info: RunInfo, counts: Counts) -> dict[str, Any]:
    """The report as plain JSON data (see the module docstring for the metrics)."""
    frames = sorted(rec.frames, key=lambda f: f.stamp_ns)
    streams = sorted({s for _, s in rec.tokens} | {s for s, _, _ in rec.finished})
    tokens = [sum(rec.tokens[(f.stamp_ns, s)] for s in streams) for f in frames]
    # too short a run to drop the warm-up: measure every frame (measured_frames says so)
    measured = slice(info.warmup_frames if len(frames) > info.warmup_frames else 0, None)
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    texts: dict[str, list[str]] = {s: [] for s in streams}
    for stream, reason, text in rec.finished:
        reasons[stream][reason] += 1
        texts[stream].append(text)
    return {
        "warnings": _warnings(frames, counts),
        "partial": bool(counts.stopped),
        "partial_reason": counts.stopped,
        "source": info.source,
        "bag": info.bag,
        "params": info.params,
        "mode": info.mode,
        "seed": info.seed,
        "ticks": counts.ticks,
        "frames": len(frames),
        "skipped_frames": dict(sorted(counts.skipped.items())),
        "frame_errors": counts.errors,
        "deadline_misses": counts.deadline_misses,
        "overruns": counts.overruns,
        "horizon": rec.horizon,
        "frame_period_s": info.frame_period_s,
        "warmup_frames": info.warmup_frames,
        "measured_frames": len(frames[measured]),
        "action_hz": action_hz(rec.horizon, [f.frame_s for f in frames[measured]]),
        "lang_tps": lang_tps(tokens[measured], [f.frame_s for f in frames[measured]]),
        "phase_ms": _phase_ms(frames[measured]),
        "requests_started": len(rec.requests),
        "requests_finished": len(rec.finished),
        "tokens": sum(tokens),
        "finish_reasons": {s: dict(sorted(reasons[s].items())) for s in streams},
        "instructions": [
            {"time_s": _rel_s(t, info.origin_ns), "text": text} for t, text in info.instructions
        ],
        "texts": texts,
        "unfinished_texts": {
            s: [text for stream, text in rec.running.values() if stream == s] for s in streams
        },
        "timeline": _timeline(rec, frames, streams, info.origin_ns),
    }


def _phase_ms(frames: Sequence[_Frame]) -> dict[str, float]:
    """Mean milliseconds per phase, and the frame time's 99th percentile."""
    if not frames:
        return {}
    phases = {
        name: [getattr(f, f"{name}_s") for f in frames]
        for name in ("prefill", "denoise", "decode", "frame")
    }
    means = {name: round(1e3 * float(np.mean(v)), 3) for name, v in phases.items()}
    means["frame_p99"] = round(1e3 * float(np.percentile(phases["frame"], 99)), 3)
    return means


def _timeline(
    rec: Recording, frames: Sequence[_Frame], streams: Sequence[str], origin_ns: int
) -> dict[str, list]:
    return {
        "time_s": [_rel_s(f.stamp_ns, origin_ns) for f in frames],
        "frame": [f.frame for f in frames],
        "frame_ms": [round(1e3 * f.frame_s, 3) for f in frames],
        "latency_ms": [_ms(rec.latency_s.get(f.stamp_ns)) for f in frames],
        "budget_ms": [round(1e3 * f.budget_s, 3) for f in frames],
        "batch": [f.batch for f in frames],
        "k": [f.k for f in frames],
        **{f"tokens_{s}": [rec.tokens[(f.stamp_ns, s)] for f in frames] for s in streams},
    }


def _ms(seconds: float | None) -> float | None:
    """Milliseconds, or None (JSON null) for a chunk that never arrived."""
    return None if seconds is None else round(1e3 * seconds, 3)


def _rel_s(time_ns: int, origin_ns: int) -> float:
    return round((time_ns - origin_ns) / NS_PER_S, 6)


# --------------------------------------------------------------------------- files


def write_report(report: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """report.json, report.md and timeline.png in `out`; their paths by kind."""
    paths = {"json": out / "report.json", "md": out / "report.md", "png": out / "timeline.png"}
    paths["json"].write_text(json.dumps(report, indent=1, allow_nan=False))
    plot_timeline(report, paths["png"])
    paths["md"].write_text(markdown(report, paths["png"].name))
    return paths


def markdown(report: Mapping[str, Any], png_name: str) -> str:
    """A one-page summary for people; report.json has every number."""
    r = report
    lines = [
        f"# oxygen {r['source']} run: {Path(r['bag']).name}",
        "",
        f"Parameters `{r['params']}`, engine mode `{r['mode']}`, seed {r['seed']}.",
        "",
        *[f"**Warning:** {w}.\n" for w in r["warnings"]],
        "| metric | value |",
        "|---|---|",
        f"| frames (chunks published) | {r['frames']} |",
        f"| skipped frames | {sum(r['skipped_frames'].values())} |",
        f"| deadline misses | {r['deadline_misses']} |",
        f"| action Hz (H={r['horizon']}, over {r['measured_frames']} frames after warm-up) "
        f"| {r['action_hz']:.1f} |",
        f"| language tokens/s | {r['lang_tps']:.1f} |",
        f"| mean frame time (ms) / budget | {r['phase_ms'].get('frame', 0):.2f} / "
        f"{1e3 * r['frame_period_s']:.1f} |",
        f"| requests started / finished | {r['requests_started']} / {r['requests_finished']} |",
        f"| tokens decoded | {r['tokens']} |",
        "",
    ]
    lines += ["## Instructions", ""]
    lines += [f"- {i['time_s']:.2f} s: {i['text']!r}" for i in r["instructions"]] or ["none"]
    lines.append("")
    skipped = [f"- {reason}: {n}" for reason, n in r["skipped_frames"].items() if n]
    lines += ["## Skipped frames", "", *(skipped or ["none"]), ""]
    lines += ["## Finished texts", ""]
    for stream, texts in r["texts"].items():
        lines.append(f"**{stream}** ({len(texts)}, reasons {r['finish_reasons'][stream]}):")
        lines += [f"- `{t!r}`" for t in texts[:5]]
        lines += [f"- ... {len(texts) - 5} more in report.json"] if len(texts) > 5 else []
        lines.append("")
    unfinished = [(s, t) for s, ts in r["unfinished_texts"].items() for t in ts]
    if unfinished:
        lines += ["## Texts still decoding when the bag ended", ""]
        lines += [f"- {stream}: `{text!r}`" for stream, text in unfinished]
        lines.append("")
    if "score" in r:
        lines += score_report.markdown_lines(r["score"], SCORE_PNG)
    lines += ["## Timeline", "", f"![timeline]({png_name})", ""]
    return "\n".join(lines)


def plot_timeline(report: Mapping[str, Any], path: Path) -> None:
    """Frame time against the budget, batch and k, tokens per frame by stream."""
    t = report["timeline"]
    time_s = np.asarray(t["time_s"], float)
    # A bare Figure renders with Agg on savefig: no pyplot, no display, no global state.
    fig = Figure(figsize=(10, 7), layout="constrained")
    ax_time, ax_batch, ax_tokens = fig.subplots(3, 1, sharex=True, height_ratios=(2, 1, 1.2))
    period = report["frame_period_s"]
    latency_ms = np.asarray(t["latency_ms"], float)  # null -> NaN
    ax_time.plot(*_with_gaps(time_s, t["frame_ms"], period), ".-", ms=3, lw=0.8, label="frame time")
    ax_time.plot(time_s, latency_ms, ".", ms=2, color="tab:green", label="chunk latency")
    ax_time.axhline(1e3 * period, color="tab:red", ls="--", lw=1, label="budget (frame period)")
    late = latency_ms > 1e3 * period
    ax_time.plot(time_s[late], latency_ms[late], "x", color="tab:red", label="deadline miss")
    ax_time.set_ylabel("ms")
    ax_time.set_ylim(bottom=0)
    ax_time.legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, ncols=4, frameon=False)
    fig.suptitle(
        f"{Path(report['bag']).name} ({report['source']}, {report['mode']}): "
        f"{report['frames']} frames, {sum(report['skipped_frames'].values())} skipped, "
        f"{report['deadline_misses']} deadline misses"
    )
    ax_batch.step(time_s, t["batch"], where="post", label="batch (active requests)")
    ax_batch.step(time_s, t["k"], where="post", ls="--", label="k (tokens per request)")
    ax_batch.set_ylabel("count")
    ax_batch.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_batch.legend(loc="upper right", fontsize=8, ncols=2)
    bottom = np.zeros(len(time_s))
    for key in sorted(k for k in t if k.startswith("tokens_")):
        ax_tokens.bar(time_s, t[key], width=0.8 * period, bottom=bottom, label=key[7:])
        bottom += np.asarray(t[key], float)
    ax_tokens.set_ylabel("tokens / frame")
    ax_tokens.set_xlabel("bag time (s)")
    if ax_tokens.get_legend_handles_labels()[0]:  # no streams ran: no legend, no warning
        ax_tokens.legend(loc="upper right", fontsize=8, ncols=3)
    for change in report["instructions"]:
        for ax in (ax_time, ax_batch, ax_tokens):
            ax.axvline(change["time_s"], color="grey", lw=0.8, ls=":")
        ax_time.annotate(
            excerpt(change["text"]),  # a bag may carry any text: keep the plot readable
            (change["time_s"], 0.97),
            xycoords=("data", "axes fraction"),
            xytext=(3, 0),
            textcoords="offset points",
            fontsize=8,
            color="dimgrey",
            va="top",
            bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
        )
    fig.savefig(path, dpi=110)


def _with_gaps(
    time_s: np.ndarray, values: Sequence[float], period: float
) -> tuple[np.ndarray, np.ndarray]:
    """A NaN point wherever ticks were skipped, so the line breaks where frames are missing."""
    gaps = np.flatnonzero(np.diff(time_s) > 1.5 * period) + 1
    return np.insert(time_s, gaps, np.nan), np.insert(np.asarray(values, float), gaps, np.nan)
