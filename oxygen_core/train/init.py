"""The parameters a policy trained from scratch starts from.

`weights.init_params` draws weights for tests and benchmarks: every norm scale and every
adaRMS bias random, so that no path of the model is a no-op and equivalence tests exercise
all of them. That is a poor start for training. In it the vision tower's LayerNorms scale
by +-0.1 with random signs (image tokens enter the VLM ten times smaller than text), its
position embedding is unit noise as large as the patch content (where a patch is must be
learned from scratch, patch by patch), and the action expert's adaRMS scales and gates are
unit noise. `training_params` keeps those weights' matrices and resets the rest the way the
upstream code initialises them for training:

- SigLIP (big_vision): LayerNorm scale 1 and bias 0, every Dense bias 0, and the 2-D sine-
  cosine position embedding (big_vision's `sincos2d`, still a trained parameter), so that
  a patch's row and column are readable from the first step: "which cell is the red ball
  in" is what the policy must learn to answer from the base camera;
- Gemma (openpi): RMSNorm scales 0 (the norm multiplies by 1 + scale), and the adaRMS
  modulation Dense zero (scale, shift and gate 0: each action expert block starts as the
  identity and opens as it learns, as in DiT's adaLN-Zero).
"""

from __future__ import annotations

import numpy as np

from oxygen_core.config import ModelConfig
from oxygen_core.model import weights as P

POSITION = "PaliGemma/img/pos_embedding"


def training_params(config: ModelConfig, seed: int = 0) -> P.Tree:
    """Checkpoint-layout float32 parameters for a training run from scratch."""
    flat = P.flatten(P.init_params(config, seed))
    for path, value in flat.items():
        flat[path] = _reset(path, value, config)
    return P.unflatten(flat)


def _reset(path: str, value: np.ndarray, config: ModelConfig) -> np.ndarray:
    if path == POSITION:
        grid = config.vision.image_size // config.vision.patch_size
        return sincos_2d(grid, value.shape[-1])[None].astype(np.float32)
    if path.startswith("PaliGemma/img/"):
        if path.endswith("/scale"):
            return np.ones_like(value)
        if path.endswith("/bias"):
            return np.zeros_like(value)
    if path.startswith("PaliGemma/llm/") and "/Dense_0/" in path:
        return np.zeros_like(value)  # adaRMS modulation: scale, shift, gate
    if path.startswith("PaliGemma/llm/") and path.endswith("/scale"):
        return np.zeros_like(value)  # RMSNorm: x * (1 + scale)
    return value


def sincos_2d(grid: int, width: int, temperature: float = 10_000.0) -> np.ndarray:
    """[grid * grid, width] embedding of a patch's (row, column), patches in row-major
    order (as `siglip.patchify` lays them out): sines and cosines of the row, then of the
    column, at width / 4 geometric frequencies each."""
    if width % 4:
        raise ValueError(f"sincos_2d needs a width divisible by 4, got {width}")
    rows, cols = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")
    omega = 1.0 / temperature ** (np.arange(width // 4) / (width // 4))
    y = rows.reshape(-1, 1) * omega[None]
    x = cols.reshape(-1, 1) * omega[None]
    return np.concatenate([np.sin(y), np.cos(y), np.sin(x), np.cos(x)], axis=1)
