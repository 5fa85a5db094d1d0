"""The seed protocol: which sim seeds train, which choose, which report.

A figure measured on the seeds it was chosen on is optimistic: picking the best of several
recipes, checkpoints or betas on some seeds fits those seeds. So the sim's seeds are split
by use, and every closed-loop report names the range it ran on (`range_name`):

    training  0-9999           expert episodes (0-9999) and still scenes (10000-)
    DEV       400000-400999    choosing: recipes, hyper-parameters, checkpoints, beta
    TEST      500000-500999    reporting: run once per shipped checkpoint and per claim

Neither DEV nor TEST overlaps a seed used before the protocol: training used 0-6799 for
episodes and 10000 on for still scenes, 100000-100199 chose recipes and the shipped
checkpoint (and were reported as held out), 200000-200001 and 300000-300049 served the
safety measurements. A thousand seeds per range leave room for many 50-episode runs on
DEV and for one 1000-episode TEST run (a Wilson interval of about +-3 points). The
trainer and DAgger refuse both ranges (`check_not_evaluation`).
"""

from __future__ import annotations

DEV = range(400_000, 401_000)
TEST = range(500_000, 501_000)
RANGES = {"dev": DEV, "test": TEST}


def range_name(seeds: range) -> str:
    """ "dev" or "test" when every seed lies in that range, else "other"."""
    for name, span in RANGES.items():
        if len(seeds) and seeds.start in span and seeds[-1] in span:
            return name
    return "other"


def evaluation_overlap(seeds: range) -> str | None:
    """The evaluation range `seeds` reaches into ("dev" or "test"), or None."""
    for name, span in RANGES.items():
        if len(seeds) and seeds.start < span.stop and span.start <= seeds[-1]:
            return name
    return None


def check_not_evaluation(seeds: range, what: str) -> None:
    """Raise ValueError (one line) when training seeds reach into DEV or TEST: a policy
    trained on them would be chosen or reported on scenes it saw."""
    name = evaluation_overlap(seeds)
    if name is not None:
        span = RANGES[name]
        raise ValueError(
            f"{what} {seeds.start}-{seeds[-1]} reach into the {name} seeds "
            f"{span.start}-{span[-1]} (oxygen_core.sim.seeds), which training must never see"
        )


def describe(seeds: range) -> dict[str, int | str]:
    """A report's note of its seeds: first, last, and which range ("dev", "test",
    "other")."""
    return {"first": seeds.start, "last": seeds[-1], "range": range_name(seeds)}
