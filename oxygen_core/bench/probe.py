"""The pool's decode step per bucket, timed alone but under the run's own load.

A row's language time mixes admission, a decode call's fixed cost and k steps at its
bucket; to put each next to its floor the benchmark also times the decode call alone.
`DecodeProbe` runs an OxyGen row's own `kv_pool.decode` executable (same pool shape and
k_max, so nothing new is compiled) on a pool of its own, with k = 0 (the fixed cost:
packing, host copy, pool bookkeeping) and k = k_max: the difference over k_max is one
step. Free rows are masked, not skipped, so an idle pool costs what a full one does.

One bucket is sampled after each interleaved round of frames, so the samples see the same
background load as the rows do; a probe at start-up alone would not, on a shared machine.
"""

from __future__ import annotations

import time

import numpy as np

from oxygen_core.bench.runner import Row
from oxygen_core.engine import kv_pool
from oxygen_core.model import pi05
from oxygen_core.policy import Policy


class DecodeProbe:
    """Times `kv_pool.decode` per bucket with k = 0 and k = k_max, between rounds."""

    def __init__(self, policy: Policy, rows: list[Row], buckets: tuple[int, ...]) -> None:
        oxygen = [r.engine for r in rows if r.mode.startswith("oxygen")]
        self.policy, self.buckets = policy, buckets
        self.samples: dict[int, list[float]] = {b: [] for b in buckets}
        self.idle: dict[int, list[float]] = {b: [] for b in buckets}
        self.rounds = 0
        # A few steps per sample stand well above timer noise and keep each sample cheap.
        self.engine = min(oxygen, key=lambda e: abs(e.k_max - 4)) if oxygen else None
        if self.engine is not None:
            cfg = self.engine.cfg
            dtype = pi05.param_dtype(policy.params)  # as the engines' pools: same executable
            pool = kv_pool.init_pool(
                policy.config, cfg.max_active_requests, self.engine.capacity, dtype
            )
            self.pool = kv_pool.busy(pool)

    def sample(self) -> None:
        """Time the next bucket (cyclic) once."""
        if self.engine is None:
            return
        bucket = self.buckets[self.rounds % len(self.buckets)]
        self.rounds += 1
        k_max = self.engine.k_max
        idle, full = self._seconds(bucket, 0), self._seconds(bucket, k_max)
        self.samples[bucket].append(max(full - idle, 0.0) / k_max)
        self.idle[bucket].append(idle)

    def _seconds(self, bucket: int, k: int) -> float:
        t0 = time.perf_counter()
        self.pool, packed = kv_pool.decode(
            self.policy.params,
            self.policy.config,
            self.pool,
            np.int32(k),
            bucket,
            self.engine.k_max,
        )
        np.asarray(packed)
        return time.perf_counter() - t0

    def steps(self) -> dict[int, float]:
        """Median seconds per decode step of every sampled bucket."""
        return {b: float(np.median(s)) for b, s in self.samples.items() if s}

    def overheads(self) -> dict[int, float]:
        """Median seconds of a decode call that runs no step (k = 0), per bucket."""
        return {b: float(np.median(s)) for b, s in self.idle.items() if s}
