"""The evaluation's report across tasks, from the per-task report.json files only.

Numbers come from what every task wrote (report.json; task.json and error.json only say
whether it finished), so the report can be rebuilt, and tested, from known files. Per
configuration, each metric's spread over the inputs: n, mean, sample standard deviation
(n - 1; none for a single input), min and max. A metric is read where a task's report
has it: replays have no success or seams, the expert policy's sim reports no node
figures (action Hz, tok/s, misses). Success rate and seams are closed-loop metrics, from
oxygen-eval node's report.json (`success.all.rate`, `seams`): the rate's spread is over
the configuration's sim tasks, and `success` adds, per family and for all, the episodes
and successes pooled over the tasks (successes / episodes, exact when batch sizes
differ) next to that spread. Meta-World's tasks (oxygen-eval node --world metaworld's report.json,
`world: metaworld`) are pooled the same way per MT10 task under `metaworld`, with the
mean steps to success over all their successes, and get a table of their own: task by
configuration. Outputs, in the output root: eval_report.json (everything), eval_report.md
(the tables) and eval_comparison.png (one panel per metric, configurations side by side).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from oxygen_core.sim.success import SuccessRate
from oxygen_ros.tools.eval.manifest import Task
from oxygen_ros.tools.eval.tasks import ERRORS, MARKER, read_json, task_dir

REPORT = "report.json"


@dataclasses.dataclass(frozen=True)
class Metric:
    key: str
    label: str
    value: Callable[[Mapping[str, Any]], float | None]


def _skipped(report: Mapping[str, Any]) -> int | None:
    skipped = report.get("skipped_frames")
    return None if skipped is None else sum(skipped.values())


def _success_rate(report: Mapping[str, Any]) -> float | None:
    return report["success"]["all"]["rate"] if "success" in report else None


def _seams(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda r: r["seams"].get(key) if "seams" in r else None


METRICS = (
    Metric("action_hz", "action Hz", lambda r: r.get("action_hz")),
    Metric("lang_tps", "language tok/s", lambda r: r.get("lang_tps")),
    Metric("deadline_misses", "deadline misses", lambda r: r.get("deadline_misses")),
    Metric("skipped_frames", "skipped frames", _skipped),
    Metric("frames", "frames", lambda r: r.get("frames")),
    Metric("tokens", "tokens", lambda r: r.get("tokens")),
    Metric("success_rate", "success rate", _success_rate),
    Metric("seams", "seams", _seams("seams")),
    Metric("seam_jump_mean", "seam jump (rad; gripper 0..1)", _seams("jump_mean")),
    Metric("seam_arm_jump_mean", "seam jump, arm (rad)", _seams("arm_jump_mean")),
)
PLOTTED = ("action_hz", "lang_tps", "deadline_misses", "skipped_frames", "success_rate", "seams")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Where one task stands, read from its folder."""

    task: str
    input: str
    configuration: str
    status: str  # "done", "failed" (an error.json, no marker) or "pending"
    report: Mapping[str, Any] | None = None
    error: str | None = None  # the last attempt's "Type: message"


def collect(root: Path, tasks: Sequence[Task]) -> list[Outcome]:
    """Every task's outcome, in manifest order."""
    outcomes = []
    for task in tasks:
        folder = task_dir(root, task)
        ids = {"task": task.id, "input": task.input.name, "configuration": task.config.name}
        errors = read_json(folder / ERRORS)
        if (folder / MARKER).is_file():
            outcomes.append(Outcome(**ids, status="done", report=read_json(folder / REPORT)))
        elif errors:
            last = errors["attempts"][-1]
            message = f"{last['type']}: {last['message']}"
            outcomes.append(Outcome(**ids, status="failed", error=message))
        else:
            outcomes.append(Outcome(**ids, status="pending"))
    return outcomes


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """n, mean, sample std (None for one value), min, max."""
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else None,
        "min": min(values),
        "max": max(values),
    }


def aggregate(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The aggregate report as plain JSON data."""
    configs: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        entry = configs.setdefault(
            outcome.configuration,
            {"tasks": {"done": 0, "failed": 0, "pending": 0}, "inputs": {}},
        )
        entry["tasks"][outcome.status] += 1
        if outcome.report is not None:
            values = {m.key: m.value(outcome.report) for m in METRICS}
            entry["inputs"][outcome.input] = {k: v for k, v in values.items() if v is not None}
    for name, entry in configs.items():
        entry["metrics"] = {}
        for metric in METRICS:
            values = [v[metric.key] for v in entry["inputs"].values() if metric.key in v]
            if values:
                entry["metrics"][metric.key] = spread(values)
        reports = [o.report for o in outcomes if o.configuration == name and o.report]
        success = pooled_success([r for r in reports if "success" in r and not _metaworld(r)])
        if success:
            entry["success"] = success
        metaworld = metaworld_success([r for r in reports if _metaworld(r)])
        if metaworld:
            entry["metaworld"] = metaworld
    return {
        "tasks": {
            status: sum(o.status == status for o in outcomes)
            for status in ("done", "failed", "pending")
        },
        "configurations": configs,
        "failed": [{"task": o.task, "error": o.error} for o in outcomes if o.status == "failed"],
    }


def _metaworld(report: Mapping[str, Any]) -> bool:
    return report.get("world") == "metaworld"


def pooled_success(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per key of the reports' `success` (a family, or a Meta-World task) and "all":
    tasks, episodes and successes pooled, their rate with its 95 % Wilson interval, the
    spread of the tasks' own rates, and the seed range the tasks ran on (dev, test or
    other: oxygen_core.sim.seeds; "mixed" when they differ)."""
    ranges = {r.get("seed_range", "other") for r in reports}
    seed_range = ranges.pop() if len(ranges) == 1 else "mixed"
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for report in reports:
        for family, rate in report["success"].items():
            groups.setdefault(family, []).append(rate)
    if "all" in groups:
        groups["all"] = groups.pop("all")  # last, after the families
    result = {}
    for family, rates in groups.items():
        episodes = sum(r["episodes"] for r in rates)
        pooled = SuccessRate(sum(r["successes"] for r in rates), episodes)
        result[family] = {
            "tasks": len(rates),
            "episodes": episodes,
            "successes": pooled.successes,
            "rate": pooled.rate if episodes else 0.0,
            "ci95": list(pooled.interval()) if episodes else None,
            "task_rate": spread([r["rate"] for r in rates]),
            "seed_range": seed_range,
        }
    return result


def metaworld_success(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`pooled_success` per MT10 task and "all", with the mean steps to success over
    every success (each report's mean weighted by its successes)."""
    result = pooled_success(reports)
    for key, entry in result.items():
        pairs = [
            (r["mean_steps_to_success"][key], r["success"][key]["successes"])
            for r in reports
            if key in r["success"] and r["success"][key]["successes"]
        ]
        wins = sum(k for _, k in pairs)
        entry["mean_steps_to_success"] = (
            round(sum(m * k for m, k in pairs) / wins, 2) if wins else None
        )
    return result


# --------------------------------------------------------------------------- files


def write_aggregate(summary: Mapping[str, Any], root: Path) -> dict[str, Path]:
    """eval_report.json, eval_report.md and eval_comparison.png in `root`."""
    paths = {
        "json": root / "eval_report.json",
        "md": root / "eval_report.md",
        "png": root / "eval_comparison.png",
    }
    paths["json"].write_text(json.dumps(summary, indent=1, allow_nan=False))
    plot_comparison(summary, paths["png"])
    paths["md"].write_text(markdown(summary, paths["png"].name))
    return paths


def _cell(stats: Mapping[str, Any] | None) -> str:
    if stats is None:
        return "-"
    std = "" if stats["std"] is None else f" ± {stats['std']:.3g}"
    return f"{stats['mean']:.4g}{std}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def markdown(summary: Mapping[str, Any], png_name: str) -> str:
    configs = summary["configurations"]
    metrics = [m for m in METRICS if any(m.key in c["metrics"] for c in configs.values())]
    t = summary["tasks"]
    lines = [
        "# oxygen-eval manifest",
        "",
        f"{t['done']} tasks done, {t['failed']} failed, {t['pending']} pending; "
        "values are mean ± sample std over the inputs.",
        "",
        "## Comparison",
        "",
        "| configuration | inputs | " + " | ".join(m.label for m in metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for name, entry in configs.items():
        cells = [_cell(entry["metrics"].get(m.key)) for m in metrics]
        lines.append(f"| {name} | {len(entry['inputs'])} | " + " | ".join(cells) + " |")
    lines += ["", f"![comparison]({png_name})", ""]
    lines += _success_table(configs)
    lines += _metaworld_table(configs)
    for name, entry in configs.items():
        tasks = entry["tasks"]
        lines += [
            f"## {name}",
            "",
            f"{tasks['done']} done, {tasks['failed']} failed, {tasks['pending']} pending.",
            "",
            "| metric | n | mean | std | min | max |",
            "|---|---|---|---|---|---|",
        ]
        for metric in metrics:
            s = entry["metrics"].get(metric.key)
            if s is not None:
                row = [s["n"], _number(s["mean"]), _number(s["std"]), _number(s["min"])]
                lines.append(
                    f"| {metric.label} | " + " | ".join(map(str, row)) + f" | {_number(s['max'])} |"
                )
        lines.append("")
    if summary["failed"]:
        lines += ["## Failed tasks", "", "Every attempt is in the task's error.json.", ""]
        lines += [f"- {f['task']}: {f['error']}" for f in summary["failed"]]
        lines.append("")
    return "\n".join(lines)


def _success_table(configs: Mapping[str, Any]) -> list[str]:
    """Closed-loop success per configuration and family, pooled and over tasks."""
    rows = [
        f"| {name} | {family} | {s['seed_range']} | {s['tasks']} | {s['episodes']} | "
        f"{s['successes']} | {_interval(s)} | {_cell(s['task_rate'])} |"
        for name, entry in configs.items()
        for family, s in entry.get("success", {}).items()
    ]
    if not rows:
        return []
    return [
        "## Closed-loop success",
        "",
        "Rate: successes / episodes over the tasks, with its 95 % Wilson interval; per "
        "task: mean ± sample std of the tasks' rates. Seeds: the range the tasks ran on "
        "(oxygen_core.sim.seeds).",
        "",
        "| configuration | family | seeds | tasks | episodes | successes | rate (95 %) "
        "| per task |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _metaworld_table(configs: Mapping[str, Any]) -> list[str]:
    """Meta-World success per MT10 task (rows) and configuration (columns)."""
    columns = {name: entry["metaworld"] for name, entry in configs.items() if "metaworld" in entry}
    if not columns:
        return []
    tasks = list(dict.fromkeys(task for by_task in columns.values() for task in by_task))
    tasks.append(tasks.pop(tasks.index("all")))  # last
    heads = [f"{name} ({by_task['all']['seed_range']} seeds)" for name, by_task in columns.items()]
    rows = [
        f"| {task} | " + " | ".join(_cell_of(by_task, task) for by_task in columns.values()) + " |"
        for task in tasks
    ]
    return [
        "## Meta-World success",
        "",
        "Per MT10 task: successes / episodes pooled over the task's runs (rate, 95 % Wilson "
        "interval, in %); eval_report.json has the mean steps to success.",
        "",
        "| task | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
        *rows,
        "",
    ]


def _cell_of(by_task: Mapping[str, Any], task: str) -> str:
    """ "32/50 (64 %, 50-76)", or "-" where the configuration did not run the task."""
    if task not in by_task:
        return "-"
    return SuccessRate(by_task[task]["successes"], by_task[task]["episodes"]).text()


def _interval(success: Mapping[str, Any]) -> str:
    """A pooled rate with its interval: "0.75 (0.30-0.95)"."""
    if success["ci95"] is None:
        return f"{success['rate']:.4g}"
    low, high = success["ci95"]
    return f"{success['rate']:.4g} ({low:.2f}-{high:.2f})"


def plot_comparison(summary: Mapping[str, Any], path: Path) -> None:
    """Per metric: each configuration's mean (bar), min-max (whisker), inputs (dots)."""
    configs = summary["configurations"]
    metrics = [
        m
        for m in METRICS
        if m.key in PLOTTED and any(m.key in c["metrics"] for c in configs.values())
    ]
    fig = Figure(figsize=(3.2 * max(len(metrics), 1), 3.6), layout="constrained")
    axes = fig.subplots(1, max(len(metrics), 1), squeeze=False)[0]
    names = list(configs)
    for ax, metric in zip(axes, metrics, strict=False):
        for x, name in enumerate(names):
            stats = configs[name]["metrics"].get(metric.key)
            if stats is None:
                continue
            mean = stats["mean"]
            low, high = mean - stats["min"], stats["max"] - mean
            ax.bar(x, mean, color=f"C{x}", alpha=0.6, yerr=[[low], [high]], capsize=4)
            values = [v[metric.key] for v in configs[name]["inputs"].values() if metric.key in v]
            ax.plot([x] * len(values), values, "k.", ms=4)
        ax.set_title(metric.label, fontsize=10)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(bottom=0)
    fig.suptitle("configurations over inputs: mean (bar), min-max, each input (dot)", fontsize=10)
    fig.savefig(path, dpi=100)
