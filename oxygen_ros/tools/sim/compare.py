"""Closed-loop comparisons on the sim: one `oxygen-eval node` run per variant, one table.

    oxygen-eval compare handover --params config/sim_demo.yaml \\
        --camera-size 128 --episodes 2 --out out/compare-handover
    oxygen-eval compare modes --params config/sim_demo.yaml \\
        --camera-size 128 --episodes 2 --out out/compare-modes

Every variant runs the same seeds through `run_sim_eval` with some node parameters
overridden (and the sim's `command_delay_steps`); each run's full report stays under
--out/<variant>/, and one markdown row per run is printed as it finishes. Comparisons:

- `handover`: replace, blend and rtc at two latencies. fast: the sim executes a
  trajectory at the tick after it arrives and d is `auto` (the node's measured latency in
  control steps: 1 when the frame takes a few ms). slow: the sim holds every trajectory
  `--slow-delay` more control periods (a link latency), so a chunk computed at tick T
  takes over at T + 1 + delay; blend and rtc are told d = delay + 1, the rows that run
  meanwhile, and replace is told nothing, as on a robot: its rows before the take-over are
  past and the controller skips them.
- `modes`: oxygen, shared and isolated at the params' own frame (`default`) and at a tight
  one (`tight`: one chunk row per frame, so frames come twice as often, and both streams
  asked every frame), where the language work of the baselines outgrows the frame.

Columns: success; the node's action Hz, deadline misses and language tokens/s (sim
time); the sim's seams (jump: max joint difference, rad, between the last command before
a take-over and the new trajectory's first executed point, over all seven commands and
split into the arm's six joints and the gripper's 0..1 opening; jerk from the commands
around it). JSON of the rows with --json; `--set NAME=VALUE` adds a node parameter to every
variant (a variant's own overrides win).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from oxygen_core.sim.seeds import DEV
from oxygen_core.sim.tasks import FAMILIES
from oxygen_ros.ros_args import override
from oxygen_ros.tools.sim.evaluate import SIM_PARAMS, SimEvalSpec, run_sim_eval
from oxygen_ros.tools.sim.record import names_arg

HANDOVERS = ("replace", "blend", "rtc")
MODES = ("oxygen", "shared", "isolated")
TIGHT = {
    "execute_horizon": 1,
    "streams.narration.every_frames": 1,
    "streams.memory.every_frames": 1,
}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One run: its name in the table, node overrides and the sim's command delay."""

    name: str
    overrides: Mapping[str, object]
    command_delay_steps: int = 0


def handover_variants(slow_delay: int) -> list[Variant]:
    variants = []
    for latency, delay in (("fast", 0), ("slow", slow_delay)):
        for handover in HANDOVERS:
            d = "auto" if delay == 0 else delay + 1
            name = f"{latency}-{handover}-d{d}"
            variants.append(
                Variant(name, {"chunk_handover": handover, "rtc_delay_steps": d}, delay)
            )
    return variants


def modes_variants() -> list[Variant]:
    return [
        Variant(f"{budget}-{mode}", {"engine_mode": mode, **extra})
        for budget, extra in (("default", {}), ("tight", TIGHT))
        for mode in MODES
    ]


def row(name: str, report: dict) -> dict:
    """The table's figures from one run's report.json."""
    seams, success = report["seams"], report["success"]["all"]
    return {
        "run": name,
        "success": f"{success['successes']}/{success['episodes']}",
        "action_hz": report.get("action_hz", 0.0),
        "misses": report.get("deadline_misses", 0),
        "lang_tps": report.get("lang_tps", 0.0),
        "seams": seams["seams"],
        "jump_mean": seams["jump_mean"],
        "jump_max": seams["jump_max"],
        "arm_jump_mean": seams["arm_jump_mean"],
        "gripper_jump_mean": seams["gripper_jump_mean"],
        "jerk_mean": seams["jerk_mean"],
    }


HEAD = (
    "| run | success | action Hz | deadline misses | language tok/s | seams | jump mean | "
    "jump max | arm jump mean | gripper jump mean | jerk mean |"
)


def markdown_row(r: dict) -> str:
    return (
        f"| {r['run']} | {r['success']} | {r['action_hz']:.2f} | {r['misses']} | "
        f"{r['lang_tps']:.1f} | {r['seams']} | {r['jump_mean']:.4f} | {r['jump_max']:.4f} | "
        f"{r['arm_jump_mean']:.4f} | {r['gripper_jump_mean']:.4f} | {r['jerk_mean']:.0f} |"
    )


def markdown(rows: list[dict]) -> str:
    rule = "|" + "---|" * (HEAD.count("|") - 1)
    return "\n".join([HEAD, rule, *(markdown_row(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="oxygen-eval compare", description=__doc__.split("\n")[0])
    p.add_argument("comparison", choices=("handover", "modes"))
    p.add_argument("--params", type=Path, default=SIM_PARAMS, help="node params YAML")
    p.add_argument("--families", type=names_arg(FAMILIES, "families"), default=FAMILIES)
    p.add_argument("--episodes", type=int, default=2, help="episodes per family")
    p.add_argument("--first-seed", type=int, default=DEV.start, help="the dev range's by default")
    p.add_argument("--rtf", type=float, default=1.0, help="real-time factor")
    p.add_argument("--camera-size", type=int, default=128)
    p.add_argument("--slow-delay", type=int, default=2, help="handover: the slow command delay")
    p.add_argument("--out", type=Path, required=True, help="one folder per variant in here")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument(
        "--set",
        type=override,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a node parameter for every variant (YAML value), e.g. rtc_max_guidance=10",
    )
    args = p.parse_args(argv)
    common = dict(args.set)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    variants = (
        handover_variants(args.slow_delay) if args.comparison == "handover" else modes_variants()
    )
    rows = []
    print(HEAD, flush=True)
    for variant in variants:
        spec = SimEvalSpec(
            params=args.params,
            overrides={**common, **variant.overrides},
            families=tuple(args.families),
            episodes=args.episodes,
            first_seed=args.first_seed,
            rtf=args.rtf,
            camera_size=args.camera_size,
            command_delay_steps=variant.command_delay_steps,
        )
        try:
            paths = run_sim_eval(spec, args.out / variant.name)
        except (OSError, ValueError, TimeoutError, RuntimeError) as error:
            print(f"compare: {variant.name}: {error}", file=sys.stderr)
            return 1
        rows.append(row(variant.name, json.loads(paths["json"].read_text())))
        print(markdown_row(rows[-1]), flush=True)
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
