"""`oxygen-eval sweep --world metaworld|aloha`: a task world's success against the chunk's delay.

    oxygen-eval sweep --world metaworld|aloha [--params PARAMS] [--handovers replace,rtc]
        [--delays 0,1,2,3] [--tasks ...] [--episodes 10] [--first-seed 400000]
        [--camera-size 224] [--set NAME=VALUE ...] [--bench BENCH.json] [--out DIR]

The tabletop's oxygen-eval sweep for the task worlds (tools.task_eval), through the node:
each (hand-over, d) cell is one `oxygen-eval node --world W` run in lockstep
(`--delay-steps d`: every chunk takes over exactly d control steps after its frame, the
node's compute taking no sim time) with the node's chunk_handover set, on the same seeds.
Per cell: success per task and for all with its 95 % interval, mean time to success, and
the seam: the mean over take-overs of the largest difference between the new chunk's
first row and the running chunk's row a step before, over the world's arm columns
(Meta-World: the end-effector deltas dx, dy, dz, in the env's action units, [-1, 1] is 1
cm per step; ALOHA: the twelve arm joints, rad). The engine modes are marked on the curve
as the tabletop's are (`latency_sweep.bench_marks`, `PAPER_MS`), converted to steps at the
world's control rate.

d runs up to the horizon less the rows a frame executes (the node refuses more at
configure). Cells are folders DIR/<hand-over>-d<d>/ holding each run's report: a cell
whose report.json exists is kept, so a rerun into DIR resumes. Writes sweep.json, sweep.md
and sweep.png into DIR and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim import seeds as S
from oxygen_core.train import latency_sweep
from oxygen_ros import topics
from oxygen_ros.convert import action_chunk_rows, stamp_to_ns
from oxygen_ros.ros_args import override
from oxygen_ros.tools.bagio import from_cdr, read_bag
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.tools.sim.record import comma_list
from oxygen_ros.tools.task_eval import TaskEvalSpec, TaskWorld, load_checked, run_task_eval


@dataclasses.dataclass(frozen=True)
class SweepWorld:
    """What a sweep needs of a task world beyond its evaluation: the action columns a seam
    is measured over (the arm's, not the grippers') and what they are, for the table."""

    world: TaskWorld
    arm: tuple[int, ...]  # action columns
    seam: str  # the table's seam column: what the columns are, in what units

    @property
    def prog(self) -> str:
        return f"oxygen-eval sweep --world {self.world.name}"

    @property
    def control_hz(self) -> float:
        return NS_PER_S / self.world.period_ns

    @property
    def episode_topic(self) -> str:
        return self.world.world.topics["episode"]


def cell_spec(base: TaskEvalSpec, handover: str, delay: int) -> TaskEvalSpec:
    """One cell's run: the base spec in lockstep at `delay`, the node's hand-over set."""
    overrides = {**base.overrides, "chunk_handover": handover}
    return TaskEvalSpec(**{**vars(base), "overrides": overrides, "delay_steps": delay})


def seam_jumps(
    chunks: Iterable[tuple[int, np.ndarray]],
    windows: Sequence[range],
    period_ns: int,
    arm: Sequence[int],
) -> list[float]:
    """Per take-over inside an episode: the largest |new row 0 - running row one step
    before| over the `arm` columns. `chunks` are (stamp ns, rows [H, A]) in publish order;
    a take-over counts when the running chunk has a row one step before the new stamp and
    both lie in one episode's sim-time window."""
    jumps, running, columns = [], None, list(arm)
    for stamp, rows in chunks:
        if running is not None:
            before = stamp - period_ns
            k = (before - running[0]) // period_ns
            same = any(before in w and running[0] in w for w in windows)
            if same and 0 <= k < len(running[1]):
                jump = np.abs(rows[0, columns] - running[1][k, columns])
                jumps.append(float(np.max(jump)))
        running = (stamp, rows)
    return jumps


def bag_seams(sweep: SweepWorld, out: Path, chunk_topic: str) -> list[float]:
    """The seam jumps of one cell's run, from its output bag (the node's chunks on
    `chunk_topic` and the sim's episode windows)."""
    chunks, windows = [], []
    for m in read_bag(out / OUTPUT_BAG, {chunk_topic, sweep.episode_topic}):
        msg = from_cdr(m.data, m.msgtype)
        if m.topic == chunk_topic:
            chunks.append((stamp_to_ns(msg.header.stamp), action_chunk_rows(msg)))
        else:
            outcome = json.loads(msg.data)
            windows.append(range(outcome["start_ns"], outcome["end_ns"] + 1))
    return seam_jumps(chunks, windows, sweep.world.period_ns, sweep.arm)


def cell_row(
    sweep: SweepWorld, handover: str, delay: int, out: Path, chunk_topic: str
) -> dict[str, Any]:
    """A sweep row in oxygen-eval sweep's layout, from a cell's report and bag."""
    report = json.loads((out / "report.json").read_text())
    steps = report["mean_steps_to_success"]["all"]
    jumps = bag_seams(sweep, out, chunk_topic)
    return {
        "handover": handover,
        "delay": delay,
        "success": report["success"],
        "time_to_success_s": steps / sweep.control_hz if steps is not None else math.nan,
        "seam_jump_mean": float(np.mean(jumps)) if jumps else math.nan,
        "seams": len(jumps),
        "lockstep_timeouts": report["input_counts"]["all"]["lockstep_timeouts"],
        "commit": report["commit"],
        "report": str(out / "report.json"),
    }


def run_cell(
    sweep: SweepWorld, base: TaskEvalSpec, handover: str, delay: int, root: Path, chunk_topic: str
) -> dict[str, Any]:
    """The cell's run into root/<hand-over>-d<delay>, unless its report is there."""
    out = root / f"{handover}-d{delay}"
    if not (out / "report.json").exists():
        print(f"{handover} at d = {delay}: running into {out}", flush=True)
        run_task_eval(cell_spec(base, handover, delay), out)
    return cell_row(sweep, handover, delay, out, chunk_topic)


def _parser(sweep: SweepWorld) -> argparse.ArgumentParser:
    world = sweep.world
    p = argparse.ArgumentParser(prog=sweep.prog, description=__doc__.split("\n\n")[0].strip())
    p.add_argument("--params", type=Path, default=world.params, help="node params")
    p.add_argument("--handovers", type=latency_sweep.handovers_arg, default=["replace", "rtc"])
    p.add_argument("--delays", type=latency_sweep.delays_arg, default=[0, 1, 2, 3])
    p.add_argument("--tasks", type=comma_list, default=world.tasks, help="comma-separated")
    p.add_argument("--episodes", type=int, default=10, help="seeds per task")
    p.add_argument("--first-seed", type=int, default=S.DEV.start)
    p.add_argument("--camera-size", type=int, default=224, help="camera image size (px)")
    p.add_argument(
        "--set", type=override, action="append", default=[], metavar="NAME=VALUE",
        help="a node parameter after the params file (not chunk_handover or rtc_delay_steps)",
    )  # fmt: skip
    p.add_argument("--bench", type=Path, help="oxygen-bench engine JSON: the measured marks")
    p.add_argument("--out", type=Path, default=Path(f"out/{world.name}-sweep"))
    return p


def run(sweep: SweepWorld, argv: Sequence[str] | None) -> int:
    """The sweep of one world, its command line `argv`."""
    args = _parser(sweep).parse_args(argv)
    world = sweep.world
    base = TaskEvalSpec(
        world=world,
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
                settings, names = load_checked(world, spec.params_file, spec.node_overrides)
        topic = names.output(topics.ACTION_CHUNK)
        rows = [
            run_cell(sweep, base, h, d, args.out, topic)
            for h in args.handovers
            for d in args.delays
        ]
    except (FileNotFoundError, ValueError, TimeoutError, RuntimeError) as error:
        print(f"{sweep.prog}: {error}", file=sys.stderr)
        return 1
    marks_ms = dict(latency_sweep.PAPER_MS)
    if args.bench is not None:
        marks_ms = {**latency_sweep.bench_marks(json.loads(args.bench.read_text())), **marks_ms}
    hz = sweep.control_hz
    marks = {n: (ms, latency_sweep.steps_for(ms, hz)) for n, ms in marks_ms.items()}
    seeds = S.describe(base.seeds)
    header = (
        f"Params `{args.params}` ({settings.node.preset} preset, "
        f"{settings.node.execute_horizon} rows per frame), "
        f"{world.title} seeds {seeds['first']}-{seeds['last']} ({seeds['range']}), "
        f"{args.episodes} per task, lockstep at the env's {hz:g} Hz."
    )
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"seeds": seeds, "params": str(args.params), "rows": rows, "marks": marks}
    (args.out / "sweep.json").write_text(json.dumps(payload, indent=1))
    table = latency_sweep.markdown(rows, marks, header, seam=sweep.seam)
    (args.out / "sweep.md").write_text(table + "\n")
    latency_sweep.plot(rows, marks, args.out / "sweep.png", groups="tasks")
    print(table)
    return 0


def metaworld_sweep() -> SweepWorld:
    """Meta-World's: the seam over the end-effector deltas (its evaluation imported here:
    each world's simulator loads only when it runs)."""
    from oxygen_ros.tools.metaworld_eval import METAWORLD

    return SweepWorld(METAWORLD, (0, 1, 2), "seam jump (dx, dy, dz)")


def aloha_sweep() -> SweepWorld:
    """ALOHA's: the seam over both arms' six joints, not the grippers."""
    from oxygen_core.aloha.env import ARM_COLUMNS
    from oxygen_ros.tools.aloha_eval import ALOHA

    return SweepWorld(ALOHA, tuple(ARM_COLUMNS), "seam jump (arm joints, rad)")


def metaworld(argv: Sequence[str] | None = None) -> int:
    """`oxygen-eval sweep --world metaworld`."""
    return run(metaworld_sweep(), argv)


def aloha(argv: Sequence[str] | None = None) -> int:
    """`oxygen-eval sweep --world aloha`."""
    return run(aloha_sweep(), argv)
