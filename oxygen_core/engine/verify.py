"""`oxygen-verify`: the OxyGen engine must compute exactly what the paper's baseline computes.

OxyGen changes how the work of a frame is scheduled (one shared prefill, language requests
decoded a few tokens per frame in one batch with requests from other frames), not what is
computed. So the `oxygen` engine and the `isolated` baseline (own prefill per task, each
request decoded to completion in its frame) must agree when fed the same observations,
stream prompts and noise: the same action chunks up to float32 rounding and, request by
request, the same token ids. Random weights suffice (equality must hold for any weights);
any difference is an engine bug.

The run: a synthetic robot (random camera images and joint states, an instruction that
changes halfway), narration requested every frame and memory on each instruction change,
both with N tokens. After the last frame the oxygen engine keeps running its language phase
until every pending request has finished. The KV pool is sized so that no request ever
waits for a slot: a queued request would start from a later frame's prefix than in the
baseline and legitimately differ.

Prints one JSON object on stdout (logs go to stderr); exit code 0 when every request's
tokens match and the largest action difference is at most 1e-4, else 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from oxygen_core.config import MODEL_PRESETS
from oxygen_core.engine.engine import Engine, make_engine
from oxygen_core.engine.types import DEFAULT_STREAMS, EngineConfig, LanguageResult
from oxygen_core.observation import Observation
from oxygen_core.policy import Policy, load_policy

ACTION_TOLERANCE = 1e-4
INSTRUCTIONS = ("pick up the red cup", "put the cup on the shelf")


def synthetic_observations(policy: Policy, frames: int, seed: int) -> list[Observation]:
    """Random uint8 images for every camera of the robot and random joint states.

    The images are not the model's size, so the resize path runs too. The instruction
    switches at frame `frames // 2`, which fires the memory stream a second time.
    """
    rng = np.random.default_rng(seed)
    switch = frames // 2
    return [
        Observation(
            images={c: rng.integers(0, 256, (48, 64, 3), np.uint8) for c in policy.robot.cameras},
            state=rng.standard_normal(policy.robot.state_dim).astype(np.float32),
            prompt=INSTRUCTIONS[int(frame >= switch)],
        )
        for frame in range(frames)
    ]


@dataclasses.dataclass
class RequestTrace:
    """Everything one request produced, gathered from its token events."""

    stream: str
    origin_frame: int
    token_ids: list[int] = dataclasses.field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    events: int = 0  # language phases that reported on this request (its lifetime)

    def outcome(self) -> tuple:
        """What must agree between engine modes (not `events`: that is scheduling)."""
        return (self.stream, tuple(self.token_ids), self.text, self.finish_reason)


@dataclasses.dataclass
class Trace:
    """One engine run: the action chunk of every frame and every request's outcome."""

    actions: list[np.ndarray] = dataclasses.field(default_factory=list)
    requests: dict[int, RequestTrace] = dataclasses.field(default_factory=dict)
    language: list[LanguageResult] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def record(self, result: LanguageResult) -> None:
        self.language.append(result)
        for ev in result.events:
            req = self.requests.setdefault(ev.request_id, RequestTrace(ev.stream, ev.origin_frame))
            req.token_ids.extend(ev.token_ids)
            req.text = ev.text
            req.finish_reason = ev.finish_reason
            req.events += 1


def drain(engine: Engine, trace: Trace) -> None:
    """Run language phases until no request is active or queued (after the last frame)."""
    sched = engine.scheduler
    # Every phase decodes at least one token per live row (fixed k >= 1) or admits from
    # the queue, so this bound is only reached when the step budget grants nothing.
    limit = (len(sched.active) + len(sched.queue) + 1) * engine.max_new
    phases = 0
    while sched.active or sched.queue:
        if phases == limit:
            raise RuntimeError(
                f"{len(sched.active)} active and {len(sched.queue)} queued requests still "
                f"pending after {limit} language phases"
            )
        trace.record(engine.language())
        phases += 1


def run_engine(engine: Engine, observations: Sequence[Observation]) -> Trace:
    """Both phases for every observation, then drain: the full trace of one engine."""
    trace = Trace()
    t0 = time.perf_counter()
    for obs in observations:
        trace.actions.append(engine.act(obs).actions)
        trace.record(engine.language())
    drain(engine, trace)
    trace.seconds = time.perf_counter() - t0
    return trace


def compare(test: Trace, reference: Trace) -> dict:
    """Action difference, and the fraction of requests whose token ids are identical
    (`token_match`) and whose whole outcome is: stream, tokens, text, finish reason."""
    pairs = zip(test.actions, reference.actions, strict=True)
    diff = max((float(np.max(np.abs(a - b))) for a, b in pairs), default=0.0)
    ids = sorted(test.requests.keys() | reference.requests.keys())

    def differ(i: int, field: Callable[[RequestTrace], object]) -> bool:
        ours, theirs = test.requests.get(i), reference.requests.get(i)
        return ours is None or theirs is None or field(ours) != field(theirs)

    mismatched = [i for i in ids if differ(i, lambda r: r.token_ids)]
    different = [i for i in ids if differ(i, RequestTrace.outcome)]
    return {
        "action_max_abs_diff": diff,
        "token_match": 1.0 - len(mismatched) / len(ids) if ids else 1.0,
        "outcome_match": 1.0 - len(different) / len(ids) if ids else 1.0,
        "requests": len(ids),
        "tokens": sum(len(r.token_ids) for r in reference.requests.values()),
        "mismatched_requests": different[:10],
    }


def pool_rows(k: int, n: int) -> int:
    """KV pool rows so that no request waits: narration lives max(1, ceil((N-1)/k)) frames
    (the first token comes with admission, then k per frame; one more frame when it
    rides in the first step instead, `admit_in_step`) plus up to two memory requests
    (the first frame and the instruction change)."""
    return math.ceil(n / k) + 2


def verify_config(
    k: int, n: int, steps: int, seed: int, admit_in_step: bool = True
) -> EngineConfig:
    """The oxygen engine's config; the isolated run replaces only the mode."""
    rows = pool_rows(k, n)
    buckets = tuple(2**i for i in range(rows.bit_length()) if 2**i < rows) + (rows,)
    return EngineConfig(
        engine_mode="oxygen",
        steps_per_frame=k,
        denoise_steps=steps,
        max_active_requests=rows,
        batch_buckets=buckets,
        streams=tuple(dataclasses.replace(s, max_tokens=n) for s in DEFAULT_STREAMS),
        admit_in_step=admit_in_step,
        seed=seed,
    )


def log(message: str) -> None:
    """Progress for people goes to stderr; stdout carries only the JSON report."""
    print(f"oxygen-verify: {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="oxygen-verify",
        description="Check that the OxyGen engine reproduces the isolated baseline exactly "
        "(random weights, synthetic observations). Prints one JSON object.",
    )
    parser.add_argument(
        "--preset", default="tiny", help=f"model preset ({', '.join(MODEL_PRESETS)})"
    )
    parser.add_argument("--frames", type=int, default=8, help="control frames to run")
    parser.add_argument("--k", type=int, default=2, help="tokens per request per frame")
    parser.add_argument("--N", type=int, default=10, help="max tokens per request")
    parser.add_argument("--S", type=int, default=10, help="denoising steps")
    parser.add_argument("--robot", default="demo", help="robot preset (cameras, action dims)")
    parser.add_argument("--seed", type=int, default=0, help="weights, observations, noise")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float32", "bfloat16"),
        help="compute and KV dtype (bfloat16 on accelerators)",
    )
    parser.add_argument(
        "--admit-apart",
        action="store_true",
        help="admit every new request in a pass of its own (admit_in_step off)",
    )
    args = parser.parse_args(argv)
    for name in ("frames", "k", "N", "S"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `oxygen-verify`; returns the exit code."""
    args = parse_args(argv)
    log(
        f"preset {args.preset}, robot {args.robot}, {args.dtype}: random weights (seed {args.seed})"
    )
    policy = load_policy(args.preset, args.robot, seed=args.seed, dtype=args.dtype)
    observations = synthetic_observations(policy, args.frames, args.seed)
    cfg = verify_config(args.k, args.N, args.S, args.seed, not args.admit_apart)
    traces = {}
    for mode in ("oxygen", "isolated"):
        engine = make_engine(policy, dataclasses.replace(cfg, engine_mode=mode))
        traces[mode] = run_engine(engine, observations)
        log(
            f"{mode}: {args.frames} frames, {len(traces[mode].requests)} requests in "
            f"{traces[mode].seconds:.2f} s (compilation included)"
        )
    report = {
        "preset": args.preset,
        "robot": args.robot,
        "frames": args.frames,
        "k": args.k,
        "N": args.N,
        "S": args.S,
        "seed": args.seed,
        "dtype": args.dtype,
        "admit_in_step": not args.admit_apart,
        **compare(traces["oxygen"], traces["isolated"]),
    }
    ok = report["outcome_match"] == 1.0 and report["action_max_abs_diff"] <= ACTION_TOLERANCE
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
