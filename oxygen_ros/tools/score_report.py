"""A scored replay's part of the report: report.json's "score", its tables and score.png.

`score_section` scores chunks (oxygen_core.offline_score) against the targets read from
the bag (oxygen_ros.tools.score_targets) and the node's finished texts against the
reference lines; `markdown_lines` and `terminal_table` show the error per joint and
horizon step, `plot_score` the predicted against the recorded commands per joint over
the bag's time. Steps without a scored row are null in report.json.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from oxygen_core.clock import NS_PER_S
from oxygen_core.offline_score import Chunk, ChunkScore, score_against, text_score
from oxygen_ros.tools.score_targets import ScoreTargets

CONVENTION = (
    "row i of a chunk is the command for its frame's tick + i control periods (the stamp of "
    "a chunk published without hand-over delay); a JointState target is the state measured "
    "one period after"
)
SOURCES = {
    "policy": "every chunk the engine returned, before the hand-over and the chunk gate",
    "published": "the rows the node published on ~/action_chunk (after the hand-over and gate)",
}
Scored = list[tuple[Chunk, np.ndarray, np.ndarray]]  # chunk, its commands, valid rows


def score_section(
    chunks: Sequence[Chunk],
    said: Sequence[tuple[str, int, str]],
    targets: ScoreTargets,
    source: str,
) -> tuple[dict[str, Any], Scored]:
    """report.json's "score" and the scored chunks (for the plot). said: the node's
    finished texts as (stream, the tick of the frame they describe, text)."""
    section: dict[str, Any] = {
        "chunks": source,
        "chunks_are": SOURCES[source],
        "convention": CONVENTION,
        "notes": list(targets.notes),
        "frames": len(chunks),
        "texts": _texts(said, targets),
    }
    commands, scored = targets.commands, []
    if commands is not None and len(commands.series) and chunks:
        grippers = {name: g.threshold for name, g in targets.grippers.items()}
        score, scored = score_against(
            chunks,
            commands.series,
            targets.boundaries_ns,
            targets.period_ns,
            targets.names,
            grippers,
        )
        section["target"] = {
            "topic": commands.topic,
            "kind": commands.kind,
            "space": "the chunk's columns: joint positions in robot units",
            "skipped_messages": dict(commands.skipped),
        }
        section |= _chunk_figures(score, targets)
    return section, scored


def _chunk_figures(score: ChunkScore, targets: ScoreTargets) -> dict[str, Any]:
    names = score.names
    arm = [k for k, n in enumerate(names) if n not in targets.grippers]
    return {
        "frames_scored": score.chunks,
        "joints": list(names),
        "rows_scored": score.rows.tolist(),
        "mae": {n: _list(score.mae[:, k]) for k, n in enumerate(names)},
        "mse": {n: _list(score.mse[:, k]) for k, n in enumerate(names)},
        "mae_by_joint": {n: _num(score.mean(score.mae, [k])) for k, n in enumerate(names)},
        "mse_by_joint": {n: _num(score.mean(score.mse, [k])) for k, n in enumerate(names)},
        "mae_by_step": _list(_step_means(score.mae, arm)),
        "arm_mae": _num(score.mean(score.mae, arm)),
        "arm_mse": _num(score.mean(score.mse, arm)),
        "first_row_mae": {n: _num(score.first_mae[k]) for k, n in enumerate(names)},
        "grippers": {
            name: {
                "threshold": g.threshold,
                "range": [g.lower, g.upper],
                "range_from": g.source,
                "agreement": _num(score.grippers[name].agreement),
                "agreement_by_step": list(score.grippers[name].by_step),
            }
            for name, g in targets.grippers.items()
        },
    }


def _step_means(table: np.ndarray, columns: Sequence[int]) -> np.ndarray:
    """Per horizon step, the mean over `columns` (NaN where the step has no rows)."""
    if not columns:
        return np.full(len(table), np.nan)
    return table[:, list(columns)].mean(axis=1)


def _texts(said: Sequence[tuple[str, int, str]], targets: ScoreTargets) -> dict[str, Any]:
    out = {}
    for stream, (topic, _) in targets.references.items():
        pairs = [(text, targets.reference(s, t)) for s, t, text in said if s == stream]
        score = text_score(pairs)
        out[stream] = {
            "topic": topic,
            "texts": score.texts,
            "exact": _num(score.exact),
            "word_f1": _num(score.word_f1),
        }
    return out


def _num(value: float) -> float | None:
    """JSON has no NaN: null for a figure without data."""
    return None if value is None or math.isnan(value) else float(value)


def _list(values: np.ndarray) -> list[float | None]:
    return [_num(v) for v in values]


# --------------------------------------------------------------------------- text


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def error_rows(score: Mapping[str, Any], table: str = "mae") -> list[list[str]]:
    """Header and one row per joint: the error per horizon step, its mean, first row."""
    horizon = len(score["rows_scored"])
    rows = [["joint", *[str(i) for i in range(horizon)], "mean", "first row"]]
    for joint in score["joints"]:
        values = [_cell(v) for v in score[table][joint]]
        first = _cell(score["first_row_mae"][joint]) if table == "mae" else "-"
        rows.append([joint, *values, _cell(score[f"{table}_by_joint"][joint]), first])
    return rows


def terminal_table(score: Mapping[str, Any]) -> str:
    """The MAE table for the terminal with what it compares, the gripper and text figures,
    and why anything was not scored."""
    lines = [f"score: {note}" for note in score["notes"]]
    if "joints" in score:
        rows = error_rows(score)
        widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        lines.append(
            f"open-loop MAE per joint and horizon step (row i: tick + i periods) of "
            f"{score['frames_scored']}/{score['frames']} {score['chunks']} chunks against "
            f"{score['target']['topic']}; arm {_cell(score['arm_mae'])}"
        )
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines += [
            f"{name} open/close agreement {_cell(g['agreement'])} (threshold {g['threshold']:g})"
            for name, g in score["grippers"].items()
        ]
    lines += [
        f"{stream} vs {t['topic']}: exact {_cell(t['exact'])}, word F1 {_cell(t['word_f1'])} "
        f"over {t['texts']} texts"
        for stream, t in score["texts"].items()
    ]
    return "\n".join(lines)


def markdown_lines(score: Mapping[str, Any], png_name: str) -> list[str]:
    """report.md's "Open-loop score" section."""
    lines = ["## Open-loop score", ""]
    lines += [f"- {note}" for note in score["notes"]]
    if "joints" in score:
        lines += [
            f"{score['frames_scored']} of {score['frames']} chunks scored ({score['chunks_are']}) "
            f"against `{score['target']['topic']}` ({score['target']['kind']}), in "
            f"{score['target']['space']}; {score['convention']}. Arm MAE "
            f"{_cell(score['arm_mae'])}, MSE {_cell(score['arm_mse'])}.",
            "",
        ]
        for table in ("mae", "mse"):
            rows = error_rows(score, table)
            lines += [f"**{table.upper()}** per joint and horizon step:", ""]
            lines += ["| " + " | ".join(r) + " |" for r in rows[:1]]
            lines += ["|" + "---|" * len(rows[0])]
            lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
            lines.append("")
        for name, g in score["grippers"].items():
            lines.append(
                f"- {name}: open/close agreement {_cell(g['agreement'])} (threshold "
                f"{g['threshold']:g}, the middle of its range {g['range']} from its "
                f"{g['range_from']})"
            )
        lines += ["", f"![score]({png_name})", ""]
    if score["texts"]:
        lines += [
            "| stream | reference topic | texts | exact match | word F1 |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {s} | `{t['topic']}` | {t['texts']} | {_cell(t['exact'])} | {_cell(t['word_f1'])} |"
            for s, t in score["texts"].items()
        ]
        lines.append("")
    return lines


# --------------------------------------------------------------------------- plot


def plot_score(
    scored: Scored, targets: ScoreTargets, origin_ns: int, title: str, path: Path
) -> None:
    """One panel per joint: the recorded commands over bag time, and every scored chunk's
    rows where they apply (a thin line from its first row, marked)."""
    names = targets.names
    fig = Figure(figsize=(10, 1.6 * len(names) + 1), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(names), 1, sharex=True))
    series = targets.commands.series
    rel = lambda ns: (np.asarray(ns, np.float64) - origin_ns) / NS_PER_S  # noqa: E731
    gaps = np.flatnonzero(np.diff(series.segments)) + 1  # no line across a task change
    times = np.insert(rel(series.times_ns), gaps, np.nan)
    for k, ax in enumerate(axes):
        ax.plot(
            times,
            np.insert(series.positions[:, k], gaps, np.nan),
            color="black",
            lw=1.2,
            label="recorded command",
        )
        for chunk, _, _ in scored:
            t = rel(chunk.t0_ns + targets.period_ns * np.arange(len(chunk.actions)))
            ax.plot(t, chunk.actions[:, k], color="tab:orange", lw=0.6, alpha=0.7)
            ax.plot(t[:1], chunk.actions[:1, k], ".", color="tab:orange", ms=2.5)
        ax.set_ylabel(names[k], fontsize=8)
    axes[0].plot([], [], color="tab:orange", lw=0.8, label="predicted chunk (dot: row 0)")
    axes[0].legend(loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=8, ncols=2, frameon=False)
    axes[-1].set_xlabel("bag time (s)")
    fig.suptitle(title)
    fig.savefig(path, dpi=100)


# --------------------------------------------------------------------------- a run


def add_score(
    report: dict[str, Any],
    chunks: Sequence[Chunk],
    said: Sequence[tuple[str, int, str]],
    targets: ScoreTargets,
    source: str,
    origin_ns: int,
    png: Path,
) -> None:
    """Score a run into `report` ("score") and draw `png` when chunks were scored, on the
    timeline's bag time (0 at origin_ns)."""
    section, scored = score_section(chunks, said, targets, source)
    report["score"] = section
    if scored:
        title = (
            f"{Path(report['bag']).name} ({report['source']}, {report['mode']}): predicted "
            f"chunks against {section['target']['topic']}"
        )
        plot_score(scored, targets, origin_ns, title, png)
