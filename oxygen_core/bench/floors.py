"""Physical floors of each phase: what this machine could do at best, measured with JAX.

A ratio between engines means little when one of them is far from its floor (a slow
decode step inflates OxyGen's gain over isolated execution, docs/DESIGN.md section 5), so the
benchmark prints every phase time next to its floor:

- the machine's matmul throughput (GFLOP/s, in the run's dtype) and matrix-vector weight
  bandwidth (GB/s), measured here: the best of the samples taken at start-up and between
  rounds;
- the model's bytes and FLOPs per phase, counted from the preset's parameter shapes;
- floor = max(bytes / bandwidth, FLOPs / throughput) per phase: a decode or denoise step
  is normally bandwidth-bound (weights read once per step), a prefill compute-bound.

Counts are approximate (norms, softmax and RoPE are left out): a floor, not a model.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import jax.numpy as jnp

from oxygen_core.config import ModelConfig
from oxygen_core.model import weights as P


@dataclasses.dataclass(frozen=True)
class Machine:
    """Best measured matmul GFLOP/s (in the run's dtype) and matrix-vector GB/s."""

    backend: str
    dtype: str
    matmul_gflops: float
    matvec_gbps: float


def _seconds(fn, *args) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


class MachineMeter:
    """Best matmul and matrix-vector throughput seen over the whole run.

    On a machine shared with other work, one measurement at start-up may land in a busy
    moment; sampling again between rounds of frames and keeping the best gives a floor
    that does not depend on when the run started.
    """

    def __init__(
        self, dtype: jnp.dtype, size: int | None = None, rows: int = 8192, start_reps: int = 10
    ) -> None:
        # An accelerator does a 1024^3 matmul in microseconds (launch cost, not throughput)
        # and keeps much of a 64 MB matrix in its L2 cache: 8192 there (a 512 MiB matrix).
        size = size or (1024 if jax.default_backend() == "cpu" else 8192)
        self._matmul = jax.jit(jnp.matmul)
        self._square = jnp.ones((size, size), dtype)
        # Far larger than any cache: its bytes stream from memory on every call.
        self._matrix = jnp.ones((rows, size * 4), dtype)
        self._vector = jnp.ones((1, rows), dtype)
        self.best_matmul_s = self.best_matvec_s = math.inf
        jax.block_until_ready(self._matmul(self._square, self._square))  # compile both
        jax.block_until_ready(self._matmul(self._vector, self._matrix))
        for _ in range(start_reps):
            self.sample()

    def sample(self) -> None:
        matmul_s = _seconds(self._matmul, self._square, self._square)
        matvec_s = _seconds(self._matmul, self._vector, self._matrix)
        self.best_matmul_s = min(self.best_matmul_s, matmul_s)
        self.best_matvec_s = min(self.best_matvec_s, matvec_s)

    def best(self) -> Machine:
        size = self._square.shape[0]
        return Machine(
            backend=jax.default_backend(),
            dtype=str(self._matrix.dtype),
            matmul_gflops=2 * size**3 / self.best_matmul_s / 1e9,
            matvec_gbps=self._matrix.nbytes / self.best_matvec_s / 1e9,
        )


@dataclasses.dataclass(frozen=True)
class ModelCosts:
    """Parameter counts of the parts each phase reads, from the preset's shapes."""

    cfg: ModelConfig
    value_bytes: int  # of a weight or a cached K/V value: 4 for float32, 2 for bfloat16
    vision: int  # SigLIP matmul weights (position embedding excluded: an add)
    vlm_layers: int  # Gemma 2B-like layers of the VLM stream
    embed: int  # token embedding, also the tied LM head
    expert: int  # action expert layers, final norm and the action/time projections

    @classmethod
    def of(cls, cfg: ModelConfig, value_bytes: int = 4) -> ModelCosts:
        counts = {"vision": 0, "vlm_layers": 0, "embed": 0, "expert": 0}
        for path, shape in P.param_shapes(cfg).items():
            n = math.prod(shape)
            part = P.component_of(path)
            if path.endswith("pos_embedding"):
                continue
            if path.endswith("input_embedding"):
                counts["embed"] += n
            elif part == "vision":
                counts["vision"] += n
            elif part == "vlm":
                counts["vlm_layers"] += n
            else:
                counts["expert"] += n
        return cls(cfg, value_bytes, **counts)

    def _attention_flops(self, queries: int, keys: int) -> int:
        """Q.K and P.V of all layers (2 matmuls of 2 FLOPs per multiply-add)."""
        v = self.cfg.vlm
        return 4 * queries * keys * v.num_heads * v.head_dim * v.depth

    def prefill_flops(self) -> int:
        cfg, vis = self.cfg, self.cfg.vision
        tokens = vis.num_tokens * cfg.num_images  # every slot is encoded, masked or not
        siglip = 2 * self.vision * tokens
        siglip += 4 * vis.num_tokens**2 * vis.width * vis.depth * cfg.num_images
        return (
            siglip
            + 2 * self.vlm_layers * cfg.prefix_len
            + self._attention_flops(cfg.prefix_len, cfg.prefix_len)
        )

    def decode_step(self, bucket: int, capacity: int) -> tuple[int, int]:
        """(bytes, FLOPs) of one decode step over `bucket` rows of `capacity` slots."""
        weights = self.vlm_layers + self.embed
        kv = bucket * capacity * self.cfg.kv_bytes_per_token(self.value_bytes)
        flops = 2 * weights * bucket + self._attention_flops(bucket, capacity)
        return weights * self.value_bytes + kv, flops

    def denoise_step(self) -> tuple[int, int]:
        """(bytes, FLOPs) of one Euler step: expert weights plus the prefix K/V it reads."""
        cfg = self.cfg
        kv = cfg.prefix_len * cfg.kv_bytes_per_token(self.value_bytes)
        h = cfg.action_horizon
        flops = 2 * self.expert * h + self._attention_flops(h, cfg.prefix_len + h)
        return self.expert * self.value_bytes + kv, flops


@dataclasses.dataclass(frozen=True)
class Floors:
    """Phase floors in seconds for one model on one machine."""

    machine: Machine
    costs: ModelCosts

    def _seconds(self, nbytes: int, flops: int) -> float:
        m = self.machine
        return max(nbytes / (m.matvec_gbps * 1e9), flops / (m.matmul_gflops * 1e9))

    def prefill_s(self) -> float:
        return self._seconds(0, self.costs.prefill_flops())

    def denoise_s(self, steps: int) -> float:
        return steps * self._seconds(*self.costs.denoise_step())

    def decode_step_s(self, bucket: int, capacity: int) -> float:
        return self._seconds(*self.costs.decode_step(bucket, capacity))
