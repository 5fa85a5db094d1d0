"""Loss curves as a PNG: training flow and text losses (smoothed) and validation losses."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from oxygen_core.train.trainer import History


def smooth(values: list[float], window: int) -> np.ndarray:
    """Trailing mean over `window` steps (shorter at the start)."""
    x = np.asarray(values, np.float64)
    csum = np.concatenate([[0.0], np.cumsum(x)])
    idx = np.arange(1, len(x) + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def plot_history(history: History, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    steps = [r["step"] for r in history.train]
    for ax, name in zip(axes, ("flow", "text"), strict=True):
        if steps:
            ax.plot(steps, smooth([r[name] for r in history.train], 50), label="train (mean of 50)")
        if history.val:
            ax.plot(
                [r["step"] for r in history.val],
                [r[name] for r in history.val],
                "o-",
                label="validation",
            )
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title(f"{name} loss")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
