"""`oxygen-train` and `oxygen-eval in-process`: a pi0.5 policy from expert data, and its check.

    oxygen-train --out data/policy/sim_demo            # sim episodes -> checkpoint
    oxygen-train --out DIR --episodes FILE.npz         # episodes collected elsewhere (bags)
    oxygen-train --recipe config/train/sim_demo.yaml   # the shipped policy's stages, averaged
    oxygen-eval in-process --checkpoint data/policy/sim_demo --episodes 50
    oxygen-eval in-process --checkpoint data/policy/sim_demo --open-loop 256   # grounding check

`oxygen-train` writes, under --out, an openpi-layout checkpoint (`params/`, Orbax, and
`assets/<robot>/norm_stats.json`), the trained SentencePiece model `tokenizer.model`,
`train_config.json` (preset, robot, data and training settings, final losses) and
`loss.png`. Its resumable state and the collected episodes stay under --work, so a rerun
with the same arguments resumes where it stopped and does not regenerate data. With
--recipe, oxygen_core.train.recipe (the command's entry point) runs a recipe file's stages,
each through `run_training` as one command here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from oxygen_core.config import ROBOT_PRESETS, ModelConfig, RobotConfig, model_preset, robot_preset
from oxygen_core.engine.engine import make_engine
from oxygen_core.engine.types import DEFAULT_STREAMS, EngineConfig, StreamConfig
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import TOKENIZER_FILE, TRAIN_CONFIG, save_checkpoint
from oxygen_core.model.normalize import NormStats
from oxygen_core.model.tokenizer import Tokenizer
from oxygen_core.policy import Policy, load_policy
from oxygen_core.robot_spec import declaration, declared_robot
from oxygen_core.safety.gate import POLICIES
from oxygen_core.safety.limits import JointLimits, limits_from_files
from oxygen_core.sim import seeds as S
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.baselines import NAMES as BASELINES
from oxygen_core.sim.executor import CONTROLLERS, DEFAULT_CONTROLLER
from oxygen_core.sim.success import SuccessRate
from oxygen_core.sim.tasks import FAMILIES
from oxygen_core.train import dataset as D
from oxygen_core.train import grounding, locate, rollout
from oxygen_core.train.baseline_actor import BaselineActor
from oxygen_core.train.curves import plot_history
from oxygen_core.train.init import training_params
from oxygen_core.train.records import Dart
from oxygen_core.train.trainer import TrainConfig, train

SCENE_FIRST_SEED = 10_000  # still scenes: above the expert's seeds, below the evaluation's
DEFAULT_CAMERA = 64  # a baseline's camera pixels without a checkpoint (the shipped policy's)
DEFAULT_HORIZON = 10  # a baseline's chunk rows without a checkpoint (the demo preset's H)


def _episodes(args: argparse.Namespace, cfg) -> D.Episodes:
    """The training episodes: --episodes or the sim's expert, then any --add-episodes."""
    data = D.Episodes.load(Path(args.episodes)) if args.episodes else _expert(args, cfg)
    added = [D.Episodes.load(Path(f)) for f in args.add_episodes]
    return D.concat([data, *added]) if added else data


def expert_cache(args: argparse.Namespace, cfg) -> Path:
    """The --work file that caches the sim expert's episodes for these families and seeds."""
    first = f"{args.first_seed}+" if args.first_seed else ""
    which = f"{first}{args.seeds}{families_tag(args.families)}"
    name = f"episodes-{which}-{args.camera_size}-{cfg.vision.image_size}-{int(args.dart)}.npz"
    return Path(args.work) / name


def _expert(args: argparse.Namespace, cfg) -> D.Episodes:
    """The sim expert's episodes on seeds first_seed.. for args.families (cached)."""
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    dart = Dart() if args.dart else None
    return _cached_sim(expert_cache(args, cfg), seeds, args, cfg, dart, scenes=False)


def families_tag(families: list[str]) -> str:
    """The part of a cache file's name that tells its task families: none for all of
    them (the default, so the caches written before it stay valid), else "-pick+push"; a
    run on other families must not load another run's episodes from the same --work."""
    return "" if tuple(families) == FAMILIES else "-" + "+".join(families)


def _cached_sim(
    cache: Path, seeds: range, args: argparse.Namespace, cfg, dart: Dart | None, scenes: bool
) -> D.Episodes:
    """`generate_sim` for args.families x seeds, with a progress bar, cached at `cache`."""
    if cache.exists():
        return D.Episodes.load(cache)
    desc = "still scenes" if scenes else "expert episodes"
    bar = tqdm(total=len(args.families) * len(seeds), desc=desc, unit="ep")
    data = D.generate_sim(
        args.families,
        seeds,
        cfg,
        args.camera_size,
        dart,
        workers=args.workers,
        progress=lambda done, total: bar.update(done - bar.n),
        scenes=scenes,
    )
    bar.close()
    cache.parent.mkdir(parents=True, exist_ok=True)
    data.save(cache)
    return data


def split(data: D.Episodes, every: int) -> tuple[D.Episodes, D.Episodes]:
    """Whole episodes held out for validation: every `every`-th episode in order. Fewer
    than `every` episodes hold none out: a one-line error says so."""
    names = list(dict.fromkeys(data.episode))
    if len(names) < every:
        raise ValueError(
            f"{len(names)} episodes hold none out for validation at --val-every-episode "
            f"{every}: lower it or give more episodes"
        )
    held = {n for i, n in enumerate(names) if i % every == every - 1}
    val = np.asarray([e in held for e in data.episode])
    return data.select(~val), data.select(val)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What training reads, fitted on the training episodes only."""

    train_set: D.Arrays
    val_set: D.Arrays
    tokenizer_bytes: bytes
    norm: NormStats
    train_episodes: int

    def policy(self, cfg, robot, params) -> Policy:
        """A policy with these norm stats and tokenizer around `params`."""
        return Policy(
            cfg, robot, params, Tokenizer(self.tokenizer_bytes, TOKENIZER_FILE), self.norm
        )


def prepare(
    cfg,
    robot,
    data: D.Episodes,
    val_every_episode: int,
    grounding_rows: bool = True,
    base: Policy | None = None,
) -> Prepared:
    """Episodes -> held-out split, norm stats, the trained tokenizer, tokenized arrays
    (without the `locate` rows when `grounding_rows` is False). With `base` (a checkpoint
    training continues from), its norm stats and tokenizer instead of fitted ones: its
    weights know only its vocabulary and its action scale."""
    if not grounding_rows:
        data = dataclasses.replace(data, grounding=data.grounding[:, :0])
    train_eps, val_eps = split(data, val_every_episode)
    if base is None:
        norm = D.norm_stats(train_eps, robot)
        tokenizer_bytes = D.train_tokenizer(D.corpus(train_eps, robot, norm, DEFAULT_STREAMS))
    else:
        norm, tokenizer_bytes = base.norm, base.tokenizer.model_proto
    preprocess = Policy(cfg, robot, {}, Tokenizer(tokenizer_bytes, TOKENIZER_FILE), norm)
    text_len = D.text_length(preprocess.tokenizer, data, DEFAULT_STREAMS)
    return Prepared(
        D.tokenize(train_eps, preprocess, text_len=text_len),
        D.tokenize(val_eps, preprocess, text_len=text_len),
        tokenizer_bytes,
        norm,
        len(set(train_eps.episode)),
    )


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
    if args.first_seed < 0 or args.first_seed + args.seeds > SCENE_FIRST_SEED:
        parser.error(
            f"expert seeds must lie in 0..{SCENE_FIRST_SEED - 1} (still scenes and "
            "evaluation seeds start there)"
        )
    if not args.out and not args.episodes_only:
        parser.error("--out is required (unless --episodes-only)")
    scenes = range(SCENE_FIRST_SEED, SCENE_FIRST_SEED + args.ground_scenes)
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
        cache = expert_cache(args, cfg)
        if not cache.exists():
            _expert(args, cfg)
        print(cache)
        return
    out, work = Path(args.out), Path(args.work)
    data = _episodes(args, cfg)
    base = base_policy(args)
    prep = prepare(cfg, robot, data, args.val_every_episode, args.grounding_rows, base)
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
    write_checkpoint(out, params, norm, robot.name)
    plot_history(history, out / "loss.png")
    summary = {
        **run_fields(args),
        "action_horizon": cfg.action_horizon,  # what the node checks it is run at
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
    return {
        "preset": args.preset,
        "robot": args.robot,
        "robot_declaration": None if robot.name in ROBOT_PRESETS else declaration(robot),
        "camera_size": args.camera_size,
        "families": list(args.families),
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "dart": args.dart,
        "grounding_rows": args.grounding_rows,
        "ground_steps": args.ground_steps,
        "ground_scenes": args.ground_scenes,
        "weights_init": args.weights_init,
        "init_from": args.init_from,
        "episodes": args.episodes,
        "add_episodes": args.add_episodes,
    }


def ground(cfg, robot, params, prep: Prepared, args: argparse.Namespace, work: Path):
    """The grounding stage before co-training: `--ground-steps` steps on the grounding
    rows alone (no action expert, no stream rows), resumable under <work>/ground.

    pi0.5 starts from a VLM that already localises objects; this stage gives the small
    VLM that skill from the same episodes before the flow loss competes for it."""
    train_set = prep.train_set.last_rows(locate.COUNT)
    if args.ground_scenes:
        scenes = _scenes(args, cfg)
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


def _scenes(args: argparse.Namespace, cfg) -> D.Episodes:
    """`--ground-scenes` still scenes per family (two arm poses each), cached in --work."""
    size = cfg.vision.image_size
    which = f"{args.ground_scenes}{families_tag(args.families)}"
    cache = Path(args.work) / f"scenes-{which}-{args.camera_size}-{size}.npz"
    seeds = range(SCENE_FIRST_SEED, SCENE_FIRST_SEED + args.ground_scenes)
    return _cached_sim(cache, seeds, args, cfg, None, scenes=True)


def write_checkpoint(out: Path, params: P.Tree, norm: NormStats, asset_id: str) -> None:
    """Runtime params -> openpi's layout: `<out>/params` and `assets/<id>/norm_stats.json`."""
    save_checkpoint(out, P.to_checkpoint(params), norm, asset_id=asset_id)


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
        "runs every stage of a recipe (config/train/) and their average instead",
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


def trained_policy(ckpt: Path) -> tuple[Policy, dict]:
    """A checkpoint written by oxygen-train, loaded with the preset and robot it was trained
    as, and its train_config.json."""
    meta = json.loads((ckpt / TRAIN_CONFIG).read_text())
    robot = checkpoint_robot(meta, ckpt)
    return load_policy(meta["preset"], robot, ckpt, ckpt / TOKENIZER_FILE), meta


def checkpoint_robot(meta: dict, ckpt: Path) -> RobotConfig:
    """The robot a checkpoint was trained as: its recorded declaration (a robot declared
    as data, e.g. config/metaworld.yaml's), else the preset it names."""
    declared = meta.get("robot_declaration")
    if declared is None:
        return robot_preset(meta["robot"])
    return declared_robot(meta["robot"], declared, f"{ckpt / TRAIN_CONFIG} robot_declaration")


def same_io(trained: RobotConfig, robot: RobotConfig) -> bool:
    """Whether a checkpoint of robot `trained` can continue as `robot`: the same cameras,
    spaces and dims; only the plan stage may differ (its answer is a text row the
    checkpoint was co-trained on)."""
    strip = lambda r: dataclasses.replace(r, name="", plan_prompt=None)  # noqa: E731
    return strip(trained) == strip(robot)


def base_policy(args: argparse.Namespace) -> Policy | None:
    """The checkpoint of --init-from, loaded (None without it)."""
    if not args.init_from:
        return None
    ckpt = Path(args.init_from)
    policy, meta = trained_policy(ckpt)
    if meta["preset"] != args.preset or not same_io(policy.robot, robot_of(args)):
        raise SystemExit(
            f"--init-from {ckpt} was trained as --preset {meta['preset']} --robot "
            f"{meta['robot']}; this run is --preset {args.preset} --robot {args.robot}"
        )
    return policy


def eval_main(argv: list[str] | None = None) -> None:
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
        _report(args, seeds, {args.baseline: closed_loop(args, actor, seeds, camera)})
        return
    policy, meta = trained_policy(Path(args.checkpoint))
    if args.true_plan and policy.robot.plan_prompt is None:
        raise SystemExit(f"--true-plan: robot {policy.robot.name!r} has no plan stage")
    camera = args.camera_size or meta["camera_size"]
    if args.open_loop:
        held_out = held_out_episodes(args.families, seeds, policy.config, camera, Path(args.work))
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
    _report(args, seeds, runs)


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
        _gate_limits(args),
        "slow" if args.gate == "off" else args.gate,
        args.controller,
    )
    bar.close()
    return outcomes


def _report(args: argparse.Namespace, seeds: range, runs: dict[str, list[rollout.Outcome]]) -> None:
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


def held_out_episodes(
    families: list[str], seeds: range, config, camera: int, work: Path
) -> D.Episodes:
    """Clean expert episodes on evaluation seeds, cached under `work` per image size."""
    size = config.vision.image_size
    which = f"{len(seeds)}-{seeds.start}{families_tag(families)}"
    cache = work / f"held-out-{which}-{camera}-{size}.npz"
    if cache.exists():
        return D.Episodes.load(cache)
    data = D.generate_sim(families, seeds, config, camera, None, workers=2)
    cache.parent.mkdir(parents=True, exist_ok=True)
    data.save(cache)
    return data


def _gate_limits(args: argparse.Namespace) -> JointLimits | None:
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
