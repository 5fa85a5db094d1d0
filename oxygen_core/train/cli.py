"""`oxygen-train`: a pi0.5 policy from expert data, one run.

    oxygen-train --out data/policy/sim_demo            # sim episodes -> checkpoint
    oxygen-train --out DIR --episodes FILE.npz         # episodes collected elsewhere (bags)
    oxygen-train --recipe config/train/sim_demo.yaml   # the shipped policy's stages, averaged

A run writes, under --out, an openpi-layout checkpoint (`params/`, Orbax, and
`assets/<robot>/norm_stats.json`), the trained SentencePiece model `tokenizer.model`,
`train_config.json` (preset, robot, data and training settings, final losses) and
`loss.png`. Its resumable state and the collected episodes stay under --work, so a rerun
with the same arguments resumes where it stopped and does not regenerate data. What it
trains on is `prepare`'s, how the checkpoint is read and written `checkpoints`', and
`oxygen-eval in-process` (`evaluate`) runs it in closed loop. `oxygen_core.train.recipe`
runs a recipe file's stages, each through `run_training` as one command here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from oxygen_core.config import ROBOT_PRESETS, ModelConfig, RobotConfig, model_preset, robot_preset
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import TOKENIZER_FILE, TRAIN_CONFIG
from oxygen_core.policy import Policy
from oxygen_core.robot_spec import declaration
from oxygen_core.sim import seeds as S
from oxygen_core.sim.tasks import FAMILIES
from oxygen_core.train import checkpoints, locate, prepare
from oxygen_core.train import dataset as D
from oxygen_core.train.curves import plot_history
from oxygen_core.train.init import training_params
from oxygen_core.train.trainer import TrainConfig, train


def train_main(argv: list[str] | None = None) -> None:
    """oxygen-train without --recipe: one run from its flags; data that cannot train (no
    episode the expert completed, none held out) fails in one line."""
    try:
        run_training(train_args(argv))
    except ValueError as error:
        raise SystemExit(f"oxygen-train: {error}") from None


def train_args(
    argv: list[str] | None, parser: argparse.ArgumentParser | None = None
) -> argparse.Namespace:
    """oxygen-train's flags parsed and checked with `parser` (by default
    `_train_parser()`, which exits on an error; a recipe passes one that raises)."""
    parser = parser or _train_parser()
    args = parser.parse_args(argv)
    if args.ground_steps and not args.grounding_rows:
        parser.error("--ground-steps trains on the grounding rows: drop --no-grounding-rows")
    if args.first_seed < 0 or args.first_seed + args.seeds > prepare.SCENE_FIRST_SEED:
        parser.error(
            f"expert seeds must lie in 0..{prepare.SCENE_FIRST_SEED - 1} (still scenes and "
            "evaluation seeds start there)"
        )
    if not args.out and not args.episodes_only:
        parser.error("--out is required (unless --episodes-only)")
    scenes = range(prepare.SCENE_FIRST_SEED, prepare.SCENE_FIRST_SEED + args.ground_scenes)
    try:
        S.check_not_evaluation(scenes, "--ground-scenes seeds")
    except ValueError as error:
        parser.error(str(error))
    return args


def presets(args: argparse.Namespace) -> tuple[RobotConfig, ModelConfig]:
    """The run's robot (`robot_of`) and the model of --preset as that robot feeds it."""
    robot = robot_of(args)
    return robot, robot.apply(model_preset(args.preset))


def robot_of(args: argparse.Namespace) -> RobotConfig:
    """The robot a run trains: one declared as data (`robot_config`: oxygen-train --bags
    sets its params file's `robots:` declaration), else the preset --robot names."""
    return args.robot_config or robot_preset(args.robot)


def run_training(args: argparse.Namespace, recipe: dict | None = None) -> None:
    """One oxygen-train run of checked flags; `recipe` (path, stage, hash) goes into
    train_config.json when a recipe runs it, so the checkpoint says how to rebuild it."""
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    robot, cfg = presets(args)
    if args.episodes_only:
        cache = prepare.expert_cache(args, cfg)
        if not cache.exists():
            prepare.expert_episodes(args, cfg)
        print(cache)
        return
    out, work = Path(args.out), Path(args.work)
    data = prepare.episodes(args, cfg)
    base = base_policy(args)
    prep = prepare.prepare(cfg, robot, data, args.val_every_episode, args.grounding_rows, base)
    train_set, val_set, norm = prep.train_set, prep.val_set, prep.norm
    out.mkdir(parents=True, exist_ok=True)
    (out / TOKENIZER_FILE).write_bytes(prep.tokenizer_bytes)
    tc = train_config(args)
    print(
        f"{len(train_set)} training steps of {prep.train_episodes} episodes, "
        f"{len(val_set)} validation steps; model {cfg.name}, "
        f"{sum(np.size(v) for v in P.flatten(P.init_params(cfg)).values()) / 1e6:.2f}M params"
    )
    params = initial_params(cfg, args, base)
    if args.ground_steps:
        params = ground(cfg, robot, params, prep, args, work)
    bar = tqdm(total=tc.steps, desc="training", unit="step")

    def progress(step: int, losses: dict) -> None:
        bar.update(step - bar.n)
        if step % 20 == 0:
            bar.set_postfix(flow=f"{losses['flow']:.3f}", text=f"{losses['text']:.3f}")

    params, history = train(cfg, params, train_set, val_set, tc, work, progress)
    bar.close()
    checkpoints.write_checkpoint(out, params, norm, robot.name)
    plot_history(history, out / "loss.png")
    summary = {
        **run_fields(args),
        "action_horizon": cfg.action_horizon,  # what the node checks it is run at
        "image_slots": cfg.num_images,  # and this
        "train_steps": len(train_set),
        "val_steps": len(val_set),
        "train": dataclasses.asdict(tc),
        "final_val": history.val[-1] if history.val else None,
        "wall_s_this_run": round(time.perf_counter() - started, 1),
        "recipe": recipe,
    }
    (out / TRAIN_CONFIG).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary["final_val"]))


def run_fields(args: argparse.Namespace) -> dict:
    """The train_config.json fields that record a run's data and starting point (its
    optimisation settings are `train_config(args)`)."""
    robot = robot_of(args)
    # Bags were recorded elsewhere: the sim's families, seeds and noise are not theirs.
    data = {"bags": args.bags} if args.bags else {
        "families": list(args.families),
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "dart": args.dart,
    }  # fmt: skip
    return {
        "preset": args.preset,
        "robot": args.robot,
        "robot_declaration": None if robot.name in ROBOT_PRESETS else declaration(robot),
        "camera_size": args.camera_size,
        **data,
        "grounding_rows": args.grounding_rows,
        "ground_steps": args.ground_steps,
        "ground_scenes": args.ground_scenes,
        "weights_init": args.weights_init,
        "init_from": args.init_from,
        "episodes": args.episodes,
        "add_episodes": args.add_episodes,
    }


def ground(cfg, robot, params, prep: prepare.Prepared, args: argparse.Namespace, work: Path):
    """The grounding stage before co-training: `--ground-steps` steps on the grounding
    rows alone (no action expert, no stream rows), resumable under <work>/ground.

    pi0.5 starts from a VLM that already localises objects; this stage gives the small
    VLM that skill from the same episodes before the flow loss competes for it."""
    train_set = prep.train_set.last_rows(locate.COUNT)
    if args.ground_scenes:
        scenes = prepare.still_scenes(args, cfg)
        policy = prep.policy(cfg, robot, {})
        train_set = D.tokenize(scenes, policy).last_rows(locate.COUNT)
    tc = TrainConfig(
        steps=args.ground_steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        flow=False,
    )
    bar = tqdm(total=tc.steps, desc="grounding stage", unit="step")

    def progress(step: int, losses: dict) -> None:
        bar.update(step - bar.n)
        if step % 20 == 0:
            bar.set_postfix(text=f"{losses['text']:.3f}")

    params, _ = train(
        cfg,
        params,
        train_set,
        prep.val_set.last_rows(locate.COUNT),
        tc,
        work / "ground",
        progress,
    )
    bar.close()
    return params


# --weights-init: the function that draws a run's starting parameters (checkpoint layout)
INITS = {"training": training_params, "random": P.init_params}


def train_config(args: argparse.Namespace, **overrides: object) -> TrainConfig:
    """oxygen-train's optimisation flags as a TrainConfig; scripts/experiments/train_variants.py
    parses the same flags and overrides a few fields. A two-stage robot (a plan_prompt)
    trains its action expert on the grounding rows' last one, the "Target:" row."""
    plan_prompt = robot_of(args).plan_prompt
    trainable = (locate.TARGET_PROMPT, True)
    if plan_prompt is not None and (plan_prompt, args.grounding_rows) != trainable:
        raise SystemExit(
            f"--robot {args.robot} plans with {plan_prompt!r}: it trains on the grounding "
            f"rows' {locate.TARGET_PROMPT!r} row (drop --no-grounding-rows)"
        )
    return TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        flow_samples=args.flow_samples,
        camera_dropout=args.camera_dropout,
        plan_row=plan_prompt is not None,
        seed=args.seed,
        **overrides,
    )


def _train_parser(
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> argparse.ArgumentParser:
    p = parser_class(
        prog="oxygen-train",
        description=__doc__.split("\n")[0],
        epilog="oxygen-train --recipe FILE [--out DIR] [--work DIR] [--from-stage NAME] "
        "runs every stage of a recipe (config/train/) and their average instead; "
        "oxygen-train --bags DIR [DIR ...] [--params FILE] trains on rosbag2 recordings "
        "(oxygen_ros.tools.train); oxygen-train dagger|average: recovery frames, the mean "
        "of checkpoints",
    )
    p.add_argument("--out", help="checkpoint directory to write")
    p.add_argument(
        "--episodes-only",
        action="store_true",
        help="write the expert's episodes to --work, print the file and stop (another "
        "run's --add-episodes: e.g. more episodes of one family)",
    )
    p.add_argument("--work", default="out/train/sim_demo", help="episodes cache, resume state")
    p.add_argument("--preset", default="demo")
    p.add_argument(
        "--robot",
        default="sim_plan",
        help='sim_plan: grip-point actions after a "Target:" answer (the shipped recipe\'s); '
        "sim_grip: grip-point actions; sim: joint actions",
    )
    p.set_defaults(robot_config=None)  # a RobotConfig declared as data (`robot_of`)
    p.set_defaults(bags=None)  # the rosbag2 folders of `oxygen-train --bags` (oxygen_ros)
    p.add_argument("--episodes", help="episodes .npz collected elsewhere instead of the sim")
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--seeds", type=int, default=120, help="sim seeds per family")
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the expert's first sim seed: a later stage can train on scenes the earlier "
        "ones never saw",
    )
    p.add_argument("--camera-size", type=int, default=128, help="rendered camera pixels")
    p.add_argument("--no-dart", dest="dart", action="store_false", help="clean expert only")
    p.add_argument(
        "--no-grounding-rows",
        dest="grounding_rows",
        action="store_false",
        help="train without the where-is rows (oxygen_core.train.locate)",
    )
    p.add_argument(
        "--ground-steps",
        type=int,
        default=0,
        help="grounding-stage steps (grounding rows only) before co-training",
    )
    p.add_argument(
        "--ground-scenes",
        type=int,
        default=0,
        help="the grounding stage trains on this many still scenes per family (0: on the "
        "expert episodes' steps)",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--val-every-episode", type=int, default=10)
    p.add_argument("--steps", type=int, default=TrainConfig.steps)
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--lr", type=float, default=TrainConfig.lr)
    p.add_argument(
        "--flow-samples",
        type=int,
        default=TrainConfig.flow_samples,
        help="flow-matching (time, noise) draws per chunk and step, from one prefill",
    )
    p.add_argument(
        "--camera-dropout",
        type=float,
        default=TrainConfig.camera_dropout,
        help="share of training samples without their wrist cameras (the base view must "
        "find the target)",
    )
    p.add_argument(
        "--weights-init",
        choices=list(INITS),
        default="training",
        help="starting weights: 'training' (oxygen_core.train.init) or 'random' (the tests' "
        "init_params, which every policy before this flag started from)",
    )
    p.add_argument(
        "--init-from",
        metavar="CHECKPOINT",
        help="continue from a checkpoint oxygen-train wrote: its weights, norm stats and "
        "tokenizer (instead of --weights-init and fitted ones)",
    )
    p.add_argument(
        "--add-episodes",
        nargs="+",
        default=[],
        metavar="FILE",
        help="more episodes .npz to train on (oxygen-train dagger's recovery frames)",
    )
    p.add_argument("--seed", type=int, default=0, help="weights initialisation and training noise")
    return p


def initial_params(cfg: ModelConfig, args: argparse.Namespace, base: Policy | None) -> P.Tree:
    """The runtime parameters a run starts from: `base`'s (--init-from), else
    `--weights-init`'s draw for `--seed`."""
    if base is not None:
        return base.params
    return P.to_runtime(INITS[args.weights_init](cfg, args.seed))


def base_policy(args: argparse.Namespace) -> Policy | None:
    """The checkpoint of --init-from, loaded (None without it)."""
    if not args.init_from:
        return None
    ckpt = Path(args.init_from)
    policy, meta = checkpoints.trained_policy(ckpt)
    if meta["preset"] != args.preset or not checkpoints.same_io(policy.robot, robot_of(args)):
        raise SystemExit(
            f"--init-from {ckpt} was trained as --preset {meta['preset']} --robot "
            f"{meta['robot']}; this run is --preset {args.preset} --robot {args.robot}"
        )
    return policy
