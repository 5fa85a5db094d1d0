"""`oxygen-bench`: the paper's tables, every mode side by side in one process.

    oxygen-bench --preset small --modes isolated,shared,oxygen,oxygen-auto --k 1,5,10 \\
        --N 30 --S 10 --frames 30 --workload uniform:1 --budget 1.0 --json out.json

Order of work: load the policy (random weights), measure this machine's matmul and
bandwidth (the floors), compile every engine row, then run each workload with all rows
interleaved frame by frame; between rounds, sample the pool's decode step alone and the
machine again. Prints the markdown tables on stdout and a progress bar on stderr; writes
JSON and plots on request.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from tqdm import tqdm

from oxygen_core.bench import report, runner
from oxygen_core.bench.floors import Floors, MachineMeter, ModelCosts
from oxygen_core.bench.metrics import RowResult, compare, summarize
from oxygen_core.bench.probe import DecodeProbe
from oxygen_core.bench.workloads import SWEEPS, Workload, parse
from oxygen_core.model import pi05
from oxygen_core.policy import load_policy


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="oxygen-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small", help="model preset (random weights)")
    p.add_argument("--robot", default="demo", help="robot preset: cameras and action dims")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help="weights and KV cache (bfloat16 on accelerators)",
    )
    p.add_argument(
        "--modes",
        default="isolated,shared,oxygen,oxygen-auto",
        help="isolated, shared, oxygen (a row per k), oxygen-auto (k per frame, needs --budget)",
    )
    p.add_argument("--k", type=_ints, default=(1, 5, 10), help="OxyGen tokens per frame")
    p.add_argument("--N", type=int, default=30, dest="n", help="tokens per request")
    p.add_argument("--S", type=int, default=10, dest="steps", help="denoise steps")
    p.add_argument("--frames", type=int, default=30, help="measured frames per row")
    p.add_argument(
        "--warmup-frames", type=int, default=None, help="default: N/k per OxyGen row (batch fill)"
    )
    p.add_argument(
        "--workload",
        action="append",
        default=[],
        help="uniform:RATE | poisson:LAMBDA | random:SHORT,LONG,P_LONG (repeatable)",
    )
    sweeps = "; ".join(f"{name}: {' '.join(specs)}" for name, specs in SWEEPS.items())
    p.add_argument("--sweep", action="append", default=[], choices=sorted(SWEEPS), help=sweeps)
    p.add_argument("--budget", type=float, default=None, help="frame budget (s): misses, k=auto")
    p.add_argument("--max-active", type=int, default=32, help="KV pool rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write all results here")
    p.add_argument("--plot", type=Path, default=None, help="write PNG plots into this folder")
    return p.parse_args(argv)


def _groups(args: argparse.Namespace) -> dict[str, list[Workload]]:
    """Named lists of workloads: the plain --workload list, then each sweep."""
    groups = {}
    if args.workload or not args.sweep:
        groups["main"] = [parse(s) for s in args.workload or ["uniform:1"]]
    for name in args.sweep:
        groups[name] = [parse(s) for s in SWEEPS[name]]
    return groups


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bench_config(args: argparse.Namespace) -> runner.BenchConfig:
    return runner.BenchConfig(
        modes=tuple(args.modes.split(",")),
        ks=args.k,
        n=args.n,
        steps=args.steps,
        frames=args.frames,
        warmup_frames=args.warmup_frames,
        budget_s=args.budget,
        seed=args.seed,
        max_active=args.max_active,
    )


@dataclasses.dataclass(frozen=True)
class BenchRun:
    """Everything one invocation measured."""

    preset: str
    cfg: runner.BenchConfig
    floors: Floors
    steps: dict[int, float]  # bucket -> seconds per pool decode step
    overheads: dict[int, float]  # bucket -> seconds of a decode call with no step
    capacity: int  # cache slots per language row
    groups: dict[str, list[Workload]]
    results: dict[str, list[RowResult]]  # workload spec -> rows
    peak_memory_bytes: int  # the process's high-water mark over the whole run

    def payload(self) -> dict:
        """The JSON document."""
        return {
            "preset": self.preset,
            "config": dataclasses.asdict(self.cfg),
            "machine": self.floors.machine,
            "decode_probe": {
                b: {
                    "step_s": s,
                    "call_overhead_s": self.overheads[b],
                    "floor_s": self.floors.decode_step_s(b, self.capacity),
                }
                for b, s in self.steps.items()
            },
            "groups": {name: [w.spec for w in ws] for name, ws in self.groups.items()},
            "rows": [r for rs in self.results.values() for r in rs],
            "comparisons": [
                c for rs in self.results.values() for c in compare(rs, self.steps, self.overheads)
            ],
            "peak_memory_bytes": self.peak_memory_bytes,
        }


def run(args: argparse.Namespace, cfg: runner.BenchConfig, groups) -> BenchRun:
    """Load, measure the machine, compile every row, probe, run every workload."""
    workloads = list({w.spec: w for ws in groups.values() for w in ws}.values())
    _log(f"loading {args.preset} ({args.dtype}, random weights)...")
    policy = load_policy(args.preset, robot=args.robot, seed=args.seed, dtype=args.dtype)
    dtype = pi05.param_dtype(policy.params)
    meter = MachineMeter(dtype)
    obs = runner.demo_observation(policy, args.seed)
    _log("compiling every engine row...")
    max_tokens = max(w.max_tokens(cfg.n) for w in workloads)
    rows = runner.build_rows(policy, cfg, max_tokens, obs)
    probe = DecodeProbe(policy, rows, cfg.buckets())

    def between_rounds() -> None:
        probe.sample()
        meter.sample()

    total = len(workloads) * runner.total_row_frames(rows, cfg)
    recorded = {}
    with tqdm(total=total, unit="frame", file=sys.stderr) as bar:
        for w in workloads:

            def tick(label: str, spec: str = w.spec) -> None:
                bar.set_postfix_str(f"{spec} {label}", refresh=False)
                bar.update()

            recorded[w.spec] = runner.run_workload(rows, w, cfg, obs, between_rounds, tick)
    # Probe medians and the machine's best use the samples of every workload.
    costs = ModelCosts.of(policy.config, dtype.itemsize)
    floors, steps = Floors(meter.best(), costs), probe.steps()
    results = {
        spec: [summarize(r, frames[r.label], spec, floors, steps, cfg.budget_s) for r in rows]
        for spec, frames in recorded.items()
    }
    capacity = rows[0].engine.capacity
    return BenchRun(
        args.preset,
        cfg,
        floors,
        steps,
        probe.overheads(),
        capacity,
        groups,
        results,
        runner.peak_memory_bytes(),
    )


def emit(bench: BenchRun, args: argparse.Namespace) -> None:
    """Tables on stdout; JSON and plots where asked."""
    payload = bench.payload()
    print(report.machine_line(bench.floors))
    print(f"\nDecode step of the KV pool alone (capacity {bench.capacity} slots per row):\n")
    print(report.probe_table(bench.steps, bench.overheads, bench.floors, bench.capacity))
    print("\n" + report.results_table(payload["rows"]))
    behind = report.behind_notes(payload["rows"])
    if behind:
        print("\nRows behind their arrivals (a full pool or a queue; ratios compare unequal work):")
        print("\n".join(behind))
    print(f"\nProcess peak memory over the run: {bench.peak_memory_bytes / 2**20:.0f} MiB")
    if payload["comparisons"]:
        print("\nOxyGen over isolated, side by side in this run:\n")
        print(report.comparison_table(payload["comparisons"]))
    if args.json:
        report.write_json(args.json, payload)
    if args.plot:
        _plots(bench, args)


def _plots(bench: BenchRun, args: argparse.Namespace) -> None:
    for name, workloads in bench.groups.items():
        if name == "main":
            first = bench.results[workloads[0].spec]
            report.plot_vs_k(first, args.plot / "vs_k.png")
            report.plot_timeline(first, args.budget, args.plot / "timeline.png")
        else:
            rows = [r for w in workloads for r in bench.results[w.spec]]
            report.plot_sweep(rows, name, args.plot / f"sweep_{name}.png")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:  # bad flags (a workload spec, a mode, a missing budget) fail before any work
        cfg, groups = bench_config(args), _groups(args)
    except ValueError as err:
        _log(f"oxygen-bench: {err}")
        return 2
    emit(run(args, cfg, groups), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
