"""`oxygen-bench sim`: how fast the sim renders and how well the scripted expert does.

    oxygen-bench sim --episodes 50 [--first-seed 400000] --size 224 --renders 300 --json out.json

Renders/s are measured on one mid-episode world per camera (the arm reaching over the
table), single-threaded, after a warm-up, both per wall second and per CPU second of this
process (the second is what the renderer costs when other processes share the cores);
the expert's success rate per family comes from `runner.run_expert` on N seeds from
--first-seed (the dev range's first by default; `--renders 0` skips the renders). Prints
markdown tables naming the seed range; writes JSON on request.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from oxygen_core.sim.expert import Expert
from oxygen_core.sim.render import CAMERAS, Renderer
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ, run_expert
from oxygen_core.sim.seeds import DEV, describe
from oxygen_core.sim.tasks import FAMILIES, make_task


def renders_per_second(size: int, count: int) -> dict[str, dict[str, float]]:
    """Renders per wall and per CPU second, per camera, on a world 2 s into a "put" episode."""
    task = make_task("put", 0)
    world = task.new_world()
    expert = Expert(task, world)
    dt = 1.0 / DEFAULT_CONTROL_HZ
    for _ in range(40):
        world.step(expert.act(world, dt).targets, dt)
    renderer = Renderer(size, size)
    rates = {}
    for camera in CAMERAS:
        renderer.render(world, camera)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            renderer.render(world, camera)
        rates[camera] = {
            "wall": count / (time.perf_counter() - wall),
            "cpu": count / (time.process_time() - cpu),
        }
    return rates


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="oxygen-bench sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=50, help="expert episodes per family")
    p.add_argument("--first-seed", type=int, default=DEV.start)
    p.add_argument("--size", type=int, default=224, help="image width and height")
    p.add_argument("--renders", type=int, default=300, help="timed renders per camera")
    p.add_argument("--control-hz", type=float, default=DEFAULT_CONTROL_HZ)
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)

    rates = renders_per_second(args.size, args.renders) if args.renders else {}
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    results = run_expert(FAMILIES, list(seeds), args.control_hz)
    if rates:
        print(f"| camera | renders per wall s at {args.size}x{args.size} | per CPU s |")
        print("|---|---|---|")
    for camera, rate in rates.items():
        print(f"| {camera} | {rate['wall']:.0f} | {rate['cpu']:.0f} |")
    seed_range = describe(seeds)
    print(f"\nexpert, seeds {seeds.start}-{seeds.stop - 1} ({seed_range['range']})")
    print("\n| family | expert success | mean time to success (sim s) | failed seeds |")
    print("|---|---|---|---|")
    summary = {}
    for family, episodes in results.items():
        wins = [e for e in episodes if e.success]
        mean_time = float(np.mean([e.time_to_success for e in wins])) if wins else None
        failed = [e.seed for e in episodes if not e.success]
        summary[family] = {
            "episodes": len(episodes),
            "successes": len(wins),
            "success_rate": len(wins) / len(episodes),
            "mean_time_to_success_s": mean_time,
            "failed_seeds": failed,
        }
        shown = f"{mean_time:.2f}" if mean_time is not None else "-"
        print(f"| {family} | {len(wins)}/{len(episodes)} | {shown} | {failed or '-'} |")
    if args.json:
        payload = {
            "size": args.size,
            "renders_per_s": rates,
            "seeds": seed_range,
            "expert": summary,
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
