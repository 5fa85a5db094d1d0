"""A short training run of one recipe variant, then its open-loop grounding check.

    python scripts/experiments/train_variants.py --name lr3e-3 --steps 600 --lr 3e-3
    python scripts/experiments/train_variants.py --name img128 --steps 600 --image-size 128 \
        --patch-size 16

Comparing recipes by closed-loop success costs a long run each and says only "0/10";
this trains a variant for a few hundred steps on the same expert data as `oxygen-train`
(any of its data and optimiser flags apply) and prints one JSON row of the grounding
figures (`grounding.check` on held-out seeds) next to the validation losses, appended to
`<work>/../variants/results.jsonl` (<work>: oxygen-train's --work) for a comparison table.
Variants may change what a checkpoint of the `demo` preset could not hold (image size,
patch size), so nothing is exported: a variant worth shipping goes into the preset and
through `oxygen-train`. An experiment harness, not part of the package: it imports
oxygen_core.train and runs from the checkout's venv.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from oxygen_core.config import model_preset, robot_preset
from oxygen_core.sim.seeds import DEV
from oxygen_core.train import cli, grounding, prepare
from oxygen_core.train.trainer import TrainConfig, train


def main(argv: list[str] | None = None) -> None:
    own = argparse.ArgumentParser(prog="train_variants.py", add_help=False)
    own.add_argument("--name", required=True)
    own.add_argument("--image-size", type=int, help="model image pixels (demo: 64)")
    own.add_argument("--patch-size", type=int, help="vision patch pixels (demo: 8)")
    own.add_argument("--text-weight", type=float, default=TrainConfig.text_weight)
    own.add_argument("--reach-repeat", type=int, default=1, help="reach steps drawn N x")
    own.add_argument("--warmup", type=int, default=TrainConfig.warmup, help="lr warm-up steps")
    own.add_argument("--check-steps", type=int, default=512)
    own.add_argument("--check-episodes", type=int, default=8, help="held-out seeds per family")
    own.add_argument("--check-work", default="out/train/check", help="held-out episodes cache")
    args, rest = own.parse_known_args(argv)
    targs = cli._train_parser().parse_args(["--out", "unused", *rest])
    robot = robot_preset(targs.robot)
    cfg = robot.apply(model_preset(targs.preset))
    vision = {"image_size": args.image_size, "patch_size": args.patch_size}
    vision = {k: v for k, v in vision.items() if v is not None}
    cfg = dataclasses.replace(cfg, vision=dataclasses.replace(cfg.vision, **vision))
    data = prepare.episodes(targs, cfg)
    base = cli.base_policy(targs)
    prep = prepare.prepare(cfg, robot, data, targs.val_every_episode, targs.grounding_rows, base)
    train_set = prep.train_set
    if args.reach_repeat > 1:
        train_eps, _ = prepare.split(data, targs.val_every_episode)
        train_set = grounding.oversample_reach(train_set, train_eps.narration, args.reach_repeat)
    tc = cli.train_config(
        targs,
        text_weight=args.text_weight,
        warmup=args.warmup,
        val_every=max(targs.steps // 2, 1),
    )
    params = cli.initial_params(cfg, targs, base)
    work = Path(targs.work).parent / "variants"
    started = time.perf_counter()
    params, history = train(cfg, params, train_set, prep.val_set, tc, work / args.name)
    seeds = range(DEV.start, DEV.start + args.check_episodes)
    held = prepare.held_out_episodes(
        targs.families, seeds, cfg, targs.camera_size, Path(args.check_work)
    )
    result = grounding.check(prep.policy(cfg, robot, params), held, args.check_steps)
    row = {
        "name": args.name,
        "argv": sys.argv[1:] if argv is None else argv,
        "train_s": round(time.perf_counter() - started),
        "val": history.val[-1],
        **{part: g.row() for part, g in result.items()},
        "answers": grounding.answers(prep.policy(cfg, robot, params), held, args.check_steps),
    }
    print(json.dumps(row))
    with open(work / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
