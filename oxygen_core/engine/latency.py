"""Per-frame step budget: how many language tokens fit in the time a frame has left.

The paper fixes k offline. Here `steps_per_frame="auto"` asks this model, every frame,
for the largest k whose predicted language time fits the time left: the decode call's
fixed cost at the
frame's bucket, one stream-prompt extension per new request, and k decode steps at that
bucket. All three are measured at warm-up; step times, which dominate, are refined
online from each frame's language time with an exponential moving average, so the budget
follows load changes (more rows, a slower GPU clock) without recalibration. Admission
and call costs stay at their warm-up values: separating them online would need a host
sync mid-phase. Which k to ask for within that limit is `StepBudget`'s choice, below.

A step estimate never drops below MIN_STEP_S: a difference of two noisy timings can come
out at zero or below on a tiny model, and a free step would make every k look affordable
exactly when the deadline needs protecting.

Predictions carry a relative `slack` (default 10%): the step estimate is refined mostly
from k=1 frames and then extrapolated to the k of a frame that drains a backlog, so its
error grows with k. Measured on `small` (BENCHMARKS.md, k=auto): without slack, such frames
planned to the budget's edge ended up to 21 ms (8%) past a 0.5 s budget.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from oxygen_core.engine.scheduler import Admission

MIN_STEP_S = 1e-6


class LatencyModel:
    def __init__(self, alpha: float = 0.2, slack: float = 0.1) -> None:
        self.alpha = alpha
        self.slack = slack
        self.step_s: dict[int, float] = {}
        self.call_s: dict[int, float] = {}  # fixed cost of a decode call (dispatch, host copy)
        self.admit_s = 0.0

    def calibrate(self, bucket: int, step_s: float, call_s: float) -> None:
        """Warm-up timings of one bucket (replacing any earlier estimate)."""
        self.step_s[bucket] = max(step_s, MIN_STEP_S)
        self.call_s[bucket] = max(call_s, 0.0)

    def observe_step(self, bucket: int, seconds_per_step: float) -> None:
        seconds_per_step = max(seconds_per_step, MIN_STEP_S)
        old = self.step_s.get(bucket)
        self.step_s[bucket] = (
            seconds_per_step if old is None else old + self.alpha * (seconds_per_step - old)
        )

    def fixed_s(self, bucket: int, n_admit: int) -> float:
        """Language time that does not grow with k: the call and the admissions."""
        return self.call_s.get(bucket, 0.0) + n_admit * self.admit_s

    def choose_k(self, time_left_s: float, bucket: int, n_admit: int, k_max: int) -> int:
        """Largest k in [0, k_max] with
        (call + n_admit * admit + k * step(bucket)) * (1 + slack) <= time_left_s."""
        if bucket not in self.step_s:
            raise ValueError(f"no decode timing for bucket {bucket}; warm it up first")
        spare = time_left_s / (1 + self.slack) - self.fixed_s(bucket, n_admit)
        if math.isinf(spare):
            return k_max if spare > 0 else 0
        return max(0, min(k_max, math.floor(spare / max(self.step_s[bucket], MIN_STEP_S))))


@dataclasses.dataclass(frozen=True)
class StepBudget:
    """The k decision, in one place: tokens per live row this frame, from its admission.

    steps_per_frame="auto" is throughput-first within the deadline. With arrivals fixed,
    every k produces the same tokens in the long run, and a smaller k keeps the batch
    larger: one step at bucket 32 cost 18 ms against 77 ms for 16 steps at bucket 2 on
    this CPU (BENCHMARKS.md). So auto decodes min_decode_tokens while the pool keeps up,
    and the largest k that fits the time left while requests wait for a row (the admission's
    backlog), to drain them. min_decode_tokens holds even when no time is left, so
    language never starves. A fixed k and auto are both capped at k_cap, the tokens any
    live row still needs (docs/DESIGN.md section 7).
    """

    steps_per_frame: int | Literal["auto"]
    min_decode_tokens: int
    budget_margin_s: float

    def choose(
        self, admission: Admission, latency: LatencyModel, k_cap: int, time_left_s: float
    ) -> int:
        """k for an admission with live rows (bucket > 0); time_left_s before the margin."""
        if self.steps_per_frame != "auto":
            return min(self.steps_per_frame, k_cap)
        time_left_s -= self.budget_margin_s
        fits = latency.choose_k(time_left_s, admission.bucket, len(admission.admitted), k_cap)
        floor = min(self.min_decode_tokens, k_cap)
        return max(floor, min(fits, k_cap if admission.backlog else floor))
