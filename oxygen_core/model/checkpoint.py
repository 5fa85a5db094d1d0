"""openpi pi0.5 checkpoints: an Orbax PyTree at `<ckpt>/params`, norm stats in assets.

Layout (as openpi writes it): `<ckpt>/params` holds `{"params": tree}` where tree uses
openpi's parameter names with stacked layers; training checkpoints may wrap every leaf
in a `value` key, which is stripped. `<ckpt>/assets/<asset_id>/norm_stats.json` holds the
quantile statistics. Weights cannot be downloaded here, so tests write a checkpoint in
this exact layout at tiny size with `save_checkpoint` and load it back.

A checkpoint is only usable with the tokenizer it was trained with: the embedding table
(`PaliGemma/llm/embedder/input_embedding`) has one row per token id. Its row count is
checked against the tokenizer before the preset's shapes, so a wrong pairing fails in
one line naming both sizes and both files rather than in a list of shape mismatches.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

from oxygen_core.config import ModelConfig
from oxygen_core.model import weights as P
from oxygen_core.model.normalize import NormStats, read_norm_stats, write_norm_stats
from oxygen_core.model.tokenizer import Tokenizer

EMBEDDING = f"{P.LLM_PREFIX}/embedder/input_embedding"


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


def load_params(ckpt_dir: Path, config: ModelConfig, tokenizer: Tokenizer | None = None) -> P.Tree:
    """Restore parameters as numpy arrays and check them against the tokenizer's
    vocabulary (when given) and the preset's shapes."""
    params_dir = Path(ckpt_dir).resolve() / "params"
    if not params_dir.is_dir():
        raise FileNotFoundError(
            f"no Orbax params at {params_dir} (expected <checkpoint_dir>/params)"
        )
    with ocp.PyTreeCheckpointer() as ckptr:
        # Restore as host numpy arrays: a checkpoint saved sharded over a training mesh
        # would otherwise ask for that mesh's devices.
        meta = ckptr.metadata(params_dir)
        meta = getattr(meta, "item_metadata", meta) or meta
        as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), meta)
        restored = ckptr.restore(
            params_dir, args=ocp.args.PyTreeRestore(item=meta, restore_args=as_numpy)
        )
    tree = restored.get("params", restored)
    flat = P.flatten(tree)
    if flat and all(p.endswith("/value") for p in flat):
        flat = {p[: -len("/value")]: v for p, v in flat.items()}
    if tokenizer is not None:
        check_vocabulary(flat, tokenizer, params_dir)
    tree = P.unflatten({p: np.asarray(v) for p, v in flat.items()})
    P.check_shapes(tree, config)
    return tree


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


def find_norm_stats(ckpt_dir: Path, asset_id: str | None = None) -> NormStats | None:
    """Norm stats of `asset_id`, or of the only asset present; None when there are none."""
    assets = Path(ckpt_dir) / "assets"
    if asset_id is not None:
        return read_norm_stats(assets / asset_id / "norm_stats.json")
    found = sorted(assets.glob("*/norm_stats.json"))
    if len(found) > 1:
        names = [f.parent.name for f in found]
        raise ValueError(f"several norm stats in {assets} ({names}); choose one with asset_id")
    return read_norm_stats(found[0]) if found else None
