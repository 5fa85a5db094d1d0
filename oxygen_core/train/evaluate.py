"""`oxygen-eval in-process`: a trained policy (or a baseline, or both side by side) in
closed loop in the tabletop, in process (`rollout`), with its report and success table;
`--open-loop N` checks the grounding on held-out expert steps instead.

    oxygen-eval in-process --checkpoint data/policy/sim_demo --episodes 50 [--with-baselines]
    oxygen-eval in-process --baseline hold|random|blind|touch --episodes 50
    oxygen-eval in-process --checkpoint data/policy/sim_demo --open-loop 256
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from oxygen_core.engine.engine import make_engine
from oxygen_core.engine.types import EngineConfig, StreamConfig
from oxygen_core.policy import Policy
from oxygen_core.safety.gate import POLICIES
from oxygen_core.safety.limits import JointLimits, limits_from_files
from oxygen_core.sim import seeds as S
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.baselines import NAMES as BASELINES
from oxygen_core.sim.executor import CONTROLLERS, DEFAULT_CONTROLLER
from oxygen_core.sim.success import SuccessRate
from oxygen_core.sim.tasks import FAMILIES
from oxygen_core.train import checkpoints, grounding, prepare, rollout
from oxygen_core.train.baseline_actor import BaselineActor

DEFAULT_CAMERA = 64  # a baseline's camera pixels without a checkpoint (the shipped policy's)
DEFAULT_HORIZON = 10  # a baseline's chunk rows without a checkpoint (the demo preset's H)


def main(argv: list[str] | None = None) -> None:
    """oxygen-eval in-process: a checkpoint's policy (and with --with-baselines, the baselines
    next to it) or one baseline alone, in closed loop on --first-seed's seeds."""
    parser = eval_parser()
    args = parser.parse_args(argv)
    if (args.checkpoint is None) == (args.baseline is None):
        parser.error("give --checkpoint or --baseline (one of them)")
    if args.with_baselines and args.checkpoint is None:
        parser.error("--with-baselines runs them next to a --checkpoint's policy")
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    seeds = range(args.first_seed, args.first_seed + args.episodes)
    if args.baseline is not None:
        camera = args.camera_size or DEFAULT_CAMERA
        actor = BaselineActor(args.baseline, args.execute, DEFAULT_HORIZON)
        report(args, seeds, {args.baseline: closed_loop(args, actor, seeds, camera)})
        return
    policy, meta = checkpoints.trained_policy(Path(args.checkpoint))
    if args.true_plan and policy.robot.plan_prompt is None:
        raise SystemExit(f"--true-plan: robot {policy.robot.name!r} has no plan stage")
    camera = args.camera_size or meta["camera_size"]
    if args.open_loop:
        held_out = prepare.held_out_episodes(
            args.families, seeds, policy.config, camera, Path(args.work)
        )
        result = grounding.check(policy, held_out, args.open_loop)
        said = grounding.answers(policy, held_out, args.open_loop)
        print(json.dumps({**{part: g.row() for part, g in result.items()}, "answers": said}))
        return
    runs = {"policy": closed_loop(args, eval_engine(args, policy), seeds, camera)}
    if args.with_baselines:
        horizon = policy.config.action_horizon
        for name in BASELINES:
            actor = BaselineActor(name, args.execute, horizon)
            runs[name] = closed_loop(args, actor, seeds, camera)
    report(args, seeds, runs)


def eval_engine(args: argparse.Namespace, policy: Policy):
    """The engine oxygen-eval in-process runs the policy on (narration and memory streams)."""
    streams = (
        StreamConfig("narration", "Narrate:", max_tokens=args.max_tokens, every_frames=5),
        StreamConfig("memory", "Remember:", max_tokens=args.max_tokens, every_frames=10),
    )
    return make_engine(
        policy,
        EngineConfig(
            engine_mode=args.mode,
            steps_per_frame=args.k,
            max_active_requests=8,
            batch_buckets=(1, 2, 4, 8),
            streams=streams,
            chunk_handover=args.handover,
            rtc_delay_steps=args.link_delay,
            rtc_max_guidance=args.rtc_max_guidance,
        ),
    )


def closed_loop(
    args: argparse.Namespace, actor: rollout.Actor, seeds: range, camera: int
) -> list[rollout.Outcome]:
    """`actor` on every family and seed under the flags' loop settings, with a progress
    bar of the success so far."""
    bar = tqdm(total=len(seeds) * len(args.families), desc="closed loop", unit="ep")
    wins: dict[str, list[bool]] = {}

    def progress(o: rollout.Outcome) -> None:
        wins.setdefault(o.family, []).append(o.success)
        bar.update(1)
        bar.set_postfix({f: f"{np.mean(w):.2f}" for f, w in wins.items()})

    outcomes = rollout.evaluate(
        actor,
        args.families,
        seeds,
        args.execute,
        camera,
        progress,
        args.link_delay,
        args.true_plan,
        gate_limits(args),
        "slow" if args.gate == "off" else args.gate,
        args.controller,
    )
    bar.close()
    return outcomes


def report(args: argparse.Namespace, seeds: range, runs: dict[str, list[rollout.Outcome]]) -> None:
    """Print (and with --json write) the seeds, the first run's summary and every other
    run's (the baselines next to the policy); with several runs, a success table too."""
    (first, outcomes), *others = runs.items()
    report = {"seeds": S.describe(seeds), "run": first, "summary": rollout.summarise(outcomes)}
    if others:
        report["baselines"] = {name: rollout.summarise(o) for name, o in others}
    print(json.dumps(report, indent=1))
    if others:
        print(success_table(runs, [*args.families, "all"]))
    if args.json:
        detail = [dataclasses.asdict(o) for o in outcomes]
        Path(args.json).write_text(json.dumps({**report, "episodes": detail}, indent=1))


def success_table(runs: dict[str, list[rollout.Outcome]], columns: list[str]) -> str:
    """A markdown table: per run, each family's successes, rate and 95 % interval."""
    lines = ["| run | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, outcomes in runs.items():
        cells = [
            SuccessRate(
                sum(o.success for o in outcomes if column in (o.family, "all")),
                sum(column in (o.family, "all") for o in outcomes),
            ).text()
            for column in columns
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gate_limits(args: argparse.Namespace) -> JointLimits | None:
    """The sim arm's limits from --limits-params (None with --gate off); one line naming
    the file when they do not resolve."""
    if args.gate == "off":
        return None
    try:
        return limits_from_files(JOINT_NAMES, Path(args.limits_params))
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise SystemExit(f"--limits-params {args.limits_params}: {error}") from error


def eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oxygen-eval in-process", description="a trained policy in closed loop in the sim"
    )
    p.add_argument("--checkpoint", help="the policy to run (or --baseline)")
    p.add_argument(
        "--baseline",
        choices=BASELINES,
        help="run this image-free baseline instead of a policy (oxygen_core.sim.baselines)",
    )
    p.add_argument(
        "--with-baselines",
        action="store_true",
        help="also run every baseline on the same seeds and report them next to the policy",
    )
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--episodes", type=int, default=50, help="seeds per family")
    p.add_argument(
        "--first-seed",
        type=int,
        default=S.DEV.start,
        help=f"the first seed: the dev range {S.DEV.start}-{S.DEV[-1]} by default; the "
        f"test range {S.TEST.start}-{S.TEST[-1]} is run once per claim "
        "(oxygen_core.sim.seeds)",
    )
    p.add_argument("--execute", type=int, default=2, help="chunk rows run per frame")
    p.add_argument("--mode", default="oxygen", choices=("oxygen", "shared", "isolated"))
    p.add_argument("--k", type=int, default=2, help="tokens per frame (oxygen mode)")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--camera-size", type=int, default=0, help="0: the training camera size")
    p.add_argument("--handover", default="replace", choices=("replace", "blend", "rtc"))
    p.add_argument(
        "--link-delay",
        type=int,
        default=0,
        help="control steps from a frame to its chunk's arrival at the controller; blend "
        "and rtc are told it as d (rtc_delay_steps)",
    )
    p.add_argument(
        "--rtc-max-guidance", type=float, default=EngineConfig.rtc_max_guidance, help="beta"
    )
    p.add_argument(
        "--gate",
        default="slow",
        choices=(*POLICIES, "off"),
        help="the chunk gate's policy, as the node's gate_policy (off: chunks go out "
        "unchecked, to measure what the gate changes)",
    )
    p.add_argument(
        "--controller",
        default=DEFAULT_CONTROLLER,
        choices=CONTROLLERS,
        help="the trajectory controller's model the arm runs, and the node's shaping for it "
        "(jtc: ros2_control's as Jazzy and Kilted release it; jtc_replacement: take-over at "
        "the stamp)",
    )
    p.add_argument(
        "--limits-params",
        default="config/sim_demo.yaml",
        help="the params YAML whose URDF and joint_limits the gate reads, as the node does",
    )
    p.add_argument("--json", help="write the summary and every episode here")
    p.add_argument(
        "--true-plan",
        action="store_true",
        help='a two-stage policy acts on each frame\'s true "Target:" answer instead of '
        "its own: success with a perfect answer, the bound its grounding sets",
    )
    p.add_argument(
        "--open-loop",
        type=int,
        default=0,
        metavar="STEPS",
        help="instead of closed loop: the grounding check on STEPS steps of --episodes "
        "held-out expert episodes per family",
    )
    p.add_argument("--work", default="out/train/check", help="held-out expert episodes cache")
    return p
