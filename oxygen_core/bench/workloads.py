"""Request arrival workloads of the paper (docs/DESIGN.md section 2), as seeded schedules.

A workload says, for every frame, how many language requests arrive and how many tokens
each asks for. It is turned into one fixed schedule up front, so every benchmarked row
(isolated, shared, OxyGen at each k) sees exactly the same arrivals at the same frame and
their throughputs compare like with like.

Specs, as typed on the command line:

- `uniform:RATE`: one request every RATE frames, starting at frame 0; a fractional RATE
  is several per frame (0.5 = two per frame, 1.5 = two every three frames).
- `poisson:LAMBDA`: a Poisson number of requests per frame with mean LAMBDA.
- `random:SHORT,LONG,P_LONG`: one request per frame whose length is LONG tokens with
  probability P_LONG, SHORT tokens otherwise.

Uniform and Poisson requests ask for the run's N tokens.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Literal

import numpy as np

Kind = Literal["uniform", "poisson", "random"]

# Named sweeps of the benchmark: each expands to a list of workload specs.
SWEEPS: dict[str, tuple[str, ...]] = {
    "rate": ("uniform:3", "uniform:1", "uniform:0.5"),
    "poisson": ("poisson:0.5", "poisson:1", "poisson:2"),
    "lengths": ("random:5,20,0.2", "random:5,20,0.5", "random:5,20,0.8"),
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """A parsed workload spec; `spec` is its canonical text (a table and JSON key)."""

    kind: Kind
    spec: str
    rate: float = 1.0  # uniform: frames per request; poisson: requests per frame
    short: int = 0  # random lengths only
    long: int = 0
    p_long: float = 0.0

    def max_tokens(self, n: int) -> int:
        """The longest request this workload can make with default length n."""
        return self.long if self.kind == "random" else n

    def schedule(self, frames: int, n: int, seed: int) -> list[tuple[int, ...]]:
        """Token counts of the requests arriving in each of `frames` frames."""
        rng = np.random.default_rng(seed)
        if self.kind == "uniform":
            every = Fraction(str(self.rate))
            counts = [math.ceil((f + 1) / every) - math.ceil(f / every) for f in range(frames)]
            return [(n,) * c for c in counts]
        if self.kind == "poisson":
            return [(n,) * int(c) for c in rng.poisson(self.rate, frames)]
        longs = rng.random(frames) < self.p_long
        return [(self.long if is_long else self.short,) for is_long in longs]


def parse(spec: str) -> Workload:
    """Parse `uniform:RATE`, `poisson:LAMBDA` or `random:SHORT,LONG,P_LONG`."""
    kind, _, args = spec.partition(":")
    try:
        values = [float(a) for a in args.split(",")] if args else []
    except ValueError:
        raise ValueError(f"workload {spec!r}: arguments must be numbers") from None
    if kind in ("uniform", "poisson") and len(values) == 1:
        if values[0] < 0 or (kind == "uniform" and values[0] == 0):
            raise ValueError(f"workload {spec!r}: rate {values[0]} out of range")
        return Workload(kind, spec, rate=values[0])
    if kind == "random" and len(values) == 3:
        short, long, p_long = values
        if not (1 <= short <= long and short == int(short) and long == int(long)):
            raise ValueError(f"workload {spec!r}: need integer lengths 1 <= SHORT <= LONG")
        if not 0.0 <= p_long <= 1.0:
            raise ValueError(f"workload {spec!r}: P_LONG {p_long} outside [0, 1]")
        return Workload(kind, spec, short=int(short), long=int(long), p_long=p_long)
    raise ValueError(
        f"unknown workload {spec!r}; use uniform:RATE, poisson:LAMBDA or random:SHORT,LONG,P_LONG"
    )
