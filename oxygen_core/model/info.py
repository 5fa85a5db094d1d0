"""`oxygen-info`: what a pi0.5 preset costs, and what a checkpoint holds, before loading.

Sizing a robot's GPU or the KV pool of the engine needs the parameter count and the KV
bytes of one request, and neither should need the weights: everything here is computed
from `params.param_shapes` (the same table `init_params` and the checkpoint loader use),
so the full-size `pi05` preset is described in milliseconds on any laptop.

A checkpoint is described from Orbax's metadata and its assets alone: the parameters'
count and dtypes, the model preset its shapes match, its action dim, the tokenizer its
embedding needs, each asset id with the sizes of its state and action stats, the action
horizon where it records one, and the robot presets those sizes fit. Deploying starts
here: the asset id to set and the presets to choose from.

    oxygen-info --preset pi05          # readable table
    oxygen-info --preset pi05 --json   # the same figures for scripts
    oxygen-info --checkpoint DIR       # an openpi-layout checkpoint (or one trained here)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from oxygen_core import robot_io
from oxygen_core.config import MODEL_PRESETS, ROBOT_PRESETS, ModelConfig, model_preset
from oxygen_core.model.checkpoint import (
    EMBEDDING,
    TOKENIZER_FILE,
    ArrayInfo,
    asset_ids,
    find_norm_stats,
    stored_arrays,
    trained_horizon,
)
from oxygen_core.model.weights import component_of, param_shapes

# Display order of `params.component_of`'s answers.
COMPONENTS = ("vision", "vlm", "action_expert", "projections")
BF16_BYTES = 2


def describe(config: ModelConfig) -> dict:
    """Parameter counts per component and KV-cache geometry of `config` (bf16 on device)."""
    counts = dict.fromkeys(COMPONENTS, 0)
    for path, shape in param_shapes(config).items():
        counts[component_of(path)] += math.prod(shape)
    total = sum(counts.values())
    kv_per_token = config.kv_bytes_per_token(BF16_BYTES)
    return {
        "preset": config.name,
        "components": counts,
        "total_params": total,
        "weight_bytes_bf16": total * BF16_BYTES,
        "num_images": config.num_images,
        "image_tokens": config.image_tokens,
        "max_token_len": config.max_token_len,
        "prefix_len": config.prefix_len,
        "action_horizon": config.action_horizon,
        "action_dim": config.action_dim,
        "kv_bytes_per_token": kv_per_token,
        "kv_bytes_per_prefix": kv_per_token * config.prefix_len,
    }


def _human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_table(info: dict) -> str:
    """The figures of `describe` as aligned text for a terminal."""
    total, kv_prefix = info["total_params"], info["kv_bytes_per_prefix"]
    per_image = info["image_tokens"] // info["num_images"]
    rows = [(name, f"{n:>15,}  {n / total:6.1%}") for name, n in info["components"].items()]
    rows += [
        ("total", f"{total:>15,}  ({_human_bytes(info['weight_bytes_bf16'])} in bf16)"),
        (
            "prefix tokens",
            f"{info['prefix_len']:>15,}  "
            f"({info['num_images']} x {per_image} image + {info['max_token_len']} prompt)",
        ),
        ("action chunk", f"{info['action_horizon']:>15} x {info['action_dim']}"),
        ("KV per token", f"{info['kv_bytes_per_token']:>15,}  bytes (bf16)"),
        ("KV per prefix", f"{kv_prefix:>15,}  bytes ({_human_bytes(kv_prefix)})"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"pi0.5 preset {info['preset']!r}"]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    return "\n".join(lines)


PALIGEMMA_VOCAB = MODEL_PRESETS["pi05"].vocab_size
# openpi's training configs, for checkpoints that record no horizon (config.py).
OPENPI_HORIZONS = "openpi trains pi05_aloha at 50, pi05_droid at 15, pi05_libero at 10"


def describe_checkpoint(ckpt_dir: Path) -> dict:
    """What `ckpt_dir` holds and what it fits, without loading a weight (module doc)."""
    arrays = stored_arrays(ckpt_dir)
    presets = [name for name, cfg in MODEL_PRESETS.items() if _matches(arrays, cfg)]
    vocab = arrays[EMBEDDING].shape[0] if EMBEDDING in arrays else None
    bias = arrays.get("action_out_proj/bias")
    action_dim = bias.shape[-1] if bias else None
    assets = {}
    for asset in asset_ids(ckpt_dir):
        stats = find_norm_stats(ckpt_dir, asset)
        assets[asset] = {"state": stats.state.q01.shape[-1], "actions": stats.actions.q01.shape[-1]}
    return {
        "checkpoint": str(ckpt_dir),
        "total_params": sum(math.prod(a.shape) for a in arrays.values()),
        "dtypes": sorted({a.dtype for a in arrays.values()}),
        "model_presets": presets,
        "action_dim": action_dim,
        "vocab_size": vocab,
        "tokenizer": _tokenizer_needed(Path(ckpt_dir), vocab),
        "asset_ids": assets,
        "action_horizon": trained_horizon(ckpt_dir),
        "robot_presets": _fitting_robots(presets, assets, action_dim),
    }


def _matches(arrays: dict[str, ArrayInfo], config: ModelConfig) -> bool:
    """The stored shapes are the preset's, the embedding's rows aside (the tokenizer's)."""
    shapes = param_shapes(config)
    if set(shapes) != set(arrays):
        return False
    return all(
        arrays[p].shape == shape or (p == EMBEDDING and arrays[p].shape[1:] == shape[1:])
        for p, shape in shapes.items()
    )


def _tokenizer_needed(ckpt_dir: Path, vocab: int | None) -> str:
    if (ckpt_dir / TOKENIZER_FILE).is_file():
        return f"{ckpt_dir / TOKENIZER_FILE} (its own, {vocab} pieces)"
    if vocab == PALIGEMMA_VOCAB:
        return f"PaliGemma's SentencePiece model ({vocab} pieces): set tokenizer_path"
    return f"a SentencePiece model of {vocab} pieces: set tokenizer_path"


def _fitting_robots(
    presets: list[str], assets: dict[str, dict[str, int]], action_dim: int | None
) -> dict[str, list]:
    """Robot preset -> the asset ids whose stats have its state's size (openpi computes
    them before padding) and its actions' size, or the model's padded action_dim."""
    if not presets:
        return {}
    fits = {}
    for name, robot in ROBOT_PRESETS.items():
        state_dims = robot_io.state_to_model(robot, robot_io.neutral_state(robot)).shape[-1]
        ids = [
            asset
            for asset, sizes in assets.items()
            if sizes["state"] == state_dims and sizes["actions"] in (robot.model_dims, action_dim)
        ]
        if ids:
            fits[name] = ids
    return fits


def format_checkpoint(info: dict) -> str:
    """`describe_checkpoint` as lines for a terminal."""
    horizon = info["action_horizon"]
    assets = info["asset_ids"]
    lines = [
        f"checkpoint {info['checkpoint']}",
        f"  parameters     {info['total_params']:,} ({', '.join(info['dtypes'])})",
        f"  model preset   {', '.join(info['model_presets']) or 'none matches its shapes'}",
        f"  action dim     {info['action_dim']}",
        f"  tokenizer      {info['tokenizer']}",
        f"  action horizon {horizon if horizon else f'not recorded ({OPENPI_HORIZONS})'}",
        "  asset ids      " + ("none: no norm stats (norm_stats_missing)" if not assets else ""),
    ]
    lines += [
        f"    {asset}: state {s['state']}, actions {s['actions']}" for asset, s in assets.items()
    ]
    lines.append("  robot presets  " + ("none fits" if not info["robot_presets"] else ""))
    lines += [
        f"    {robot}: asset_id {' or '.join(ids)}" for robot, ids in info["robot_presets"].items()
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="oxygen-info",
        description="Parameter counts and KV-cache sizes of a pi0.5 preset, or what a "
        "checkpoint holds and which robot presets and asset ids fit it.",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--preset", choices=sorted(MODEL_PRESETS))
    what.add_argument("--checkpoint", type=Path, help="a checkpoint folder (params, assets)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.checkpoint is not None:
        try:
            info = describe_checkpoint(args.checkpoint)
        except (OSError, ValueError) as error:
            print(f"oxygen-info: {error}", file=sys.stderr)
            return 1
        print(json.dumps(info, indent=2) if args.json else format_checkpoint(info))
        return 0
    info = describe(model_preset(args.preset))
    print(json.dumps(info, indent=2) if args.json else format_table(info))
    return 0
