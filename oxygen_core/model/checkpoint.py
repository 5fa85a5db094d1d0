"""openpi pi0.5 checkpoints: an Orbax PyTree at `<ckpt>/params`, norm stats in assets.

Layout (as openpi writes it): `<ckpt>/params` holds `{"params": tree}` where tree uses
openpi's parameter names with stacked layers; training checkpoints may wrap every leaf
in a `value` key, which is stripped. `<ckpt>/assets/<asset_id>/norm_stats.json` holds the
quantile statistics. Weights cannot be downloaded here, so tests write a checkpoint in
this exact layout at tiny size with `save_checkpoint` and load it back.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

from oxygen_core.config import ModelConfig
from oxygen_core.model import weights as P
from oxygen_core.model.normalize import NormStats, read_norm_stats, write_norm_stats


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


def load_params(ckpt_dir: Path, config: ModelConfig) -> P.Tree:
    """Restore parameters as numpy arrays and check them against the preset's shapes."""
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
    tree = P.unflatten({p: np.asarray(v) for p, v in flat.items()})
    P.check_shapes(tree, config)
    return tree


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
