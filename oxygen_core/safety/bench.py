"""What the chunk gate costs a frame: `oxygen-bench gate [--json]`.

For each shipped robot config with limits (its URDF and joint_limits block, read as the
node reads them, and its action horizon and rates), the time of one `ChunkGate.check`
on chunks made to take each path through it, under the node's default policy (slow):

- passed: every joint moves at half its velocity bound, inside its range;
- clamped: the same, with one joint's last point past its upper bound;
- slowed: joints at up to 2.3x their velocity bound (the sim policy's fastest chunks),
  as far as the jump bound and the range allow;
- rejected: the first point twice the jump bound from the measured state.

The chunks are synthetic (what the gate does depends only on which bounds a chunk
breaks, not on where it came from). Each figure is the median and the 99th percentile
of `--calls` timed calls on this machine, next to the frame period it runs in.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from oxygen_core.safety.gate import ChunkGate
from oxygen_core.safety.limits import JointLimits, limits_from_files, ros_parameters

CONFIGS = ("config/sim_demo.yaml", "config/aloha.yaml", "config/humanoid_thor.yaml")
PATHS = ("passed", "clamped", "slowed", "rejected")


def chunk_for(path: str, limits: JointLimits, rows: int, period_s: float) -> tuple:
    """(chunk [rows, J], measured state [J]) that takes `path` through the gate: each joint
    at a constant speed from near its lower bound (no acceleration), the first step
    inside the jump bound and the whole path inside the range unless clamped."""
    lower = np.where(np.isfinite(limits.lower), limits.lower, -np.pi)
    upper = np.where(np.isfinite(limits.upper), limits.upper, np.pi)
    bound = np.where(np.isfinite(limits.velocity), limits.velocity, 1.0)
    jump = np.where(np.isfinite(limits.jump), limits.jump, 1.0)
    span = rows * period_s
    factor = 2.3 if path == "slowed" else 0.5
    speed = np.minimum.reduce([factor * bound, 0.9 * jump / period_s, 0.9 * (upper - lower) / span])
    state = lower + 0.05 * (upper - lower)
    if path == "clamped":  # joint 0 ends one step past its upper bound, slowly enough
        accel = limits.acceleration[0] if np.isfinite(limits.acceleration[0]) else 1.0
        speed[0] = min(speed[0], 0.5 * accel * period_s)  # that stopping there is no jolt
        state[0] = upper[0] - speed[0] * (span - period_s)
    chunk = state + speed * np.arange(1, rows + 1)[:, None] * period_s
    if path == "rejected":
        chunk = chunk + 2 * jump
    return chunk.astype(np.float32), state.astype(np.float32)


def time_calls(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """Median and 99th percentile of `calls` calls, in microseconds."""
    call()  # first use: imports and caches out of the figures
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        call()
        times[i] = time.perf_counter() - start
    return float(np.median(times) * 1e6), float(np.percentile(times, 99) * 1e6)


def measure(config: str, calls: int) -> list[dict]:
    """One row per path for the robot of `config`."""
    values = ros_parameters(Path(config))
    joints = tuple(values.get("action_names") or values["joint_names"])
    limits = limits_from_files(joints, Path(config))
    period_s = 1.0 / float(values["control_rate_hz"])
    rows = int(values["action_horizon"])
    frame_ms = 1e3 * int(values["execute_horizon"]) * period_s
    gate = ChunkGate(limits, "slow", period_s)
    found = []
    for path in PATHS:
        chunk, state = chunk_for(path, limits, rows, period_s)
        outcome = gate.check(chunk, state).outcome
        if outcome != path:
            raise RuntimeError(f"{config}: the {path} chunk was {outcome}")
        median, p99 = time_calls(lambda c=chunk, s=state: gate.check(c, s), calls)
        found.append(
            {"config": config, "joints": len(joints), "rows": rows, "path": path,
             "median_us": median, "p99_us": p99, "frame_ms": frame_ms,
             "p99_share_of_frame": p99 * 1e-3 / frame_ms}
        )  # fmt: skip
    return found


def table(rows: list[dict]) -> str:
    lines = [
        "| config | joints x rows | path | median us | p99 us | frame period ms | p99 / frame |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['joints']} x {r['rows']} | {r['path']} | "
            f"{r['median_us']:.0f} | {r['p99_us']:.0f} | {r['frame_ms']:.0f} | "
            f"{100 * r['p99_share_of_frame']:.2f} % |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="oxygen-bench gate")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per row")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    rows = [row for config in args.configs for row in measure(config, args.calls)]
    print(json.dumps(rows, indent=1) if args.json else table(rows))


if __name__ == "__main__":
    main()
