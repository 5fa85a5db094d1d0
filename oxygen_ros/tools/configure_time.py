"""How long configure takes cold, warm and without the persistent compilation cache.

    oxygen-bench configure config/tiny.yaml [--runs 3] [--json]

Configure (`pipeline.make_pipeline`: load the weights, build the engine, compile every
shape) is what a robot waits for at each start. Each measurement runs in a fresh process,
as a restart does, with the params file's settings and `compile_cache_dir` pointed at a
new folder: the first run there is cold (the folder is empty, every executable compiles
and is written), the next ones warm (read back); `off` runs with the cache turned off.
Prints a table of the median seconds (or JSON) with every run's time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

KINDS = ("off", "cold", "warm")


def configure_s(params: Path, cache_dir: str) -> float:
    """make_pipeline's wall time in this process, on `params` with that cache folder."""
    from oxygen_ros.pipeline import make_pipeline
    from oxygen_ros.tools.configure import load_settings

    settings, _ = load_settings(params, {"compile_cache_dir": cache_dir})
    start = time.perf_counter()
    make_pipeline(settings)
    return time.perf_counter() - start


def configure_in_fresh_process(params: Path, cache_dir: str) -> float:
    """configure_s in a new Python process, as a restart runs it."""
    code = (
        "import sys; from pathlib import Path; from oxygen_ros.tools.configure_time import "
        "configure_s; print(configure_s(Path(sys.argv[1]), sys.argv[2]))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code, str(params), cache_dir],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(ran.stdout.strip().splitlines()[-1])


def measure(params: Path, runs: int) -> dict[str, list[float]]:
    """Seconds per run: `runs` with the cache off, one cold, `runs` warm."""
    with tempfile.TemporaryDirectory(prefix="oxygen-compile-cache-") as cache:
        times = {"off": [configure_in_fresh_process(params, "") for _ in range(runs)]}
        times["cold"] = [configure_in_fresh_process(params, cache)]
        times["warm"] = [configure_in_fresh_process(params, cache) for _ in range(runs)]
    return times


def table(params: Path, times: dict[str, list[float]]) -> str:
    rows = [f"configure of {params} (median of each kind, seconds)", "", "| cache | s | runs |"]
    rows.append("|---|---|---|")
    for kind in KINDS:
        runs = ", ".join(f"{t:.2f}" for t in times[kind])
        rows.append(f"| {kind} | {statistics.median(times[kind]):.2f} | {runs} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="oxygen-bench configure")
    parser.add_argument("params", type=Path, help="Node parameters YAML.")
    parser.add_argument("--runs", type=int, default=3, help="Runs off and warm (default 3).")
    parser.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    args = parser.parse_args(argv)
    times = measure(args.params, args.runs)
    print(json.dumps(times) if args.json else table(args.params, times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
