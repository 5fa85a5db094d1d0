"""The training loop: AdamW on the runtime parameters, validation, resumable state.

Determinism: batch b's indices and its JAX key are pure functions of (seed, step), so a
run resumed from its last saved state continues with exactly the batches and noise an
uninterrupted run would have drawn, and two runs with the same seed and data give the
same weights (on the same machine and XLA build).

State (`<work>/state.npz`): the step, every leaf of (params, optimizer state) in tree
order, and the loss history as JSON; written atomically every `save_every` steps and at
the end. The openpi checkpoint is written separately by the caller from the params.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from oxygen_core.config import ModelConfig
from oxygen_core.image import scale_images
from oxygen_core.model import pi05
from oxygen_core.train.dataset import Arrays
from oxygen_core.train.losses import Batch, losses


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 6000
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 200
    weight_decay: float = 1e-4
    clip_norm: float = 1.0
    text_weight: float = 0.5  # text cross-entropy relative to the flow loss
    flow: bool = True  # False: text rows only (the grounding stage), no action expert
    flow_samples: int = 1  # (time, noise) draws per chunk and step, from one prefill
    camera_dropout: float = 0.0  # share of samples trained without their wrist cameras
    plan_row: bool = False  # the action expert reads the last text row (a two-stage robot)
    seed: int = 0
    val_every: int = 250
    val_batches: int = 4
    save_every: int = 500

    def __post_init__(self) -> None:
        if not 0.0 <= self.camera_dropout <= 1.0:
            raise ValueError(f"camera_dropout {self.camera_dropout} is not a share in [0, 1]")


def to_batch(arrays: Arrays) -> Batch:
    """Host arrays -> a model batch (images scaled exactly as `Policy.prefix_inputs`)."""
    return Batch(
        prefix=pi05.PrefixInputs(
            images=scale_images(arrays.images),
            image_mask=arrays.image_mask,
            tokens=arrays.tokens,
            token_mask=arrays.token_mask,
        ),
        actions=arrays.actions,
        text=arrays.text,
        text_target=arrays.text_target,
    )


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    return np.random.default_rng([seed, step]).integers(0, n, batch_size)


def drop_cameras(arrays: Arrays, p: float, rng: np.random.Generator) -> Arrays:
    """Every camera but the first (the base view) masked out in a random share p of samples.

    The policy moved its chunk four times as much for its wrist camera as for the base
    camera and reached for whatever the wrist showed (docs/experiments/training.md); a sample
    without the wrist view can only be solved by finding the target in the base view. A
    masked slot is left out of attention, as a robot's missing camera is.
    """
    mask = arrays.image_mask.copy()
    mask[rng.random(len(arrays)) < p, 1:] = False
    return dataclasses.replace(arrays, image_mask=mask)


def optimizer(tc: TrainConfig) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, tc.lr, tc.warmup, max(tc.steps, tc.warmup + 1), end_value=tc.lr * 0.05
    )
    return optax.chain(
        optax.clip_by_global_norm(tc.clip_norm),
        optax.adamw(schedule, weight_decay=tc.weight_decay),
    )


def make_step(cfg: ModelConfig, tc: TrainConfig, opt: optax.GradientTransformation) -> Callable:
    """The jitted update: (params, opt_state, batch, key) -> (params, opt_state, losses)."""

    def objective(params, batch, key):
        parts = losses(params, cfg, batch, key, tc.flow, tc.flow_samples, tc.plan_row)
        if not tc.flow:
            return parts["text"], parts
        return parts["flow"] + tc.text_weight * parts["text"], parts

    @jax.jit
    def step(params, opt_state, batch, key):
        grads, parts = jax.grad(objective, has_aux=True)(params, batch, key)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, parts

    return step


def make_eval(cfg: ModelConfig, tc: TrainConfig) -> Callable:
    return jax.jit(
        lambda params, batch, key: losses(params, cfg, batch, key, tc.flow, 1, tc.plan_row)
    )


@dataclasses.dataclass
class History:
    """Loss curves: per-step training losses and periodic validation losses."""

    train: list[dict] = dataclasses.field(default_factory=list)  # {"step", "flow", "text"}
    val: list[dict] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"train": self.train, "val": self.val})

    @classmethod
    def from_json(cls, text: str) -> History:
        data = json.loads(text)
        return cls(train=data["train"], val=data["val"])


def save_state(path: Path, step: int, params, opt_state, history: History) -> None:
    leaves = jax.tree.leaves((params, opt_state))
    arrays = {f"leaf_{i}": np.asarray(x) for i, x in enumerate(leaves)}
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, step=step, history=np.asarray(history.to_json()), **arrays)
    os.replace(tmp, path)


def load_state(path: Path, params, opt_state) -> tuple[int, object, object, History]:
    """Restore into the structure of freshly initialised (params, opt_state)."""
    treedef = jax.tree.structure((params, opt_state))
    with np.load(path) as data:
        leaves = [jnp.asarray(data[f"leaf_{i}"]) for i in range(treedef.num_leaves)]
        step, history = int(data["step"]), History.from_json(str(data["history"]))
    params, opt_state = jax.tree.unflatten(treedef, leaves)
    return step, params, opt_state, history


def validation_loss(evaluate: Callable, params, val: Arrays, tc: TrainConfig) -> dict[str, float]:
    """Mean losses over fixed validation batches with fixed noise (comparable over time)."""
    n = min(len(val), tc.val_batches * tc.batch_size)
    order = np.random.default_rng([tc.seed, 1]).permutation(len(val))[:n]
    totals = {"flow": 0.0, "text": 0.0}
    chunks = [order[i : i + tc.batch_size] for i in range(0, n, tc.batch_size)]
    for k, idx in enumerate(chunks):
        key = jax.random.fold_in(jax.random.key(tc.seed + 1), k)
        parts = evaluate(params, to_batch(val.take(idx)), key)
        for name in totals:
            totals[name] += float(parts[name]) / len(chunks)
    return totals


def train(
    cfg: ModelConfig,
    params,
    train_set: Arrays,
    val_set: Arrays | None,
    tc: TrainConfig,
    work: Path,
    progress: Callable[[int, dict], None] | None = None,
) -> tuple[object, History]:
    """Run (or resume) training to tc.steps; returns the runtime params and the history."""
    work.mkdir(parents=True, exist_ok=True)
    opt = optimizer(tc)
    opt_state = opt.init(params)
    state_path = work / "state.npz"
    start, history = 0, History()
    if state_path.exists():
        start, params, opt_state, history = load_state(state_path, params, opt_state)
    step_fn, evaluate = make_step(cfg, tc, opt), make_eval(cfg, tc)
    base_key = jax.random.key(tc.seed)
    for step in range(start, tc.steps):
        batch = train_set.take(batch_indices(len(train_set), tc.batch_size, tc.seed, step))
        if tc.camera_dropout:
            rng = np.random.default_rng([tc.seed, step, 1])
            batch = drop_cameras(batch, tc.camera_dropout, rng)
        key = jax.random.fold_in(base_key, step)
        params, opt_state, parts = step_fn(params, opt_state, to_batch(batch), key)
        record = {"step": step + 1, **{k: float(v) for k, v in parts.items()}}
        history.train.append(record)
        last = step + 1 == tc.steps
        if val_set is not None and len(val_set) and ((step + 1) % tc.val_every == 0 or last):
            history.val.append({"step": step + 1, **validation_loss(evaluate, params, val_set, tc)})
        if (step + 1) % tc.save_every == 0 or last:
            save_state(state_path, step + 1, params, opt_state, history)
        if progress is not None:
            progress(step + 1, record)
    return params, history
