"""Throughput of oxygen-eval manifest: tasks per minute by workers and engine reuse.

    oxygen-bench ray DIR [--bags 8] [--seconds 3] [--workers 1 2]

Generates `--bags` demo scenes (seeds 0..n-1, oxygen_ros.tools.demo_bag) and a manifest of
three configurations of config/tiny.yaml (oxygen, shared and isolated, k=2), then runs
`oxygen-eval manifest` once per (workers, reuse) into its own folder under DIR, each as a new
process with its own local Ray, and prints a markdown table from the runs' run.json.
Elapsed time is the scheduler's: from the first task handed out to the last one
collected (Ray start-up, about 2-10 s, is not in it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from oxygen_ros.tools.demo_bag import Scene, scene_topics, write_scene

_CONFIGS = {
    "oxygen": {"engine_mode": "oxygen", "steps_per_frame": 2},
    "shared": {"engine_mode": "shared", "steps_per_frame": 2},
    "isolated": {"engine_mode": "isolated", "steps_per_frame": 2},
}


def write_inputs(root: Path, bags: int, seconds: float, params: Path) -> Path:
    """The bags and the manifest; the manifest's path."""
    topics = scene_topics(params)
    for seed in range(bags):
        path = root / "bags" / f"scene{seed:02d}"
        if not path.exists():
            write_scene(path, Scene(seconds=seconds, seed=seed), topics)
    configs = {
        name: {"params": str(params.resolve()), "overrides": o} for name, o in _CONFIGS.items()
    }
    manifest = root / "manifest.yaml"
    inputs = {"bags": ["bags/scene*"]}
    data = {"inputs": inputs, "configurations": configs}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="oxygen-bench ray", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="working folder (bags, manifest, runs)")
    parser.add_argument("--bags", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each bag")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--params", type=Path, default=Path("config/tiny.yaml"))
    args = parser.parse_args(argv)
    manifest = write_inputs(args.out, args.bags, args.seconds, args.params)
    rows = []
    for workers in args.workers:
        for reuse in (True, False):
            run_dir = args.out / f"w{workers}-{'reuse' if reuse else 'noreuse'}"
            command = [sys.executable, "-m", "oxygen_ros.tools.eval.cli", str(manifest)]
            command += ["--out", str(run_dir), "--workers", str(workers), "--no-progress"]
            subprocess.run(command + ([] if reuse else ["--no-reuse"]), check=True)
            run = json.loads((run_dir / "run.json").read_text())
            rows.append((workers, reuse, run))
    print(f"\n{args.bags} bags x {len(_CONFIGS)} configurations ({args.seconds:g} s each)\n")
    print("| workers | engine reuse | tasks | engines built | elapsed (s) | tasks/min |")
    print("|---|---|---|---|---|---|")
    for workers, reuse, run in rows:
        print(
            f"| {workers} | {'yes' if reuse else 'no'} | {run['finished']} | "
            f"{run['engines_built']} | {run['elapsed_s']:.1f} | {run['tasks_per_min']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
