"""Chunk hand-over in closed loop: replace, blend and rtc at a fast and a slow latency.

    python -m oxygen_ros.tools.sim.handover_bench --params config/sim_demo.yaml \\
        --camera-size 128 --episodes 4 --slow-delay 2 --out out/handover

Each (latency, hand-over) pair is one `oxygen-sim-eval` run (`run_sim_eval`) on the same
seeds, with the node's `chunk_handover` and `rtc_delay_steps` overridden:

- fast: the sim executes a trajectory at the tick after it arrives and d is `auto` (the
  node's measured latency rounded up to control steps: 1 when the frame takes a few ms);
- slow: the sim holds every trajectory `--slow-delay` more control periods (its
  `command_delay_steps`, a link latency), so a chunk computed at tick T takes over at
  T + 1 + delay; blend and rtc are told d = delay + 1, the rows that run meanwhile.
  replace is told nothing, as on a robot: its rows before the take-over are already past
  and the sim's controller skips them.

One markdown row per run: success, the sim's seams (jump: max joint difference, rad,
between the last command before a take-over and the new trajectory's first executed
point; jerk from the commands around it), chunks and late chunks; each run's full
report stays under --out/<latency>-<handover>/. JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from oxygen_core.sim.tasks import FAMILIES
from oxygen_ros.tools.sim.record import families_arg
from oxygen_ros.tools.sim_eval import SIM_PARAMS, SimEvalSpec, run_sim_eval

HANDOVERS = ("replace", "blend", "rtc")


def runs(slow_delay: int) -> list[tuple[str, str, int, object]]:
    """(latency, handover, the sim's command delay, the node's rtc_delay_steps) per run."""
    plan = []
    for latency, delay in (("fast", 0), ("slow", slow_delay)):
        for handover in HANDOVERS:
            d = "auto" if delay == 0 else delay + 1
            plan.append((latency, handover, delay, d))
    return plan


def row(latency: str, handover: str, d: object, report: dict) -> dict:
    """The table's figures from one run's report.json."""
    seams, success = report["seams"], report["success"]["all"]
    return {
        "latency": latency,
        "handover": handover,
        "d": d,
        "success": f"{success['successes']}/{success['episodes']}",
        "seams": seams["seams"],
        "jump_mean": seams["jump_mean"],
        "jump_max": seams["jump_max"],
        "jerk_mean": seams["jerk_mean"],
        "jerk_max": seams["jerk_max"],
        "chunks": report.get("frames", 0),
        "late": report.get("deadline_misses", 0),
    }


def markdown(rows: list[dict]) -> str:
    head = "| latency | handover | d | success | seams | jump mean | jump max | jerk mean | jerk max | chunks | late |"  # noqa: E501
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['latency']} | {r['handover']} | {r['d']} | {r['success']} | {r['seams']} | "
            f"{r['jump_mean']:.4f} | {r['jump_max']:.4f} | {r['jerk_mean']:.1f} | "
            f"{r['jerk_max']:.1f} | {r['chunks']} | {r['late']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m oxygen_ros.tools.sim.handover_bench", description=__doc__.split("\n")[0]
    )
    p.add_argument("--params", type=Path, default=SIM_PARAMS, help="node params YAML")
    p.add_argument("--families", type=families_arg, default=FAMILIES)
    p.add_argument("--episodes", type=int, default=2, help="episodes per family")
    p.add_argument("--seed", type=int, default=100_000, help="first seed")
    p.add_argument("--rtf", type=float, default=1.0, help="real-time factor")
    p.add_argument("--camera-size", type=int, default=128)
    p.add_argument("--slow-delay", type=int, default=2, help="the slow run's command delay")
    p.add_argument("--out", type=Path, default=Path("out/handover"))
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    rows = []
    for latency, handover, delay, d in runs(args.slow_delay):
        spec = SimEvalSpec(
            params=args.params,
            overrides={"chunk_handover": handover, "rtc_delay_steps": d},
            families=tuple(args.families),
            episodes=args.episodes,
            seed=args.seed,
            rtf=args.rtf,
            camera_size=args.camera_size,
            command_delay_steps=delay,
        )
        try:
            paths = run_sim_eval(spec, args.out / f"{latency}-{handover}")
        except (OSError, ValueError, TimeoutError, RuntimeError) as error:
            print(f"handover_bench: {latency} {handover}: {error}", file=sys.stderr)
            return 1
        rows.append(row(latency, handover, d, json.loads(paths["json"].read_text())))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
