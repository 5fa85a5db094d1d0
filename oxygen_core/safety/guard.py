"""A released chunk through the chunk gate: the one code path of the node's frame loop and
the in-process evaluation.

`ChunkGuard.screen(release, state)` checks the rows a frame releases (from row d: what
would reach the controller) against the measured joint state, and answers with the
release the robot is to run: the gate's rows in place of the model's (clamped, or slowed
to more rows, at the same stamp), so the next hand-over meets what the robot really runs.
A rejected chunk releases nothing: the robot keeps running the chunk before it, which was
gated when it went out.

It also tallies what the gate did (`GateTally`: chunks by outcome, findings by reason, the
rejections in a row, the last stretch), immutable so another thread may read it. After
`max_rejections` rejections in a row the guard trips: `Screened.trips` says so once, for
the caller to hold the robot, and `GateTally.tripped` stays true until a chunk goes
through (passed, clamped or slowed) again.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping

import numpy as np

from oxygen_core.engine.timeline import Release
from oxygen_core.safety.gate import ChunkGate, Outcome, Reason, Verdict

OUTCOMES: tuple[Outcome, ...] = typing.get_args(Outcome)
REASONS: tuple[Reason, ...] = typing.get_args(Reason)
GATE_OFF = "off"  # the policy a tally reports when no gate checks chunks


@dataclasses.dataclass(frozen=True)
class GateTally:
    """What the gate did to the chunks so far."""

    policy: str = GATE_OFF
    outcomes: Mapping[Outcome, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(OUTCOMES, 0)
    )
    findings: Mapping[Reason, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(REASONS, 0)
    )
    streak: int = 0  # chunks rejected in a row
    tripped: bool = False  # the streak reached max_rejections; until a chunk goes through
    last_stretch: float = 1.0  # of the last slowed chunk

    def counted(self, verdict: Verdict, max_rejections: int) -> GateTally:
        """This tally with `verdict` counted."""
        outcomes = {**self.outcomes, verdict.outcome: self.outcomes[verdict.outcome] + 1}
        findings = dict(self.findings)
        for finding in verdict.findings:
            findings[finding.reason] += 1
        streak = 0 if verdict.sent else self.streak + 1
        stretch = verdict.stretch if verdict.outcome == "slowed" else self.last_stretch
        return dataclasses.replace(
            self,
            outcomes=outcomes,
            findings=findings,
            streak=streak,
            tripped=streak >= max_rejections,
            last_stretch=stretch,
        )


@dataclasses.dataclass(frozen=True)
class Screened:
    """One released chunk after the gate."""

    verdict: Verdict
    release: Release | None  # what goes out, with the gate's rows; None when rejected
    trips: bool  # this rejection completed the streak: hold the robot now


class ChunkGuard:
    """The gate applied to released chunks, with its tally (module docstring)."""

    def __init__(self, gate: ChunkGate, max_rejections: int = 3) -> None:
        if max_rejections < 1:
            raise ValueError(f"max_rejections must be >= 1, got {max_rejections}")
        self.gate, self.max_rejections = gate, max_rejections
        self.tally = GateTally(policy=gate.policy)

    def screen(self, release: Release, state: np.ndarray) -> Screened:
        """The verdict on `release.rows` from `state` (the measured positions, in the
        gate's joint order; the steps start from `release.lead`, the rows the robot runs
        then, when known) and the release that goes out in its place."""
        verdict = self.gate.check(release.rows, state, release.lead)
        was_tripped = self.tally.tripped
        self.tally = self.tally.counted(verdict, self.max_rejections)
        gated = None if verdict.positions is None else release.with_rows(verdict.positions)
        return Screened(verdict, gated, self.tally.tripped and not was_tripped)
