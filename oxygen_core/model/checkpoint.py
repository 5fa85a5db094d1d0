"""openpi pi0.5 checkpoints: an Orbax PyTree at `<ckpt>/params`, norm stats in assets.

Layout (as openpi writes it): `<ckpt>/params` holds `{"params": tree}` where tree uses
openpi's parameter names with stacked layers; training checkpoints may wrap every leaf
in a `value` key, which is stripped. `<ckpt>/assets/<asset_id>/norm_stats.json` holds the
quantile statistics, where asset_id defaults to the LeRobot repo id (`org/name`, two
folders deep). Weights cannot be downloaded here, so tests write a checkpoint in
this exact layout at tiny size with `save_checkpoint` and load it back.

A checkpoint is only usable with the tokenizer it was trained with: the embedding table
(`PaliGemma/llm/embedder/input_embedding`) has one row per token id. Its row count is
checked against the tokenizer before the preset's shapes, so a wrong pairing fails in
one line naming both sizes and both files rather than in a list of shape mismatches.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

from oxygen_core.config import ModelConfig
from oxygen_core.model import weights as P
from oxygen_core.model.normalize import NormStats, read_norm_stats, write_norm_stats
from oxygen_core.model.tokenizer import Tokenizer

EMBEDDING = f"{P.LLM_PREFIX}/embedder/input_embedding"
# What a checkpoint trained here records about its run (oxygen_core.train.cli); openpi's
# checkpoints have none.
TRAIN_CONFIG = "train_config.json"
TOKENIZER_FILE = "tokenizer.model"  # the tokenizer a checkpoint trained here was made with


def save_checkpoint(
    ckpt_dir: Path, tree: P.Tree, norm_stats: NormStats | None = None, asset_id: str = "robot"
) -> None:
    """Write `tree` (checkpoint layout) and optional norm stats in openpi's layout."""
    ckpt_dir = Path(ckpt_dir).resolve()
    numpy_tree = P.unflatten({p: np.asarray(v) for p, v in P.flatten(tree).items()})
    with ocp.PyTreeCheckpointer() as ckptr:
        ckptr.save(ckpt_dir / "params", {"params": numpy_tree})
    if norm_stats is not None:
        write_norm_stats(ckpt_dir / "assets" / asset_id / "norm_stats.json", norm_stats)


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """One stored parameter's shape and dtype, read without loading it."""

    shape: tuple[int, ...]
    dtype: str


def stored_arrays(ckpt_dir: Path) -> dict[str, ArrayInfo]:
    """Every parameter of `<ckpt_dir>/params` by its path, from Orbax's metadata alone: a
    3 B checkpoint is described without reading its 12 GB."""
    with ocp.PyTreeCheckpointer() as ckptr:
        meta = _metadata(ckptr, _params_dir(ckpt_dir))
    flat = _unwrapped(P.flatten(meta.get("params", meta)))
    return {p: ArrayInfo(tuple(v.shape), str(v.dtype)) for p, v in flat.items()}


def _params_dir(ckpt_dir: Path) -> Path:
    params_dir = Path(ckpt_dir).resolve() / "params"
    if not params_dir.is_dir():
        raise FileNotFoundError(
            f"no Orbax params at {params_dir} (expected <checkpoint_dir>/params)"
        )
    return params_dir


def _metadata(ckptr: ocp.PyTreeCheckpointer, params_dir: Path):
    """The stored tree's metadata (shapes and dtypes), whatever Orbax version wraps it."""
    meta = ckptr.metadata(params_dir)
    return getattr(meta, "item_metadata", meta) or meta


def _unwrapped(flat: dict[str, object]) -> dict[str, object]:
    """Flat parameters without the `value` key openpi's training checkpoints wrap every
    leaf in."""
    if flat and all(p.endswith("/value") for p in flat):
        return {p[: -len("/value")]: v for p, v in flat.items()}
    return flat


def load_params(ckpt_dir: Path, config: ModelConfig, tokenizer: Tokenizer | None = None) -> P.Tree:
    """Restore parameters as numpy arrays and check them against the tokenizer's
    vocabulary (when given) and the preset's shapes."""
    params_dir = _params_dir(ckpt_dir)
    with ocp.PyTreeCheckpointer() as ckptr:
        # Restore as host numpy arrays: a checkpoint saved sharded over a training mesh
        # would otherwise ask for that mesh's devices.
        meta = _metadata(ckptr, params_dir)
        as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), meta)
        restored = ckptr.restore(
            params_dir, args=ocp.args.PyTreeRestore(item=meta, restore_args=as_numpy)
        )
    flat = _unwrapped(P.flatten(restored.get("params", restored)))
    if tokenizer is not None:
        check_vocabulary(flat, tokenizer, params_dir)
    tree = P.unflatten({p: np.asarray(v) for p, v in flat.items()})
    P.check_shapes(tree, config)
    return tree


def trained_horizon(ckpt_dir: Path) -> int | None:
    """The action horizon the checkpoint records (`TRAIN_CONFIG`'s action_horizon), or
    None when it records none: openpi's checkpoints and ones trained here before it was
    recorded. openpi's configs train pi05_aloha at 50, pi05_droid at 15, pi05_libero at 10."""
    return _recorded(Path(ckpt_dir), "action_horizon")


def trained_image_slots(ckpt_dir: Path) -> int | None:
    """The image slots the model was trained with (`TRAIN_CONFIG`'s image_slots), or None
    when the checkpoint records none (openpi's, and ones trained here before it was)."""
    return _recorded(Path(ckpt_dir), "image_slots")


def _recorded(ckpt_dir: Path, key: str) -> int | None:
    """A positive integer `TRAIN_CONFIG` records under `key`; None without one."""
    path = ckpt_dir / TRAIN_CONFIG
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text()).get(key)
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"cannot read {path}: {error}") from None
    if value is not None and not (isinstance(value, int) and value >= 1):
        raise ValueError(f"{path}: {key} {value!r} is not a positive integer")
    return value


def check_horizon(ckpt_dir: Path, config: ModelConfig, robot_name: str) -> None:
    """A checkpoint that records its horizon runs at it: the robot spec's action_horizon
    says what it was trained with, so a different one fails in one line."""
    trained = trained_horizon(ckpt_dir)
    if trained is not None and trained != config.action_horizon:
        raise ValueError(
            f"checkpoint {ckpt_dir} was trained with action_horizon {trained}, but robot "
            f"{robot_name!r} runs the model at {config.action_horizon}: set the robot's "
            f"action_horizon to {trained}"
        )


def check_image_slots(ckpt_dir: Path, config: ModelConfig, robot_name: str) -> None:
    """A checkpoint that records its image slots runs with as many: cameras fill the slots
    in order and a slot past them is masked, so with another count the model would see
    its cameras where it learned others, or none where it learned one (the demo preset
    once gave ALOHA's three cameras two slots and dropped the right wrist's)."""
    trained = trained_image_slots(ckpt_dir)
    if trained is not None and trained != config.num_images:
        raise ValueError(
            f"checkpoint {ckpt_dir} was trained with {trained} image slots, but robot "
            f"{robot_name!r} on preset {config.name!r} runs the model with "
            f"{config.num_images}: run it with the preset and cameras it was trained with"
        )


def check_vocabulary(flat: dict[str, object], tokenizer: Tokenizer, params_dir: Path) -> None:
    """Raise ValueError in one line when the embedding rows and the tokenizer disagree."""
    if EMBEDDING not in flat:
        return  # check_shapes names the missing parameter
    rows = np.shape(flat[EMBEDDING])[0]
    if rows != tokenizer.vocab_size:
        raise ValueError(
            f"checkpoint {params_dir} has a vocabulary of {rows} tokens but tokenizer "
            f"{tokenizer.name} has {tokenizer.vocab_size}: set tokenizer_path to the "
            f"tokenizer the checkpoint was trained with"
        )


NORM_STATS = "norm_stats.json"
# What a checkpoint without norm stats gets: "fail" (the default) refuses it; "identity"
# maps [-1, 1] onto itself, for a checkpoint trained without normalisation.
NORM_STATS_MISSING = ("fail", "identity")


def asset_ids(ckpt_dir: Path) -> list[str]:
    """The asset ids holding norm stats, as openpi names them: the folder of each
    `assets/**/norm_stats.json` relative to `assets/`, so a LeRobot repo id such as
    `physical-intelligence/libero` is one id two levels deep."""
    assets = Path(ckpt_dir) / "assets"
    return sorted(p.parent.relative_to(assets).as_posix() for p in assets.rglob(NORM_STATS))


def find_norm_stats(
    ckpt_dir: Path, asset_id: str | None = None, missing: str = "fail"
) -> NormStats | None:
    """Norm stats of `asset_id`, or of the only asset present.

    Without stats the model's normalised outputs would be commanded as robot units, so
    every doubt is one ValueError line: a named id that holds none (listing those that
    do), several ids and none named, or none at all unless `missing` is "identity" (then
    None: the caller uses identity stats)."""
    ckpt_dir = Path(ckpt_dir)
    ids = asset_ids(ckpt_dir)
    if asset_id:
        if asset_id not in ids:
            raise ValueError(
                f"asset_id {asset_id!r} has no {NORM_STATS} in {ckpt_dir / 'assets'}; "
                f"asset ids there: {ids or 'none'}"
            )
        return read_norm_stats(ckpt_dir / "assets" / asset_id / NORM_STATS)
    if len(ids) > 1:
        raise ValueError(
            f"checkpoint {ckpt_dir} holds norm stats for several asset ids {ids}: set "
            f"asset_id to the one of your robot's data"
        )
    if ids:
        return read_norm_stats(ckpt_dir / "assets" / ids[0] / NORM_STATS)
    if missing not in NORM_STATS_MISSING:
        raise ValueError(f"norm_stats_missing {missing!r} is not one of {NORM_STATS_MISSING}")
    if missing == "identity":
        return None
    raise ValueError(
        f"checkpoint {ckpt_dir} has no assets/<asset_id>/{NORM_STATS}: its normalised "
        f"actions cannot be turned into robot units (set norm_stats_missing: identity only "
        f"for a checkpoint trained without normalisation)"
    )
