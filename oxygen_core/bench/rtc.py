"""What each chunk hand-over costs in the act phase, and how well it meets the old chunk.

`oxygen-bench rtc --preset tiny,small` runs, per preset (random weights,
the demo robot, synthetic observations), one engine per hand-over (`replace`, `blend`,
`rtc`) side by side:

- cost: the median wall time of `Engine.act` (prefill + denoise + host work), its
  prefill and denoise parts (and the fastest denoise, the least disturbed by other
  work on a shared CPU), and its share of the frame budget with what is left for
  language. The engines take turns frame by frame, so a noisy neighbour on the CPU
  slows all three alike. Each frame hands over the engine's own previous chunk.
- fidelity: a FIXED previous chunk (the first frame's replace chunk) is handed to every
  engine with each later observation, `executed` rows run and d = `delay`. Reported, in
  robot units: the largest |new - previous| over the first d rows (they should be the
  previous chunk's: the robot runs those while the new chunk is computed) and at row d,
  the seam where the robot switches to the new chunk. With random weights, consecutive
  chunks are unrelated: `replace` shows how far apart they are.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from oxygen_core.engine import EngineConfig, Handover, make_engine
from oxygen_core.engine.verify import synthetic_observations
from oxygen_core.model import rtc
from oxygen_core.policy import load_policy

HANDOVERS = ("replace", "blend", "rtc")
PERIOD_S = 0.02  # the node's default control period (control_rate_hz 50)


def measure(preset: str, args: argparse.Namespace) -> dict:
    """Cost and fidelity of every hand-over for one preset."""
    policy = load_policy(preset, args.robot)
    horizon = policy.config.action_horizon
    if not 0 < args.delay < horizon - args.executed:
        raise SystemExit(f"need 0 < delay < horizon ({horizon}) - executed ({args.executed})")
    engines = {
        h: make_engine(
            policy,
            EngineConfig(
                max_active_requests=1,
                batch_buckets=(1,),
                denoise_steps=args.steps,
                chunk_handover=h,
                rtc_delay_steps=args.delay,
                rtc_max_guidance=args.beta,
            ),
        )
        for h in HANDOVERS
    }
    observations = synthetic_observations(policy, args.frames + 2, seed=0)
    fixed = engines["replace"].act(observations[0]).actions
    for engine in engines.values():  # compile both denoise paths
        engine.act(observations[0], Handover(fixed, args.executed, PERIOD_S))
    return {
        "horizon": horizon,
        "cost": cost(engines, observations, args),
        "fidelity": fidelity(engines, observations[1:], fixed, args),
    }


def cost(engines: dict, observations: list, args: argparse.Namespace) -> dict:
    previous = {h: e.act(observations[0]).actions for h, e in engines.items()}
    times: dict[str, dict[str, list[float]]] = {h: {} for h in engines}
    for obs in observations[1:]:
        for h, engine in engines.items():
            t0 = time.perf_counter()
            result = engine.act(obs, Handover(previous[h], args.executed, PERIOD_S))
            wall = time.perf_counter() - t0
            previous[h] = result.actions
            for key, value in (("act", wall), ("prefill", result.prefill_s)):
                times[h].setdefault(key, []).append(value)
            times[h].setdefault("denoise", []).append(result.denoise_s)
    budget = args.frame_ms / 1e3
    out = {}
    for h, series in times.items():
        medians = {f"{k}_s": statistics.median(v) for k, v in series.items()}
        medians |= {f"{k}_min_s": min(v) for k, v in series.items()}
        medians["budget_share"] = medians["act_s"] / budget
        medians["left_for_language_s"] = budget - medians["act_s"]
        out[h] = medians
    return out


def fidelity(engines: dict, observations: list, fixed: np.ndarray, args) -> dict:
    d = args.delay
    shifted = rtc.shift_chunk(fixed, args.executed, fixed.shape[0])
    out = {}
    for h, engine in engines.items():
        frozen, seam = [], []
        for obs in observations:
            new = engine.act(obs, Handover(fixed, args.executed, PERIOD_S)).actions
            frozen.append(float(np.abs(new[:d] - shifted[:d]).max()))
            seam.append(float(np.abs(new[d] - shifted[d]).max()))
        out[h] = {
            "first_d_max_abs_mean": statistics.mean(frozen),
            "first_d_max_abs_worst": max(frozen),
            "seam_max_abs_mean": statistics.mean(seam),
        }
    return out


def table(result: dict) -> str:
    a = result["args"]
    lines = [
        f"act phase per chunk hand-over: robot {a['robot']}, S={a['steps']}, beta={a['beta']}, "
        f"frame budget {a['frame_ms']:.0f} ms, {a['frames']} frames (medians)",
        "",
        "| preset | handover | act ms | prefill ms | denoise ms | denoise min ms | "
        "share of frame | left for language ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in result["presets"].items():
        for h, c in entry["cost"].items():
            lines.append(
                f"| {name} | {h} | {c['act_s'] * 1e3:.2f} | {c['prefill_s'] * 1e3:.2f} | "
                f"{c['denoise_s'] * 1e3:.2f} | {c['denoise_min_s'] * 1e3:.2f} | "
                f"{c['budget_share']:.1%} | "
                f"{c['left_for_language_s'] * 1e3:.1f} |"
            )
    lines += [
        "",
        f"fidelity to a fixed previous chunk: executed {a['executed']} rows, d = {a['delay']} "
        "(robot units, max |new - previous| per frame)",
        "",
        "| preset | H | handover | first d rows, mean | first d rows, worst | seam row d, mean |",
        "|---|---|---|---|---|---|",
    ]
    for name, entry in result["presets"].items():
        for h, f in entry["fidelity"].items():
            lines.append(
                f"| {name} | {entry['horizon']} | {h} | {f['first_d_max_abs_mean']:.3f} | "
                f"{f['first_d_max_abs_worst']:.3f} | {f['seam_max_abs_mean']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="oxygen-bench rtc", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny,small", help="model presets to run")
    parser.add_argument("--robot", default="demo", help="robot preset (action dims, horizon)")
    parser.add_argument("--frames", type=int, default=10, help="timed frames per hand-over")
    parser.add_argument("--steps", type=int, default=10, help="denoising steps S")
    parser.add_argument("--beta", type=float, default=5.0, help="rtc_max_guidance")
    parser.add_argument("--executed", type=int, default=1, help="rows of the old chunk run")
    parser.add_argument("--delay", type=int, default=2, help="d, rows run before arrival")
    parser.add_argument(
        "--frame-ms", type=float, default=100.0, help="frame budget (node default: 5 rows at 50 Hz)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    args = parser.parse_args(argv)
    if args.frames < 1 or args.steps < 1:
        parser.error("--frames and --steps must be at least 1")
    result = {"args": vars(args), "presets": {}}
    for name in (p for p in args.preset.split(",") if p):
        result["presets"][name] = measure(name, args)
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
