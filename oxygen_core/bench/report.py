"""Benchmark output: markdown tables for the terminal, JSON, and PNG plots.

The markdown tables are the ones BENCHMARKS.md quotes, so a run's stdout can be pasted
there as is. Every phase time is shown next to its floor (`floors.py`) so a reader sees
at once which phase is far from what the machine allows. Plots use matplotlib's Agg
backend: the benchmark runs on headless machines.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from oxygen_core.bench.floors import Floors  # noqa: E402
from oxygen_core.bench.metrics import Comparison, Latency, RowResult  # noqa: E402


def _ms(seconds: float) -> str:
    """Milliseconds, with three decimals below 1 ms (tiny-preset floors)."""
    if math.isnan(seconds):
        return "-"
    ms = seconds * 1e3
    return f"{ms:.1f}" if abs(ms) >= 1 else f"{ms:.3f}"


def _vs(seconds: float, floor: float) -> str:
    return f"{_ms(seconds)} ({_ms(floor)})"


def _table(head: Sequence[str], lines: list[str]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *lines])


def results_table(results: Sequence[RowResult]) -> str:
    """One line per row; phase times in ms with their floors in parentheses."""
    head = (
        "workload", "row", "action Hz", "tok/s", "tokens/frame served / arrived",
        "frame p50/p99/max ms", "batch", "prefill ms (floor)", "denoise ms (floor)",
        "language ms", "decode step ms (floor)", "misses", "new compiles",
    )  # fmt: skip
    lines = []
    for r in results:
        misses = "-" if r.deadline_misses is None else f"{r.deadline_misses}/{r.frames}"
        lines.append(
            f"| {r.workload} | {r.label} | {r.action_hz:.2f} | {r.lang_tps:.1f} | "
            f"{r.tokens_per_frame:.1f} / {r.arrived_tokens_per_frame:.1f} | "
            f"{_ms(r.frame_p50_s)} / {_ms(r.frame_p99_s)} / {_ms(r.frame_max_s)} | "
            f"{r.avg_batch:.1f} | {_vs(r.prefill_s, r.prefill_floor_s)} | "
            f"{_vs(r.denoise_s, r.denoise_floor_s)} | {_ms(r.language_s)} | "
            f"{_vs(r.decode_step_s, r.decode_floor_s)} | {misses} | {r.new_compiles} |"
        )
    return _table(head, lines)


def _frames(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _ratio(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def _pair(latency: Latency, unit: str, show: Callable[[float], str]) -> str:
    """p50 / p99 of one unit ("frames" or "s") of a latency, each value through `show`."""
    p50, p99 = getattr(latency, f"{unit}_p50"), getattr(latency, f"{unit}_p99")
    return f"{show(p50)} / {show(p99)}"


def language_table(results: Sequence[RowResult]) -> str:
    """Language per row: tok/s two ways, and per request the first-token and completion
    latency (p50 / p99) in frames (the submitting frame counts as 1) and in ms."""
    head = (
        "workload", "row", "tok/s", "tok/s, mean of frame rates", "requests completed / unfinished",
        "first token p50 / p99 frames", "first token p50 / p99 ms",
        "completion p50 / p99 frames", "completion p50 / p99 ms",
    )  # fmt: skip
    lines = [
        f"| {r.workload} | {r.label} | {r.lang_tps:.1f} | {r.lang_tps_frame_mean:.1f} | "
        f"{r.requests_completed} / {r.requests_unfinished} | "
        f"{_pair(r.first_token, 'frames', _frames)} | {_pair(r.first_token, 's', _ms)} | "
        f"{_pair(r.completion, 'frames', _frames)} | {_pair(r.completion, 's', _ms)} |"
        for r in results
    ]
    return _table(head, lines)


def behind_notes(results: Sequence[RowResult]) -> list[str]:
    """A line per row that fell behind its arrivals: its ratios compare unequal work."""
    return [
        f"- {r.workload} {r.label}: served {r.tokens_per_frame:.1f} of "
        f"{r.arrived_tokens_per_frame:.1f} tokens/frame, {r.rejected} requests refused, "
        f"{r.queued_end} queued at the end"
        for r in results
        if r.rejected or r.queued_end
    ]


def comparison_table(comparisons: Sequence[Comparison]) -> str:
    """OxyGen over isolated: the bound from phase times next to the measured ratios, and
    the ratios of the request latencies (p50 / p99; above 1x: OxyGen's requests wait longer)."""
    head = (
        "workload", "row", "bound", "action Hz ratio", "tok/s ratio", "action / bound",
        "admission ms/frame", "first token ratio frames", "first token ratio ms",
        "completion ratio frames", "completion ratio ms",
    )  # fmt: skip
    lines = [
        f"| {c.workload} | {c.label} | {c.bound:.2f}x | {c.action_ratio:.2f}x | "
        f"{c.tps_ratio:.2f}x | {c.action_ratio / c.bound:.0%} | {_ms(c.admission_s)} | "
        f"{_pair(c.first_token_ratio, 'frames', _ratio)} | "
        f"{_pair(c.first_token_ratio, 's', _ratio)} | "
        f"{_pair(c.completion_ratio, 'frames', _ratio)} | "
        f"{_pair(c.completion_ratio, 's', _ratio)} |"
        for c in comparisons
    ]
    return _table(head, lines)


def probe_table(
    steps: dict[int, float], overheads: dict[int, float], floors: Floors, capacity: int
) -> str:
    """The pool's decode step per bucket, alone, against its floor; and the call overhead."""
    head = ("bucket", "decode step ms", "floor ms", "step / floor", "call overhead ms (k=0)")
    lines = []
    for bucket, step in sorted(steps.items()):
        floor = floors.decode_step_s(bucket, capacity)
        lines.append(
            f"| {bucket} | {_ms(step)} | {_ms(floor)} | {step / floor:.1f}x | "
            f"{_ms(overheads[bucket])} |"
        )
    return _table(head, lines)


def machine_line(floors: Floors) -> str:
    m = floors.machine
    return (
        f"machine: {m.backend}, {m.dtype} matmul {m.matmul_gflops:.0f} GFLOP/s, "
        f"matrix-vector {m.matvec_gbps:.1f} GB/s (best seen over the run)"
    )


def write_json(path: Path, payload: dict) -> None:
    """Everything measured, dataclasses as dicts (frame timelines included)."""

    def plain(value):
        if dataclasses.is_dataclass(value):
            return dataclasses.asdict(value)
        raise TypeError(f"cannot write {type(value).__name__} to JSON")

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=plain))


# ----------------------------------------------------------------------------- plots


METRICS = (("action_hz", "action Hz"), ("lang_tps", "tok/s (total tokens / total time)"))


def _panels():
    """A figure with one panel per metric: yields (axis, RowResult field, title)."""
    fig, axes = plt.subplots(1, len(METRICS), figsize=(11, 4))
    return fig, [(ax, *m) for ax, m in zip(axes, METRICS, strict=True)]


def _k_axis(r: RowResult) -> float:
    return r.avg_k if r.mode == "oxygen-auto" else float(r.k) if r.k is not None else math.nan


def plot_vs_k(results: Sequence[RowResult], path: Path) -> None:
    """Action Hz and tok/s against k per mode; baselines (no k) as horizontal lines."""
    fig, panels = _panels()
    ks = sorted(r.k for r in results if r.mode == "oxygen")
    for ax, metric, title in panels:
        fixed = [r for r in results if r.mode == "oxygen"]
        ax.plot([r.k for r in fixed], [getattr(r, metric) for r in fixed], "o-", label="oxygen")
        for r in results:
            if r.mode == "oxygen-auto":
                ax.plot(_k_axis(r), getattr(r, metric), "*", ms=14, label="oxygen k=auto (mean k)")
            elif r.k is None:
                ax.axhline(getattr(r, metric), ls="--", color=_baseline_color(r.mode), label=r.mode)
        ax.set(xlabel="k (tokens per request per frame)", ylabel=title, title=f"{title} vs k")
        if ks:
            ax.set_xticks(ks)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    panels[0][0].legend(fontsize=8)
    _save(fig, path, f"N={results[0].n}, S={results[0].steps}, workload {results[0].workload}")


def _baseline_color(mode: str) -> str:
    return {"isolated": "tab:red", "shared": "tab:gray"}[mode]


def plot_sweep(results: Sequence[RowResult], name: str, path: Path) -> None:
    """Action Hz and tok/s of every row across the workloads of one sweep."""
    workloads = list(dict.fromkeys(r.workload for r in results))
    labels = list(dict.fromkeys(r.label for r in results))
    fig, panels = _panels()
    xs = range(len(workloads))
    for ax, metric, title in panels:
        for label in labels:
            ys = {r.workload: getattr(r, metric) for r in results if r.label == label}
            ax.plot(xs, [ys.get(w, math.nan) for w in workloads], "o-", label=label)
        ax.set_xticks(xs, workloads, rotation=15, fontsize=8)
        ax.set(ylabel=title, title=f"{title}, sweep '{name}'")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    panels[0][0].legend(fontsize=8)
    _save(fig, path, f"N={results[0].n}, S={results[0].steps}")


def plot_timeline(results: Sequence[RowResult], budget_s: float | None, path: Path) -> None:
    """Measured frame time of every row, frame by frame, against the budget."""
    fig, ax = plt.subplots(figsize=(11, 4))
    for r in results:
        ax.plot([s * 1e3 for s in r.frame_s], ".-", label=r.label)
    if budget_s is not None:
        ax.axhline(budget_s * 1e3, color="k", ls=":", label="frame budget")
    ax.set(xlabel="measured frame", ylabel="frame time (ms)", title="frame-time timeline")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    _save(fig, path, f"workload {results[0].workload}, N={results[0].n}, S={results[0].steps}")


def _save(fig, path: Path, subtitle: str) -> None:
    fig.suptitle(subtitle, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
