"""`oxygen-eval sweep --world metaworld`: Meta-World success against the chunk's delay.

    oxygen-eval sweep --world metaworld --params PARAMS [--handovers replace,rtc] [--delays 0,1,2,3]
        [--tasks drawer-open-v3,...] [--episodes 10] [--first-seed 400000]
        [--camera-size 64] [--set NAME=VALUE ...] [--bench BENCH.json] [--out DIR]

The tabletop's oxygen-eval sweep for the second world, through the node: each (hand-over,
d) cell is one `oxygen-eval node --world metaworld` run in lockstep (`--delay-steps d`:
every chunk takes over exactly d control steps after its frame, the node's compute taking
no sim time) with the node's chunk_handover set, on the same seeds. Per cell: success per
task and for all with its 95 % interval, mean time to success, and the seam: the mean over
take-overs of the largest difference between the new chunk's first row and the running
chunk's row a step before, over the end-effector deltas (dx, dy, dz, in the env's action
units: [-1, 1] is 1 cm per step). The engine modes are marked on the curve as the
tabletop's are (`latency_sweep.bench_marks`, `PAPER_MS`), converted to steps at the env's
80 Hz.

d runs up to the horizon less the rows a frame executes (the node refuses more at
configure). Cells are folders DIR/<hand-over>-d<d>/ holding each run's report: a cell
whose report.json exists is kept, so a rerun into DIR resumes. Writes sweep.json, sweep.md
and sweep.png into DIR and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.metaworld.episode import CONTROL_PERIOD_NS
from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_core.sim import seeds as S
from oxygen_core.train import latency_sweep
from oxygen_ros import topics
from oxygen_ros.convert import action_chunk_rows, stamp_to_ns
from oxygen_ros.ros_args import override
from oxygen_ros.tools.bagio import from_cdr, read_bag
from oxygen_ros.tools.metaworld_eval import METAWORLD, METAWORLD_PARAMS
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.tools.sim.metaworld import TOPICS
from oxygen_ros.tools.sim.record import comma_list
from oxygen_ros.tools.task_eval import TaskEvalSpec, load_checked, run_task_eval

CONTROL_HZ = NS_PER_S / CONTROL_PERIOD_NS  # the env's 80 Hz
ARM = slice(0, 3)  # dx, dy, dz of the env's ACTION_NAMES; the gripper is column 3
_EPISODE_TOPIC = next(t.topic for t in TOPICS if t.key == "episode")


def cell_spec(base: TaskEvalSpec, handover: str, delay: int) -> TaskEvalSpec:
    """One cell's run: the base spec in lockstep at `delay`, the node's hand-over set."""
    overrides = {**base.overrides, "chunk_handover": handover}
    return TaskEvalSpec(**{**vars(base), "overrides": overrides, "delay_steps": delay})


def seam_jumps(chunks: Iterable[tuple[int, np.ndarray]], windows: Sequence[range]) -> list[float]:
    """Per take-over inside an episode: the largest |new row 0 - running row one step
    before| over the arm's deltas. `chunks` are (stamp ns, rows [H, 4]) in publish order;
    a take-over counts when the running chunk has a row one step before the new stamp and
    both lie in one episode's sim-time window."""
    jumps, running = [], None
    for stamp, rows in chunks:
        if running is not None:
            before = stamp - CONTROL_PERIOD_NS
            k = (before - running[0]) // CONTROL_PERIOD_NS
            same = any(before in w and running[0] in w for w in windows)
            if same and 0 <= k < len(running[1]):
                jumps.append(float(np.max(np.abs(rows[0, ARM] - running[1][k, ARM]))))
        running = (stamp, rows)
    return jumps


def bag_seams(out: Path, chunk_topic: str) -> list[float]:
    """The seam jumps of one cell's run, from its output bag (the node's chunks on
    `chunk_topic` and the sim's episode windows)."""
    chunks, windows = [], []
    for m in read_bag(out / OUTPUT_BAG, {chunk_topic, _EPISODE_TOPIC}):
        msg = from_cdr(m.data, m.msgtype)
        if m.topic == chunk_topic:
            chunks.append((stamp_to_ns(msg.header.stamp), action_chunk_rows(msg)))
        else:
            outcome = json.loads(msg.data)
            windows.append(range(outcome["start_ns"], outcome["end_ns"] + 1))
    return seam_jumps(chunks, windows)


def cell_row(handover: str, delay: int, out: Path, chunk_topic: str) -> dict[str, Any]:
    """A sweep row in oxygen-eval sweep's layout, from a cell's report and bag."""
    report = json.loads((out / "report.json").read_text())
    steps = report["mean_steps_to_success"]["all"]
    jumps = bag_seams(out, chunk_topic)
    return {
        "handover": handover,
        "delay": delay,
        "success": report["success"],
        "time_to_success_s": steps / CONTROL_HZ if steps is not None else math.nan,
        "seam_jump_mean": float(np.mean(jumps)) if jumps else math.nan,
        "seams": len(jumps),
        "lockstep_timeouts": report["input_counts"]["all"]["lockstep_timeouts"],
        "commit": report["commit"],
        "report": str(out / "report.json"),
    }


def run_cell(
    base: TaskEvalSpec, handover: str, delay: int, root: Path, chunk_topic: str
) -> dict[str, Any]:
    """The cell's run into root/<hand-over>-d<delay>, unless its report is there."""
    out = root / f"{handover}-d{delay}"
    if not (out / "report.json").exists():
        print(f"{handover} at d = {delay}: running into {out}", flush=True)
        run_task_eval(cell_spec(base, handover, delay), out)
    return cell_row(handover, delay, out, chunk_topic)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oxygen-eval sweep --world metaworld", description=__doc__.split("\n\n")[0].strip()
    )
    p.add_argument("--params", type=Path, default=METAWORLD_PARAMS, help="node params")
    p.add_argument("--handovers", type=latency_sweep.handovers_arg, default=["replace", "rtc"])
    p.add_argument("--delays", type=latency_sweep.delays_arg, default=[0, 1, 2, 3])
    p.add_argument("--tasks", type=comma_list, default=MT10_TASKS, help="comma-separated")
    p.add_argument("--episodes", type=int, default=10, help="seeds per task")
    p.add_argument("--first-seed", type=int, default=S.DEV.start)
    p.add_argument("--camera-size", type=int, default=224, help="corner2 image size (px)")
    p.add_argument(
        "--set", type=override, action="append", default=[], metavar="NAME=VALUE",
        help="a node parameter after the params file (not chunk_handover or rtc_delay_steps)",
    )  # fmt: skip
    p.add_argument("--bench", type=Path, help="oxygen-bench engine JSON: the measured marks")
    p.add_argument("--out", type=Path, default=Path("out/metaworld-sweep"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-eval sweep --world metaworld`."""
    args = _parser().parse_args(argv)
    base = TaskEvalSpec(
        world=METAWORLD,
        params=args.params,
        overrides=dict(args.set),
        tasks=args.tasks,
        episodes=args.episodes,
        first_seed=args.first_seed,
        camera_size=args.camera_size,
    )
    try:
        if "chunk_handover" in base.overrides:
            raise ValueError("--handovers sets chunk_handover: leave it out of --set")
        for handover in args.handovers:  # every cell's params, checked before any runs
            for delay in args.delays:
                spec = cell_spec(base, handover, delay)
                spec.check()
                settings, names = load_checked(METAWORLD, spec.params_file, spec.node_overrides)
        topic = names.output(topics.ACTION_CHUNK)
        rows = [run_cell(base, h, d, args.out, topic) for h in args.handovers for d in args.delays]
    except (FileNotFoundError, ValueError, TimeoutError, RuntimeError) as error:
        print(f"oxygen-eval sweep --world metaworld: {error}", file=sys.stderr)
        return 1
    marks_ms = dict(latency_sweep.PAPER_MS)
    if args.bench is not None:
        marks_ms = {**latency_sweep.bench_marks(json.loads(args.bench.read_text())), **marks_ms}
    marks = {n: (ms, latency_sweep.steps_for(ms, CONTROL_HZ)) for n, ms in marks_ms.items()}
    seeds = S.describe(base.seeds)
    header = (
        f"Params `{args.params}` ({settings.node.preset} preset, "
        f"{settings.node.execute_horizon} rows per frame), "
        f"Meta-World seeds {seeds['first']}-{seeds['last']} ({seeds['range']}), "
        f"{args.episodes} per task, lockstep at the env's {CONTROL_HZ:g} Hz."
    )
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"seeds": seeds, "params": str(args.params), "rows": rows, "marks": marks}
    (args.out / "sweep.json").write_text(json.dumps(payload, indent=1))
    table = latency_sweep.markdown(rows, marks, header, seam="seam jump (dx, dy, dz)")
    (args.out / "sweep.md").write_text(table + "\n")
    latency_sweep.plot(rows, marks, args.out / "sweep.png", groups="tasks")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
