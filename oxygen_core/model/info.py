"""`oxygen-info`: what a pi0.5 preset costs in parameters and KV memory, before loading it.

Sizing a robot's GPU or the KV pool of the engine needs the parameter count and the KV
bytes of one request, and neither should need the weights: everything here is computed
from `params.param_shapes` (the same table `init_params` and the checkpoint loader use),
so the full-size `pi05` preset is described in milliseconds on any laptop.

    oxygen-info --preset pi05          # readable table
    oxygen-info --preset pi05 --json   # the same figures for scripts
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence

from oxygen_core.config import MODEL_PRESETS, ModelConfig, model_preset
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="oxygen-info", description="Parameter counts and KV-cache sizes of a pi0.5 preset."
    )
    parser.add_argument("--preset", required=True, choices=sorted(MODEL_PRESETS))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    info = describe(model_preset(args.preset))
    print(json.dumps(info, indent=2) if args.json else format_table(info))
    return 0
