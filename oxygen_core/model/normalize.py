"""Quantile normalisation of state and actions, as pi0.5 checkpoints are trained.

openpi stores per-dimension statistics in `assets/<id>/norm_stats.json`; pi0.5 maps the
[q01, q99] range of each dimension onto [-1, 1]. Statistics may cover more dimensions
than a robot uses (padded to the model's 32); only the leading ones apply.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

EPS = 1e-6  # openpi's guard against a zero quantile range; kept for compatibility


@dataclasses.dataclass(frozen=True)
class Stats:
    q01: np.ndarray
    q99: np.ndarray
    mean: np.ndarray
    std: np.ndarray

    def normalize(self, x: np.ndarray) -> np.ndarray:
        q01, q99 = self._fit(x)
        return ((x - q01) / (q99 - q01 + EPS) * 2.0 - 1.0).astype(np.float32)

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        q01, q99 = self._fit(x)
        return ((x + 1.0) / 2.0 * (q99 - q01 + EPS) + q01).astype(np.float32)

    def _fit(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dim = x.shape[-1]
        if dim > self.q01.shape[-1]:
            raise ValueError(f"norm stats cover {self.q01.shape[-1]} dims, data has {dim}")
        return self.q01[..., :dim], self.q99[..., :dim]


@dataclasses.dataclass(frozen=True)
class NormStats:
    state: Stats
    actions: Stats


def identity_stats(dim: int) -> Stats:
    """Stats under which [-1, 1] maps to itself (random-weight models, demos)."""
    ones = np.ones(dim, np.float32)
    return Stats(q01=-ones, q99=ones - EPS, mean=0 * ones, std=ones)


def _stats_from_json(entry: dict) -> Stats:
    arrays = {k: np.asarray(entry[k], np.float32) for k in ("q01", "q99", "mean", "std")}
    return Stats(**arrays)


def read_norm_stats(path: Path) -> NormStats:
    """Read openpi's norm_stats.json ({"norm_stats": {"state": ..., "actions": ...}})."""
    try:
        data = json.loads(Path(path).read_text())["norm_stats"]
        return NormStats(
            state=_stats_from_json(data["state"]), actions=_stats_from_json(data["actions"])
        )
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise ValueError(f"cannot read norm stats from {path}: {err!r}") from err


def write_norm_stats(path: Path, stats: NormStats) -> None:
    def entry(s: Stats) -> dict:
        return {k: getattr(s, k).tolist() for k in ("mean", "std", "q01", "q99")}

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"norm_stats": {"state": entry(stats.state), "actions": entry(stats.actions)}})
    )
