"""A success rate with its 95 % Wilson interval: how far a closed-loop figure can be trusted.

Fifty episodes of a family put a 60 % rate anywhere from about 46 % to 72 %; two policies
or a policy and a baseline differ only where their intervals part. The Wilson score
interval stays inside [0, 1] and is sound at 0 or n successes, where the normal
approximation collapses to a point.
"""

from __future__ import annotations

import dataclasses
import math

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


@dataclasses.dataclass(frozen=True)
class SuccessRate:
    successes: int
    episodes: int

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """The Wilson score interval (low, high); (nan, nan) without episodes."""
        n, k = self.episodes, self.successes
        if n == 0:
            return float("nan"), float("nan")
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        low = 0.0 if k == 0 else max(0.0, centre - half)  # exact ends, no rounding dust
        return low, (1.0 if k == n else min(1.0, centre + half))

    def as_dict(self) -> dict[str, float | int]:
        """successes, episodes, rate and the interval's ends (`ci95`), for a report."""
        low, high = self.interval()
        return {
            "successes": self.successes,
            "episodes": self.episodes,
            "rate": self.rate,
            "ci95": [low, high],
        }

    def text(self) -> str:
        """ "32/50 (64 %, 50-76)": the count, the rate and the interval in percent."""
        low, high = self.interval()
        return (
            f"{self.successes}/{self.episodes} ({100 * self.rate:.0f} %, "
            f"{100 * low:.0f}-{100 * high:.0f})"
        )
