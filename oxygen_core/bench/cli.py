"""`oxygen-bench engine`: the paper's tables, every mode side by side in one process.

    oxygen-bench engine --preset small --modes isolated,shared,oxygen,oxygen-auto --k 1,5,10 \\
        --N 30 --S 10 --frames 30 --workload uniform:1 --budget 1.0 --json out.json
    oxygen-bench engine --paper-gpu --out out/bench-gpu     # `make bench-gpu`: pi05 on a CUDA GPU

Order of work: load the policy (random weights), measure this machine's matmul and
bandwidth (the floors), compile every engine row, then run each workload with all rows
interleaved frame by frame; between rounds, sample the pool's decode step alone and the
machine again. Prints the markdown tables on stdout and a progress bar on stderr; writes
JSON and plots on request (`--out DIR`: all three, tables in DIR/tables.md).

`--paper-gpu` stands for the paper's settings with the full model: `PAPER_GPU` below.
Its frame counts are sized for about 8 minutes of an H200 including compilation,
which dominates: 5 engine rows compile a prefill, a denoise, a generate loop, an
admission and 18 decode executables (6 buckets x 3 values of k) of pi0.5, while the
frames themselves (about 280 row-frames at 30 measured per row, the k=1 row's 30
warm-up and 30 drain frames included) take well under a minute at GPU frame times.
Flags given next to it win, so the same path runs on a CPU with `--preset tiny
--dtype float32 --backend cpu` (the test suite does).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import jax
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


# The paper's headline settings with pi0.5 in bfloat16 on a CUDA GPU (module docstring).
PAPER_GPU = {
    "preset": "pi05",
    "dtype": "bfloat16",
    "backend": "gpu",
    "modes": "isolated,shared,oxygen",
    "k": (1, 5, 10),
    "n": 30,
    "steps": 10,
    "frames": 30,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags; with --paper-gpu, `PAPER_GPU` as defaults under the flags given."""
    p = _parser()
    args = p.parse_args(argv)
    if args.paper_gpu:
        p.set_defaults(**PAPER_GPU)
        args = p.parse_args(argv)
    if args.out is not None:
        args.json = args.json or args.out / "bench.json"
        args.plot = args.plot or args.out
    return args


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oxygen-bench engine", description=__doc__.split("\n\n")[0])
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
        help="isolated, shared, oxygen (a row per k), oxygen-apart (oxygen with admit_in_step "
        "off: each new request admitted in a pass of its own; a row per k), oxygen-auto (k per "
        "frame, needs --budget)",
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
    p.add_argument("--seed", type=int, default=0, help="weights, observations and noise")
    p.add_argument("--json", type=Path, default=None, help="write all results here")
    p.add_argument("--plot", type=Path, default=None, help="write PNG plots into this folder")
    p.add_argument(
        "--out", type=Path, default=None, help="folder for bench.json, tables.md and the plots"
    )
    p.add_argument(
        "--backend",
        default="any",
        choices=("any", "cpu", "gpu"),
        help="stop at once unless JAX runs on this backend",
    )
    p.add_argument(
        "--paper-gpu",
        action="store_true",
        help="the paper's settings with pi05 on a GPU: "
        + " ".join(f"{k}={v}" for k, v in PAPER_GPU.items())
        + " (flags given win)",
    )
    return p


def backend_problem(wanted: str) -> str | None:
    """Why this machine cannot run what was asked (JAX is on another backend), or None:
    a pi05 run that fell back to the CPU would take hours to say nothing useful."""
    have = jax.default_backend()
    if wanted in ("any", have):
        return None
    if wanted == "gpu":
        return (
            f"no GPU backend: JAX runs on {have}; install its CUDA plugin "
            f'(.venv/bin/pip install "jax[cuda13]=={jax.__version__}") or pass --backend cpu'
        )
    return f"JAX runs on {have}, not {wanted}; pass --backend any"


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
        spec: [summarize(r, records[r.label], spec, floors, steps, cfg.budget_s) for r in rows]
        for spec, records in recorded.items()
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


def tables(bench: BenchRun, payload: dict) -> str:
    """The markdown report: machine, pool probe, rows, language, comparisons."""
    parts = [
        report.machine_line(bench.floors),
        f"\nDecode step of the KV pool alone (capacity {bench.capacity} slots per row):\n",
        report.probe_table(bench.steps, bench.overheads, bench.floors, bench.capacity),
        "\n" + report.results_table(payload["rows"]),
        "\nLanguage requests (latencies of the requests submitted in measured frames):\n",
        report.language_table(payload["rows"]),
    ]
    behind = report.behind_notes(payload["rows"])
    if behind:
        parts.append(
            "\nRows behind their arrivals (a full pool or a queue; ratios compare unequal work):"
        )
        parts += behind
    parts.append(f"\nProcess peak memory over the run: {bench.peak_memory_bytes / 2**20:.0f} MiB")
    if payload["comparisons"]:
        parts.append("\nOxyGen over isolated, side by side in this run:\n")
        parts.append(report.comparison_table(payload["comparisons"]))
    return "\n".join(parts)


def emit(bench: BenchRun, args: argparse.Namespace) -> None:
    """Tables on stdout (and in --out); JSON and plots where asked."""
    payload = bench.payload()
    text = tables(bench, payload)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tables.md").write_text(text + "\n")
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
        _log(f"oxygen-bench engine: {err}")
        return 2
    problem = backend_problem(args.backend)
    if problem:
        _log(f"oxygen-bench engine: {problem}")
        return 2
    emit(run(args, cfg, groups), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
