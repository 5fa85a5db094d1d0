"""Per-frame step budget: how many language tokens fit in the time a frame has left.

The paper fixes k offline. Here `k="auto"` asks this model, every frame, for the largest
k whose predicted language time fits the time left: the decode call's fixed cost, one
stream-prompt extension per new request, and k decode steps at the frame's bucket. All
three are measured at warm-up; step times, which dominate, are refined online from each
frame's language time with an exponential moving average, so the budget follows load
changes (more rows, a slower GPU clock) without recalibration. Admission and call costs
stay at their warm-up values: separating them online would need a host sync mid-phase.
Which k to ask for within that limit is the engine's choice.
"""

from __future__ import annotations


class LatencyModel:
    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self.step_s: dict[int, float] = {}
        self.admit_s = 0.0
        self.call_s = 0.0  # fixed cost of a decode call (dispatch, host copy, events)

    def observe_step(self, bucket: int, seconds_per_step: float) -> None:
        old = self.step_s.get(bucket)
        self.step_s[bucket] = (
            seconds_per_step if old is None else old + self.alpha * (seconds_per_step - old)
        )

    def choose_k(self, time_left_s: float, bucket: int, n_admit: int, k_max: int) -> int:
        """Largest k in [0, k_max] with call + n_admit * admit + k * step(bucket) <= time_left_s."""
        if bucket not in self.step_s:
            raise ValueError(f"no decode timing for bucket {bucket}; warm it up first")
        spare = time_left_s - self.call_s - n_admit * self.admit_s
        step = self.step_s[bucket]
        return max(0, min(k_max, int(spare / step))) if step > 0 else k_max
