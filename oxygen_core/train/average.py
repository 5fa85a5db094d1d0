"""`oxygen-train average`: one checkpoint whose weights are the mean of several that
continued the same parent.

Stages continued from one checkpoint on different scenes land near each other in weight
space, and their mean (a "model soup": Wortsman et al. 2022) is often better than any one
of them: each stage's last steps fit its own 1000 scenes, and the mean keeps what they
share. Here two stages continued from the sixth (seeds 4000-4999; seeds 5000-5799 plus
800 more push scenes) succeeded in 209 and 213 of 300 closed-loop episodes, their mean in
221 (docs/experiments/training.md).

The mean is only meaningful for checkpoints of one lineage, which the loader cannot tell
apart from any other checkpoint of the same shapes; so the inputs must share the preset,
robot, camera size, tokenizer and norm stats (everything `--init-from` passes on), and
the averaged checkpoint carries them unchanged.

    oxygen-train average --out out/policy/mean out/recipe/sim_demo/seventh/checkpoint \\
        out/recipe/sim_demo/eighth/checkpoint

The recipe of data/policy/sim_before_contacts (config/train/sim_before_contacts.yaml)
ends with this average.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jax
import numpy as np

from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import TOKENIZER_FILE, TRAIN_CONFIG
from oxygen_core.model.normalize import NormStats
from oxygen_core.policy import Policy
from oxygen_core.train.checkpoints import trained_policy, write_checkpoint

# train_config.json fields the inputs must share (robot_declaration: a robot declared as data)
SHARED = ("preset", "robot", "robot_declaration", "camera_size")


def check_lineage(policies: list[Policy], metas: list[dict], paths: list[Path]) -> None:
    """Raise ValueError naming the first checkpoint that differs from the first in what a
    continued stage inherits (its weights alone may differ)."""
    first = policies[0]
    for policy, meta, path in zip(policies[1:], metas[1:], paths[1:], strict=True):
        differs = [k for k in SHARED if meta.get(k) != metas[0].get(k)]
        if policy.tokenizer.model_proto != first.tokenizer.model_proto:
            differs.append("tokenizer")
        if not same_norm_stats(policy.norm, first.norm):
            differs.append("norm stats")
        if differs:
            raise ValueError(
                f"{path} and {paths[0]} differ in {', '.join(differs)}: only checkpoints "
                "continued from one parent (oxygen-train --init-from) can be averaged"
            )


def same_norm_stats(a: NormStats, b: NormStats) -> bool:
    """Equal arrays field by field (NormStats holds arrays: `==` has no single truth)."""
    pairs = [(a.state, b.state), (a.actions, b.actions)]
    return all(
        np.array_equal(getattr(x, f.name), getattr(y, f.name))
        for x, y in pairs
        for f in dataclasses.fields(x)
    )


def mean_params(trees: list[P.Tree]) -> P.Tree:
    """The element-wise mean of parameter trees of one structure, in float32."""
    return jax.tree.map(lambda *xs: np.mean(np.stack(xs), axis=0, dtype=np.float32), *trees)


def average(paths: list[Path], out: Path, recipe: dict | None = None) -> None:
    """Write the mean of `paths` to `out` as oxygen-train writes a checkpoint, with a
    train_config.json of the shared fields, each input's own config and `recipe` (path,
    stage, hash) when a recipe runs it."""
    loaded = [trained_policy(path) for path in paths]
    policies, metas = [p for p, _ in loaded], [m for _, m in loaded]
    check_lineage(policies, metas, paths)
    first = policies[0]
    out.mkdir(parents=True, exist_ok=True)
    write_checkpoint(out, mean_params([p.params for p in policies]), first.norm, first.robot.name)
    (out / TOKENIZER_FILE).write_bytes(first.tokenizer.model_proto)
    inputs = zip(paths, metas, strict=True)
    summary = {
        **{k: metas[0].get(k) for k in SHARED},
        "action_horizon": first.config.action_horizon,
        "image_slots": first.config.num_images,
        "average_of": [{"checkpoint": str(p), "train_config": m} for p, m in inputs],
        "recipe": recipe,
    }
    (out / TRAIN_CONFIG).write_text(json.dumps(summary, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if len(args.checkpoints) < 2:
        raise SystemExit("oxygen-train average needs two checkpoints or more")
    run([Path(c) for c in args.checkpoints], Path(args.out))


def run(paths: list[Path], out: Path, recipe: dict | None = None) -> None:
    """`average` after the checks that exit with one line: oxygen-train average's run
    (two checkpoints or more) and a recipe's last step (one stage alone is copied)."""
    started = time.perf_counter()
    if out.resolve() in {p.resolve() for p in paths}:
        raise SystemExit(f"--out {out} is one of the checkpoints it averages")
    try:
        average(paths, out, recipe)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    seconds = time.perf_counter() - started
    print(f"wrote {out}: the mean of {len(paths)} checkpoints ({seconds:.1f} s)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oxygen-train average", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument(
        "checkpoints", nargs="+", help="oxygen-train checkpoints continued from one parent"
    )
    return p
