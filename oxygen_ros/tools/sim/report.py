"""The closed-loop report of `oxygen-eval node`: report.json, report.md, plots and a GIF.

Episodes come from the sim's EpisodeOutcome messages (success, time to success, seams,
trajectories accepted and rejected by reason, the commanded points outside the arm's
limits as a controller counts them: `limit_violations`). The node's figures come from its own
output messages: chunks and late chunks per episode are its ActionChunks stamped inside
the episode's sim-time window, its narration and memory texts those finished inside it,
and the run's action Hz, tokens/s, deadline misses and skipped frames are
`tools.report.build_report` over the whole recording (the same code and definitions as
oxygen-bag replay's, docs/DESIGN.md section 2), kept under "node" with its timeline. With the
expert policy there is no node: an episode's chunks are the trajectories the sim accepted,
and its texts the expert's narration and memory lines.

Seams are pooled over the episodes exactly (`SeamSummary.pooled`). Renders per second
are the sim's own measurement (renders over the wall time spent rendering); the achieved
real-time factor is the episodes' sim seconds over their wall seconds (the sim's clocks).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim.executor import LimitViolations
from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.seam import SeamSummary
from oxygen_core.sim.seeds import range_name
from oxygen_core.sim.success import SuccessRate
from oxygen_ros.params import Settings
from oxygen_ros.tools.closed_loop import node_figures, node_report, success_entry
from oxygen_ros.tools.configure import TopicNames
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.tools.report import Recording, plot_timeline
from oxygen_ros.tools.sim import animation
from oxygen_ros.tools.sim.messages import outcome_of


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """How the run was started (the report's header)."""

    policy: str  # "model" or "expert"
    mode: str
    params: str
    families: tuple[str, ...]
    seeds: tuple[int, ...]
    rtf: float
    camera_size: int
    wall_s: float


def _inside(o: Outcome, time_ns: int) -> bool:
    return o.start_ns <= time_ns <= o.end_ns


def _contacts(o: Outcome) -> dict[str, Any]:
    """How the target got where it is (JSON: a never-released target's height is null)."""
    c = dataclasses.asdict(o.contacts)
    c["release_height"] = None if math.isnan(c["release_height"]) else c["release_height"]
    return c


def episode_entry(o: Outcome, collector: Any, model: bool) -> dict[str, Any]:
    """One episode of report.json."""
    if model:
        chunks = [met for t, met in collector.chunks if _inside(o, t)]
        texts = {
            stream: [
                text
                for t, s, text, done in collector.language
                if done and s == stream and _inside(o, t)
            ]
            for stream in ("narration", "memory")
        }
        chunk_count, late = len(chunks), chunks.count(False)
    else:
        texts = {"narration": list(o.narration), "memory": list(o.memory)}
        chunk_count, late = o.accepted, 0
    return {
        "index": o.index,
        "family": o.family,
        "seed": o.seed,
        "instruction": o.instruction,
        "success": o.success,
        "contacts": _contacts(o),
        "time_to_success_s": round(o.duration_s, 6) if o.success else None,
        "duration_s": round(o.duration_s, 6),
        "steps": o.steps,
        "chunks": chunk_count,
        "late_chunks": late,
        "trajectories_accepted": o.accepted,
        "trajectories_rejected": o.rejected,
        "seams": o.seams.as_dict(),
        "limit_violations": o.limits.as_dict(),
        "narration": texts["narration"],
        "memory": texts["memory"],
    }


def build(
    run: RunSetup,
    collector: Any,
    recording: Recording,
    settings: Settings,
    names: TopicNames,
    out: Path,
) -> dict[str, Any]:
    """report.json as plain data."""
    outcomes = sorted((outcome_of(m) for m in collector.outcomes), key=lambda o: o.index)
    model = run.policy == "model"
    episodes = [episode_entry(o, collector, model) for o in outcomes]
    per_family: dict[str, list[dict]] = collections.defaultdict(list)
    for e in episodes:
        per_family[e["family"]].append(e)
    rejected: collections.Counter[str] = collections.Counter()
    for o in outcomes:
        rejected.update(o.rejected)
    renders = sum(o.renders for o in outcomes)
    render_s = sum(o.render_wall_s for o in outcomes)
    sim_s = sum(o.duration_s for o in outcomes)
    wall_s = sum(o.wall_s for o in outcomes)
    report: dict[str, Any] = {
        **dataclasses.asdict(run),
        "episodes_run": len(episodes),
        "seed_range": range_name(range(run.seeds[0], run.seeds[-1] + 1)) if run.seeds else "other",
        "success": {f: _rate(es) for f, es in per_family.items()} | {"all": _rate(episodes)},
        "mean_time_to_success_s": {
            f: _mean([e["time_to_success_s"] for e in es if e["success"]])
            for f, es in per_family.items()
        },
        "seams": SeamSummary.pooled([o.seams for o in outcomes]).as_dict(),
        "limit_violations": sum((o.limits for o in outcomes), LimitViolations()).as_dict(),
        "trajectories_accepted": sum(o.accepted for o in outcomes),
        "trajectories_rejected": dict(sorted(rejected.items())),
        "chunks": sum(e["chunks"] for e in episodes),
        "late_chunks": sum(e["late_chunks"] for e in episodes),
        "renders": renders,
        "renders_per_s": round(renders / render_s, 1) if render_s > 0 else 0.0,
        "sim_s": round(sim_s, 3),
        "episodes_wall_s": round(wall_s, 3),
        "achieved_rtf": round(sim_s / wall_s, 3) if wall_s > 0 else None,
        "episodes": episodes,
    }
    if model:
        starts = [(o.start_ns, o.instruction) for o in outcomes]
        report["node"] = node_report(run.params, recording, settings, names, starts, out)
        report.update(node_figures(report["node"]))
    return report


def _rate(episodes: list[dict]) -> dict[str, Any]:
    return success_entry(sum(e["success"] for e in episodes), len(episodes))


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


# --------------------------------------------------------------------------- files


def write(
    out: Path,
    run: RunSetup,
    collector: Any,
    recording: Recording,
    settings: Settings,
    names: TopicNames,
) -> dict[str, Path]:
    """Every file of the report; their paths by kind."""
    report = build(run, collector, recording, settings, names, out)
    paths = {
        "json": out / "report.json",
        "md": out / "report.md",
        "episodes_png": out / "episodes.png",
        "gif": out / "episodes.gif",
        "bag": out / OUTPUT_BAG,
    }
    paths["json"].write_text(json.dumps(report, indent=1, allow_nan=False))
    plot_episodes(report, paths["episodes_png"])
    if "node" in report:
        paths["timeline_png"] = out / "timeline.png"
        plot_timeline(report["node"], paths["timeline_png"])
    outcomes = [outcome_of(m) for m in collector.outcomes]
    narration = _narration_track(collector, run.policy == "model")
    fps = NS_PER_S / collector.gif_period_ns
    if not animation.write_gif(paths["gif"], collector.frames, outcomes, narration, fps):
        del paths["gif"]
    paths["md"].write_text(markdown(report, paths))
    return paths


def _narration_track(collector: Any, model: bool) -> list[tuple[int, str]]:
    """(sim time, narration shown from then on): the node's stream, or the expert's."""
    if model:
        track = [(t, text) for t, s, text, _ in collector.language if s == "narration"]
    else:
        track = [(t, line) for t, s, line in collector.expert if s == "narration"]
    return sorted(track, key=lambda entry: entry[0])


def headline(paths: Mapping[str, Path]) -> str:
    report = json.loads(paths["json"].read_text())
    lines = [f"success per family: {_success_line(report)}"]
    if "node" in report:
        lines.append(
            f"node: {report['frames']} chunks, action {report['action_hz']:.1f} Hz, "
            f"{report['lang_tps']:.1f} tok/s, {report['deadline_misses']} deadline misses"
        )
    s = report["seams"]
    lines.append(
        f"seams: {s['seams']}, jump mean {s['jump_mean']:.4f} max {s['jump_max']:.4f} "
        f"(arm {s['arm_jump_mean']:.4f} rad, gripper {s['gripper_jump_mean']:.4f})"
    )
    v = report["limit_violations"]
    lines.append(
        f"points over the arm's limits: {v['position']} position, {v['velocity']} velocity "
        f"(in {v['trajectories']} trajectories)"
    )
    lines += [f"{kind}: {path}" for kind, path in paths.items()]
    return "\n".join(lines)


def _success_line(report: Mapping[str, Any]) -> str:
    """Per family: successes/episodes (rate %, its 95 % interval), and the seed range."""
    rates = ", ".join(
        f"{f} {SuccessRate(r['successes'], r['episodes']).text()}"
        for f, r in report["success"].items()
    )
    return f"{rates} on {report.get('seed_range', 'other')} seeds"


def markdown(report: Mapping[str, Any], paths: Mapping[str, Path]) -> str:
    """One page for people; report.json has every number."""
    r = report
    s, v = r["seams"], r["limit_violations"]
    lines = [
        f"# oxygen closed loop: policy {r['policy']}"
        + (f", engine mode {r['mode']}" if r["policy"] == "model" else ""),
        "",
        f"Params `{r['params']}`, families {', '.join(r['families'])}, seeds "
        f"{r['seeds'][0]}..{r['seeds'][-1]} ({r['seed_range']}), real-time factor "
        f"{r['rtf']:g} (achieved "
        f"{r['achieved_rtf']}), cameras {r['camera_size']} px, wall time {r['wall_s']:.0f} s.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| success | {_success_line(r)} |",
        f"| mean time to success (s) | {r['mean_time_to_success_s']} |",
        f"| chunks executed / late | {r['chunks']} / {r['late_chunks']} |",
        f"| trajectories rejected | {r['trajectories_rejected'] or 'none'} |",
        f"| points over the arm's limits: position / velocity (trajectories) | "
        f"{v['position']} / {v['velocity']} ({v['trajectories']}) |",
        f"| seams | {s['seams']}: jump mean {s['jump_mean']:.4f}, max {s['jump_max']:.4f}; "
        f"jerk mean {s['jerk_mean']:.1f}, max {s['jerk_max']:.1f} |",
        f"| seam jump: arm (rad) / gripper (0..1) | mean {s['arm_jump_mean']:.4f}, max "
        f"{s['arm_jump_max']:.4f} / mean {s['gripper_jump_mean']:.4f}, max "
        f"{s['gripper_jump_max']:.4f} |",
        f"| renders/s (sim) | {r['renders_per_s']} ({r['renders']} renders) |",
    ]
    if "node" in r:
        lines += [
            f"| action Hz / language tok/s | {r['action_hz']:.1f} / {r['lang_tps']:.1f} |",
            f"| deadline misses / overruns | {r['deadline_misses']} / {r['overruns']} |",
            f"| skipped frames | {r['skipped_frames']} |",
        ]
    lines += ["", "## Episodes", "", "| # | family | seed | instruction | success | s | chunks |"]
    lines.append("|---|---|---|---|---|---|---|")
    for e in r["episodes"]:
        lines.append(
            f"| {e['index']} | {e['family']} | {e['seed']} | {e['instruction']} | "
            f"{'yes' if e['success'] else 'no'} | {e['duration_s']:.2f} | {e['chunks']} |"
        )
    lines += ["", "![episodes](episodes.png)", ""]
    if "timeline_png" in paths:
        lines += ["![timeline](timeline.png)", ""]
    if "gif" in paths:
        lines += ["![first episode of each family](episodes.gif)", ""]
    return "\n".join(lines)


def plot_episodes(report: Mapping[str, Any], path: Path) -> None:
    """Success per family; each episode's duration (filled: success) and seam jumps."""
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax_rate, ax_time, ax_seam = fig.subplots(1, 3, width_ratios=(1, 2, 2))
    families = [f for f in report["success"] if f != "all"]
    ax_rate.bar(families, [100 * report["success"][f]["rate"] for f in families])
    ax_rate.set_ylim(0, 100)
    ax_rate.set_ylabel("success (%)")
    for i, family in enumerate(families):
        es = [e for e in report["episodes"] if e["family"] == family]
        x = [e["seed"] for e in es]
        ok = np.array([e["success"] for e in es], bool)
        duration = np.array([e["duration_s"] for e in es])
        colour = f"C{i}"
        ax_time.plot(np.array(x)[ok], duration[ok], "o", color=colour, label=family)
        ax_time.plot(np.array(x)[~ok], duration[~ok], "o", mfc="none", color=colour)
        jumps = [e["seams"]["jump_mean"] for e in es]
        ax_seam.plot(x, jumps, ".-", color=colour, label=family)
    ax_time.set_xlabel("seed")
    ax_time.set_ylabel("episode length (s, sim); open: failed")
    ax_time.legend(fontsize=8)
    ax_seam.set_xlabel("seed")
    ax_seam.set_ylabel("mean seam jump (rad)")
    fig.suptitle(f"closed loop, policy {report['policy']}: {_success_line(report)}")
    fig.savefig(path, dpi=100)
