"""`oxygen-eval sweep`: closed-loop success against the chunk's delay, and where each
engine mode's latency falls on that curve.

    oxygen-eval sweep --checkpoint CKPT [--delays 0,1,2,3,4,6,8]
        [--handovers replace,rtc] [--episodes 20] [--first-seed 400000]
        [--bench BENCH.json] [--out out/latency]

A chunk computed from a frame reaches the controller d control steps later; meanwhile the
robot runs what it has. For each hand-over and each d the policy runs in closed loop on
the same seeds (`rollout.evaluate` through `evaluate.closed_loop`, the chunk gate on as the
node's, d as oxygen-eval in-process's --link-delay): success per family with its 95 % interval,
mean time to success, mean seam jump. That curve prices latency in success; an engine
mode's latency then reads off it. The marks, each converted to control steps at the
sim's control rate (rounded up: a chunk late by part of a step misses that step):

    measured  from an oxygen-bench engine JSON of the policy's preset on the machine at hand
              (--bench): isolated and shared at their median frame time (their chunk is
              ready only when the frame's language work is done), OxyGen at its prefill
              plus denoise (its chunk is out before the language phase);
    paper     pi05 on Jetson AGX Thor: isolated 1030 ms per frame, OxyGen's prefill plus
              denoise 198 ms (docs/DESIGN.md section 1's figures), not measured here.

d runs up to the horizon less the rows a frame executes (the node refuses more at
configure: the robot would run out of rows); a mark beyond that means the robot runs out
of actions before the chunk arrives. Writes sweep.json, sweep.md and sweep.png into --out
and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from oxygen_core.sim import seeds as S
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ
from oxygen_core.train import checkpoints, evaluate, rollout

HANDOVERS = ("replace", "blend", "rtc")
# pi05 on Jetson AGX Thor (the paper's humanoid), ms: isolated's frame, OxyGen's
# prefill + denoise. Quoted, not measured here.
PAPER_MS = {"isolated (Thor, paper)": 1030.0, "oxygen (Thor, paper)": 198.0}


@dataclasses.dataclass(frozen=True)
class Point:
    """One (hand-over, delay) cell of the sweep."""

    handover: str
    delay: int
    summary: Mapping[str, dict]  # rollout.summarise: per family and "all"
    time_to_success_s: float  # mean over successful episodes (nan: none)

    def row(self) -> dict:
        everything = self.summary["all"]
        return {
            "handover": self.handover,
            "delay": self.delay,
            "success": {family: _rate(s) for family, s in self.summary.items()},
            "time_to_success_s": self.time_to_success_s,
            "seam_jump_mean": everything["seams"]["jump_mean"],
            "takeover": takeover(everything["seams"]),
        }


def takeover(seams: Mapping[str, float]) -> dict[str, float]:
    """The arm's commands around each take-over (oxygen_core.sim.seam), at the control rate:
    the largest velocity, acceleration and jerk, mean and max over take-overs, and how
    many passed a limit."""
    keys = ("velocity", "acceleration", "jerk")
    out = {f"{k}_{s}": seams[f"takeover_{k}_{s}"] for k in keys for s in ("mean", "max")}
    return {**out, "takeovers": seams["seams"], "over": seams["takeovers_over"]}


def _rate(summary: Mapping) -> dict:
    return {
        "successes": summary["successes"],
        "episodes": summary["episodes"],
        "rate": summary["success"],
        "ci95": summary["success_ci95"],
    }


def steps_for(ms: float, control_hz: float) -> int:
    """A latency in control steps, rounded up."""
    return math.ceil(ms / 1000.0 * control_hz - 1e-9)


def bench_marks(bench: Mapping) -> dict[str, float]:
    """The measured marks (ms) of an oxygen-bench engine payload: isolated and shared at their
    median frame, OxyGen at prefill + denoise (its first row: every k has the same)."""
    marks: dict[str, float] = {}
    for row in bench["rows"]:
        mode = row["mode"]
        name = f"{mode} ({bench['preset']}, measured)"
        if name in marks or mode not in ("isolated", "shared", "oxygen"):
            continue
        seconds = row["frame_p50_s"] if mode != "oxygen" else row["prefill_s"] + row["denoise_s"]
        marks[name] = 1000.0 * seconds
    return marks


def sweep(
    args: argparse.Namespace, policy, seeds: range, camera: int, control_hz: float
) -> list[Point]:
    """Every hand-over at every delay on the same seeds. One engine per hand-over serves
    every delay: d is a host-side value of its config (the rows the timeline skips, rtc's
    mask), not a shape its compiled functions depend on, so no delay compiles anew."""
    points = []
    for handover in args.handovers:
        engine = None
        for delay in args.delays:
            run = argparse.Namespace(**{**vars(args), "handover": handover, "link_delay": delay})
            if engine is None:
                engine = evaluate.eval_engine(run, policy)
            engine.cfg = dataclasses.replace(engine.cfg, rtc_delay_steps=delay)
            outcomes = evaluate.closed_loop(run, engine, seeds, camera)
            wins = [o.steps / control_hz for o in outcomes if o.success]
            mean = sum(wins) / len(wins) if wins else float("nan")
            points.append(Point(handover, delay, rollout.summarise(outcomes), mean))
    return points


def markdown(
    rows: Sequence[dict],
    marks: Mapping[str, tuple[float, int]],
    header: str,
    seam: str = "seam jump (rad)",
) -> str:
    """The rows as a table, with the take-over's columns where the rows carry them (the
    tabletop's), then the marks."""
    families = [f for f in rows[0]["success"] if f != "all"] + ["all"]
    columns = ["hand-over", "d (steps)", *families, "time to success (s)", seam]
    takeovers = all("takeover" in r for r in rows)
    columns += TAKEOVER_COLUMNS if takeovers else []
    lines = [header, "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for r in rows:
        cells = [r["handover"], str(r["delay"]), *(_cell(r["success"][f]) for f in families)]
        cells += [f"{r['time_to_success_s']:.2f}", f"{r['seam_jump_mean']:.4f}"]
        cells += _takeover_cells(r["takeover"]) if takeovers else []
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| engine mode | latency (ms) | d (steps) |", "|---|---|---|"]
    lines += [f"| {name} | {ms:.0f} | {d} |" for name, (ms, d) in marks.items()]
    return "\n".join(lines)


# The take-over's columns: the arm's largest commanded velocity, acceleration and jerk per
# take-over (mean / max over take-overs), and the take-overs over a velocity or
# acceleration limit.
TAKEOVER_COLUMNS = [
    "take-over velocity (rad/s)",
    "acceleration (rad/s^2)",
    "jerk (rad/s^3)",
    "over a limit",
]


def _takeover_cells(a: Mapping[str, float]) -> list[str]:
    return [
        f"{a['velocity_mean']:.2f} / {a['velocity_max']:.2f}",
        f"{a['acceleration_mean']:.1f} / {a['acceleration_max']:.0f}",
        f"{a['jerk_mean']:.0f} / {a['jerk_max']:.0f}",
        f"{a['over']}/{a['takeovers']}",
    ]


def _cell(rate: Mapping) -> str:
    low, high = rate["ci95"]
    return (
        f"{rate['successes']}/{rate['episodes']} ({100 * rate['rate']:.0f} %, "
        f"{100 * low:.0f}-{100 * high:.0f})"
    )


def plot(
    rows: Sequence[dict],
    marks: Mapping[str, tuple[float, int]],
    path: Path,
    groups: str = "families",
) -> None:
    """Success (all `groups`) against d per hand-over, its interval shaded, modes marked."""
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.add_subplot()
    for handover in dict.fromkeys(r["handover"] for r in rows):
        mine = [r for r in rows if r["handover"] == handover]
        d = [r["delay"] for r in mine]
        rate = [r["success"]["all"] for r in mine]
        ax.plot(d, [100 * x["rate"] for x in rate], marker="o", label=handover)
        low, high = zip(*(x["ci95"] for x in rate), strict=True)
        ax.fill_between(d, [100 * x for x in low], [100 * x for x in high], alpha=0.15)
    for k, (name, (_, steps)) in enumerate(marks.items()):
        style = ":" if "paper" in name else "--"
        ax.axvline(steps, color=f"C{k + 3}", linestyle=style, label=f"{name}: d = {steps}")
    ax.set_xlabel("chunk delay d (control steps)")
    ax.set_ylabel(f"success, all {groups} (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oxygen-eval sweep", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--delays", type=delays_arg, default=[0, 1, 2, 3, 4, 6, 8])
    p.add_argument("--handovers", type=handovers_arg, default=["replace", "rtc"])
    p.add_argument("--episodes", type=int, default=20, help="seeds per family")
    p.add_argument("--first-seed", type=int, default=S.DEV.start)
    p.add_argument("--bench", type=Path, help="oxygen-bench engine JSON: the measured marks")
    p.add_argument("--out", type=Path, default=Path("out/latency"))
    return p


def delays_arg(text: str) -> list[int]:
    """--delays: comma-separated d >= 0."""
    values = [int(v) for v in text.split(",")]
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"delays must be >= 0: {text}")
    return values


def handovers_arg(text: str) -> list[str]:
    """--handovers: comma-separated names of HANDOVERS."""
    names = text.split(",")
    if not set(names) <= set(HANDOVERS):
        raise argparse.ArgumentTypeError(f"hand-overs are {', '.join(HANDOVERS)}: {text}")
    return names


def main(argv: Sequence[str] | None = None) -> None:
    own, rest = _parser().parse_known_args(argv)
    # Everything else is oxygen-eval in-process's (families, execute, gate, beta, camera ...).
    args = evaluate.eval_parser().parse_args(["--checkpoint", own.checkpoint, *rest])
    args.handovers, args.delays = own.handovers, own.delays
    policy, meta = checkpoints.trained_policy(Path(own.checkpoint))
    most = policy.config.action_horizon - args.execute
    if max(own.delays) > most:
        # The node refuses such a d at configure: the robot would run out of rows.
        raise SystemExit(
            f"oxygen-eval sweep: d must leave --execute ({args.execute}) of the "
            f"{policy.config.action_horizon} rows: at most {most}, got {max(own.delays)}"
        )
    seeds = range(own.first_seed, own.first_seed + own.episodes)
    camera = args.camera_size or meta["camera_size"]
    marks_ms = dict(PAPER_MS)
    if own.bench is not None:
        marks_ms = {**bench_marks(json.loads(own.bench.read_text())), **marks_ms}
    marks = {name: (ms, steps_for(ms, DEFAULT_CONTROL_HZ)) for name, ms in marks_ms.items()}
    rows = [p.row() for p in sweep(args, policy, seeds, camera, DEFAULT_CONTROL_HZ)]
    described = S.describe(seeds)
    header = (
        f"Checkpoint `{own.checkpoint}`, seeds {described['first']}-{described['last']} "
        f"({described['range']}), {own.episodes} per family, control rate "
        f"{DEFAULT_CONTROL_HZ:g} Hz, horizon {policy.config.action_horizon}, controller "
        f"`{args.controller}`."
    )
    own.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "seeds": described,
        "checkpoint": own.checkpoint,
        "controller": args.controller,
        "rows": rows,
        "marks": marks,
    }
    (own.out / "sweep.json").write_text(json.dumps(payload, indent=1))
    table = markdown(rows, marks, header)
    (own.out / "sweep.md").write_text(table + "\n")
    plot(rows, marks, own.out / "sweep.png")
    print(table)


if __name__ == "__main__":
    main()
