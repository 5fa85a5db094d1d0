"""Where one phase's time goes, operation by operation, named by the code it came from.

`oxygen-bench profile --preset small --phase decode --bucket 32` runs the
phase's jitted program (`phases.PhaseModel`: the calls `phases` times) under JAX's
profiler and sums the time of every XLA operation it executed. Each operation is named
by the source op XLA records in its metadata (an einsum such as `BTD,DCF->BTCF`, a
`reduce_max`, a `dynamic_update_slice`) and by its output shape, so a row reads as "the
MLP's gate/up dot over 32 rows took 1.0 ms per step". This is the evidence behind the
engine notes in BENCHMARKS.md: which kernels a phase is made of, and which of them sit
far from what the machine can do at their shapes.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import gzip
import json
import re
import tempfile
import time

import jax

from oxygen_core.bench.phases import PHASES, PhaseModel

# XLA's optimized HLO text: a computation's header line, and one instruction with its
# name, output shape, and (where present) source op and called computation.
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(
    r"^\s+(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+) = "
    r"(?P<shape>\S+?)(?:\{[\d,]*\})? (?P<opcode>[\w\-]+)\("
)
_OP_NAME = re.compile(r'op_name="(?P<op>[^"]*)"')
_CALLS = re.compile(r"calls=%?(?P<calls>[\w.\-]+)")
_SCOPES = re.compile(r"^jit\([^)]*\)/|(?:while|body|cond|closed_call)/")


@dataclasses.dataclass(frozen=True)
class OpTime:
    """One source op's share of a call: summed over every XLA operation it became."""

    source: str  # the op XLA names in metadata, scopes stripped
    shape: str  # output shape of the XLA operation
    ms_per_call: float
    count_per_call: float


@dataclasses.dataclass(frozen=True)
class Profile:
    phase: str
    wall_ms: float  # median wall time of one call, timed without the profiler
    ops: list[OpTime]

    @property
    def op_ms(self) -> float:
        return sum(o.ms_per_call for o in self.ops)


def sources(hlo_text: str) -> dict[str, tuple[str, str]]:
    """XLA operation name -> (source op, output shape), from the compiled HLO text.

    A fusion that carries no source op of its own (XLA's dot fusions often do not) is
    named by the source op of the computation it calls, its dot's where it has one, and
    failing that by the opcode of that computation's root (a bare `dot`).
    """
    ops: dict[str, tuple[str, str | None, str, str | None]] = {}  # shape, op, opcode, calls
    computation_op: dict[str, str] = {}
    computation_root: dict[str, str] = {}
    computation = ""
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            computation = header["name"]
            continue
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        op, calls = _OP_NAME.search(line), _CALLS.search(line)
        source = _SCOPES.sub("", op["op"]) if op else None
        ops[m["name"]] = (m["shape"], source, m["opcode"], calls["calls"] if calls else None)
        if m["root"]:
            computation_root[computation] = m["opcode"]
        if source and (computation not in computation_op or source.endswith("dot_general")):
            computation_op[computation] = source
    named = {}
    for name, (shape, source, opcode, calls) in ops.items():
        if calls:
            source = source or computation_op.get(calls) or computation_root.get(calls)
        named[name] = ((source or opcode).removesuffix("/dot_general"), shape)
    return named


def op_events(trace_dir: str, module: str) -> list[tuple[str, float]]:
    """(operation name, microseconds) of every operation the profiler saw run in `module`."""
    files = glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True)
    if not files:
        raise RuntimeError(f"the profiler wrote no trace under {trace_dir}")
    with gzip.open(files[0]) as f:
        events = json.load(f)["traceEvents"]
    return [
        (e["args"]["hlo_op"], e["dur"])
        for e in events
        if e.get("ph") == "X" and e.get("args", {}).get("hlo_module") == module
    ]


def profile(model: PhaseModel, phase: str, calls: int, **shape: int) -> Profile:
    """Run `phase` `calls` times under the profiler; its time per call by source op."""
    fn, args = model.program(phase, **shape)
    named = sources(fn.lower(*args).compile().as_text())
    for _ in range(2):  # compile, then one warm call
        jax.block_until_ready(model.run(phase, **shape))
    t0 = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(model.run(phase, **shape))
    wall_ms = (time.perf_counter() - t0) / calls * 1e3
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        for _ in range(calls):
            jax.block_until_ready(model.run(phase, **shape))
        jax.profiler.stop_trace()
        events = op_events(trace_dir, f"jit_{fn.__name__}")
    total_us: dict[tuple[str, str], float] = collections.defaultdict(float)
    count: dict[tuple[str, str], int] = collections.defaultdict(int)
    for name, us in events:
        key = named.get(name, (name, "?"))
        total_us[key] += us
        count[key] += 1
    ops = [
        OpTime(src, shp, total_us[(src, shp)] / calls / 1e3, count[(src, shp)] / calls)
        for src, shp in total_us
    ]
    return Profile(phase, wall_ms, sorted(ops, key=lambda o: -o.ms_per_call))


def table(p: Profile, per: int, rows: int) -> str:
    """Markdown table of the `rows` costliest source ops, in ms per `per` (steps per call)."""
    unit = "step" if per > 1 else "call"
    lines = [
        f"{p.phase}: {p.wall_ms / per:.2f} ms per {unit} (wall, no profiler), "
        f"{p.op_ms / per:.2f} ms in XLA operations",
        "",
        f"| ms per {unit} | share | ops per {unit} | source op | output |",
        "|---|---|---|---|---|",
    ]
    for o in p.ops[:rows]:
        lines.append(
            f"| {o.ms_per_call / per:.3f} | {o.ms_per_call / p.op_ms:.0%} "
            f"| {o.count_per_call / per:.1f} | {o.source} | {o.shape} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="oxygen-bench profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--preset", default="small")
    parser.add_argument("--phase", choices=PHASES, default="decode")
    parser.add_argument("--bucket", type=int, default=32, help="decode: rows per step")
    parser.add_argument("--k", type=int, default=4, help="decode: steps per call")
    parser.add_argument("--steps", type=int, default=10, help="denoise: Euler steps")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rows", type=int, default=20, help="source ops to print")
    args = parser.parse_args(argv)
    model = PhaseModel.build(args.preset)
    shape = {"decode": {"bucket": args.bucket, "k": args.k}, "denoise": {"steps": args.steps}}
    result = profile(model, args.phase, args.calls, **shape.get(args.phase, {}))
    per = {"decode": args.k, "denoise": args.steps}.get(args.phase, 1)
    print(f"{args.preset}, {jax.default_backend()}")
    print(table(result, per, args.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
