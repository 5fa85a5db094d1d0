"""The data a training run reads: the sim expert's episodes (cached under --work per families,
seeds, camera and image size), still scenes for the grounding stage, held-out evaluation
episodes, the validation split, and the norm stats and tokenizer fitted on the training
episodes only."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
from tqdm import tqdm

from oxygen_core.engine.types import DEFAULT_STREAMS
from oxygen_core.model.checkpoint import TOKENIZER_FILE
from oxygen_core.model.normalize import NormStats
from oxygen_core.model.tokenizer import Tokenizer
from oxygen_core.policy import Policy
from oxygen_core.sim.tasks import FAMILIES
from oxygen_core.train import dataset as D
from oxygen_core.train.records import Dart

SCENE_FIRST_SEED = 10_000  # still scenes: above the expert's seeds, below the evaluation's


def episodes(args: argparse.Namespace, cfg) -> D.Episodes:
    """The training episodes: --episodes or the sim's expert, then any --add-episodes."""
    data = D.Episodes.load(Path(args.episodes)) if args.episodes else expert_episodes(args, cfg)
    added = [D.Episodes.load(Path(f)) for f in args.add_episodes]
    return D.concat([data, *added]) if added else data


def expert_cache(args: argparse.Namespace, cfg) -> Path:
    """The --work file that caches the sim expert's episodes for these families and seeds."""
    first = f"{args.first_seed}+" if args.first_seed else ""
    which = f"{first}{args.seeds}{families_tag(args.families)}"
    name = f"episodes-{which}-{args.camera_size}-{cfg.vision.image_size}-{int(args.dart)}.npz"
    return Path(args.work) / name


def expert_episodes(args: argparse.Namespace, cfg) -> D.Episodes:
    """The sim expert's episodes on seeds first_seed.. for args.families (cached)."""
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    dart = Dart() if args.dart else None
    return cached_sim(expert_cache(args, cfg), seeds, args, cfg, dart, scenes=False)


def families_tag(families: list[str]) -> str:
    """The part of a cache file's name that tells its task families: none for all of
    them (the default, so the caches written before it stay valid), else "-pick+push"; a
    run on other families must not load another run's episodes from the same --work."""
    return "" if tuple(families) == FAMILIES else "-" + "+".join(families)


def cached_sim(
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


def still_scenes(args: argparse.Namespace, cfg) -> D.Episodes:
    """`--ground-scenes` still scenes per family (two arm poses each), cached in --work."""
    size = cfg.vision.image_size
    which = f"{args.ground_scenes}{families_tag(args.families)}"
    cache = Path(args.work) / f"scenes-{which}-{args.camera_size}-{size}.npz"
    seeds = range(SCENE_FIRST_SEED, SCENE_FIRST_SEED + args.ground_scenes)
    return cached_sim(cache, seeds, args, cfg, None, scenes=True)


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
