"""The shipped policy in process under both trajectory-controller models, on dev seeds.

    python scripts/experiments/controller_models.py --episodes 8 [--delays 0,2]
        [--controllers jtc,jtc_replacement] [--json]

`jtc_replacement` takes a chunk over at its stamp, linearly from the last command; a Jazzy
or Kilted robot runs `jtc` (replaces at arrival, from the measured state, one period
ahead), and the node shapes its trajectories for whichever it drives
(oxygen_core.controller.shaping). This runs the same episodes (oxygen_core.train.rollout,
the shipped policy of config/sim_demo.yaml with its gate and limits, DEV seeds from the
first) under each, at each link delay, and prints success per family with its 95 %
interval, the seams' arm jump, the commanded points the sim's arm counts outside its
limits, the chunks the gate slowed or rejected and those with no trajectory the controller
could meet. For docs/experiments/; not a claim. An experiment harness, not part of the
package: it runs from the checkout's venv.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from oxygen_core.safety.limits import limits_from_files
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.executor import CONTROLLERS
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.seeds import DEV
from oxygen_core.sim.success import SuccessRate
from oxygen_core.train import rollout
from oxygen_ros.pipeline import make_pipeline
from oxygen_ros.tools.configure import load_settings

FAMILIES = ("pick", "put", "push")


def run(
    params: Path, seeds: range, delays: list[int], controllers: list[str]
) -> list[dict[str, object]]:
    """One row per (controller, delay, family)."""
    settings, _ = load_settings(params)
    engine = make_pipeline(settings).engine
    limits = limits_from_files(JOINT_NAMES, params)  # the arm's, as oxygen-eval in-process reads
    renderer = Renderer(128, 128)
    execute = settings.node.execute_horizon
    rows = []
    for controller in controllers:
        for delay in delays:
            # d as oxygen-eval sweep tells it (auto would read this machine's wall clock)
            engine.cfg = dataclasses.replace(engine.cfg, rtc_delay_steps=delay)
            for family in FAMILIES:
                outcomes = [
                    rollout.run_episode(
                        engine,
                        family,
                        seed,
                        execute,
                        renderer,
                        link_delay=delay,
                        limits=limits,
                        controller=controller,
                    )
                    for seed in seeds
                ]
                rows.append(_row(controller, delay, family, outcomes))
    return rows


def _row(controller: str, delay: int, family: str, outcomes: list) -> dict[str, object]:
    rate = SuccessRate(sum(o.success for o in outcomes), len(outcomes))
    jumps = [o.seams.arm_jump_max for o in outcomes if o.seams.seams]
    return {
        "controller": controller,
        "delay": delay,
        "family": family,
        "success": rate.text(),
        "arm_jump_max": float(np.max(jumps)) if jumps else 0.0,
        "arm_jump_mean": float(np.mean([o.seams.arm_jump_mean for o in outcomes])),
        "limit_violations": sum(sum(o.limits.as_dict().values()) for o in outcomes),
        "slowed": sum(o.gate.outcomes["slowed"] for o in outcomes),
        "rejected": sum(o.gate.outcomes["rejected"] for o in outcomes),
        "refused": sum(o.refused for o in outcomes),
        "chunks": sum(sum(o.gate.outcomes.values()) for o in outcomes),
    }


def table(rows: list[dict[str, object]]) -> str:
    head = (
        "| controller | delay | family | success | arm jump max | arm jump mean | over limits "
        "| chunks | slowed | rejected | refused |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['controller']} | {r['delay']} | {r['family']} | {r['success']} | "
            f"{r['arm_jump_max']:.3f} | {r['arm_jump_mean']:.4f} | {r['limit_violations']} | "
            f"{r['chunks']} | {r['slowed']} | {r['rejected']} | {r['refused']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("config/sim_demo.yaml"))
    parser.add_argument("--episodes", type=int, default=8, help="dev seeds per family")
    parser.add_argument("--delays", default="0,2", help="link delays in control steps")
    parser.add_argument("--controllers", default=",".join(CONTROLLERS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seeds = DEV[: args.episodes]
    delays = [int(d) for d in args.delays.split(",")]
    rows = run(args.params, seeds, delays, args.controllers.split(","))
    print(json.dumps(rows, indent=2) if args.json else table(rows))


if __name__ == "__main__":
    main()
