"""The chunk the robot is executing, on its clock: the one copy of the hand-over bookkeeping.

A chunk is computed while the robot still runs the previous one (docs/DESIGN.md section
10). `ChunkTimeline` remembers what the robot runs (`RunningChunk`: rows in robot units,
the time its row 0 executes, the tick that computed it) and answers, per frame:

- `at(tick_ns)`: a `Takeover`: the `Handover` for `Engine.act` (the running rows and how
  many ran by the tick, nearest, not floor; running rows the gate slowed past the model's
  chunk length go as the window the engine reads, from the executed row) and the anchor,
  the time the new chunk's row 0 stands for (the running row it continues, so chunks
  stay on one control grid).
- `release(takeover, action)`: which rows go out, their stamp (d control periods after
  the anchor, d clipped to the chunk, which `clipped` says), what the robot runs once they
  are out, and the rows it runs one and two periods before them (the lead: what a
  trajectory controller moves from into the first one, and how fast); `Release.with_rows`
  puts the chunk gate's rows in their place (oxygen_core.safety.guard), so what runs is
  what the gate let through. The rows go out from row d, or from the row after the last
  the robot had when the running chunk ends within the d steps: the new chunk's rows
  skipped never exceed the rows the robot ran meanwhile (it stood at the running chunk's
  last row for the rest, and skipping d would start it d steps into a motion it never
  made). With nothing running the whole chunk goes out, stamped when it can arrive.
- `commit(release, latency_s)`: they went out `latency_s` after the tick: they are what
  runs now, and the latency feeds the engine's delay estimate, its one writer, so an
  "auto" d covers the whole tick-to-publish time the robot sees. Frames that are never
  published (warm-up, compilation) never reach it, nor does an activation's first chunk.
- `last_row_ns()`: when the running chunk's last row executes: how long the robot has
  rows to run while no new chunk comes (the frame loop's watchdog).

Times are integer nanoseconds of the robot's clock (the node clock, bag time in replay;
step * period in the in-process loop), so step counts are exact and replay identically.
A tick earlier than the running chunk's (the clock went back: a restarted simulation, a
looped bag) and `reset` forget the running chunk: the next frame has no handover.
"""

from __future__ import annotations

import dataclasses
import typing

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.engine.types import ActionResult, ChunkHandover, Handover
from oxygen_core.model.rtc import DelayEstimator, shift_chunk


@dataclasses.dataclass(frozen=True)
class RunningChunk:
    """What the robot executes from `row0_ns` on, one row per control period: the d rows
    it kept of the chunk before (they run until this one takes over), then the rows
    published. With d within a frame the next tick lies past those d rows; with a longer
    delay it does not, and the next chunk must meet them, not the unstarted chunk."""

    rows: np.ndarray  # float32 [rows, D], robot units
    row0_ns: int  # when rows[0] executes
    tick_ns: int  # the tick of the frame that computed it


@dataclasses.dataclass(frozen=True)
class Takeover:
    """A tick against the running chunk: what `Engine.act` is handed and where the new
    chunk's row 0 lies in time."""

    tick_ns: int
    anchor_ns: int  # the running row the new row 0 continues; the tick without a handover
    running: RunningChunk | None  # None: the first tick, after a reset or the clock going back
    executed: int  # rows of `running` run by the tick, the nearest row (0 without one)
    handover: Handover | None  # None with replace or nothing running

    def upcoming(self, rows: int) -> np.ndarray:
        """float32 [rows, D]: what the robot runs from the tick on, its last row held past
        the end (the rows a new chunk's first rows meet)."""
        if self.running is None:
            raise ValueError("no chunk is running at this tick")
        return shift_chunk(self.running.rows, self.executed, rows)


@dataclasses.dataclass(frozen=True)
class Release:
    """What a frame publishes and what the robot runs once it is out."""

    first: int  # the chunk's first row published: d, or fewer when the robot had fewer left
    rows: np.ndarray  # the rows published: from `first`, `horizon` at most
    row0_ns: int  # their stamp: when rows[0] executes, d periods after the anchor
    clipped: bool  # d reached past the chunk: at most its last row goes out
    running: RunningChunk  # what the robot executes after the publish
    cold: bool  # nothing ran before it (an activation's first chunk): its latency is not d's
    lead: np.ndarray | None  # float32 [1 or 2, D]: the rows running two and one periods
    # before rows[0], oldest first; None when unknown (nothing runs, or it had not started)

    def with_rows(self, rows: np.ndarray) -> Release:
        """This release with `rows` in place of the chunk's (the chunk gate's: clamped, or
        slowed to more rows), at the same stamp: the robot then runs the rows it kept,
        then these, and the next hand-over meets what it really runs."""
        new = np.asarray(rows, np.float32)
        kept = self.running.rows[: len(self.running.rows) - len(self.rows)]
        running = dataclasses.replace(self.running, rows=np.concatenate([kept, new]))
        return dataclasses.replace(self, rows=new, running=running)


class ChunkTimeline:
    """The running chunk and every decision about the next one (module docstring)."""

    def __init__(
        self,
        control_period_s: float,
        chunk_handover: ChunkHandover,
        delays: DelayEstimator,
        horizon: int | None = None,
    ) -> None:
        """delays: the engine's estimate (`Engine.delay`), written here only; horizon: the
        most rows a frame publishes (None: every row from d on)."""
        period_ns = round(control_period_s * NS_PER_S) if control_period_s > 0 else 0
        if period_ns < 1:
            raise ValueError(f"control period must be >= 1 ns, got {control_period_s!r} s")
        if chunk_handover not in typing.get_args(ChunkHandover):
            raise ValueError(
                f"unknown chunk_handover {chunk_handover!r}; choose replace, blend or rtc"
            )
        if horizon is not None and horizon < 1:
            raise ValueError(f"horizon must be >= 1 row, got {horizon}")
        self.control_period_s, self.period_ns = control_period_s, period_ns
        self._delays, self._horizon = delays, horizon
        self.running: RunningChunk | None = None
        self._chunk_rows: int | None = None  # the model's chunk, learnt at release

    def reset(self) -> None:
        """Forget the running chunk: the robot may be anywhere when frames start again."""
        self.running = None

    def at(self, tick_ns: int) -> Takeover:
        """The tick against the running chunk; a tick before the one that computed it (the
        clock went back) forgets it. executed is the row nearest the tick, not the floor:
        tick stamps jitter by the executor's latency, and a tick 1 ms early of a whole
        number of steps would floor to one step too few."""
        running = self.running
        if running is not None and tick_ns < running.tick_ns:
            running = self.running = None
        if running is None:
            return Takeover(tick_ns, tick_ns, None, 0, None)
        period = self.period_ns
        executed = max(0, (tick_ns - running.row0_ns + period // 2) // period)
        handover = _handover(running.rows, executed, self.control_period_s, self._chunk_rows)
        return Takeover(tick_ns, running.row0_ns + executed * period, running, executed, handover)

    def release(self, takeover: Takeover, action: ActionResult, cold_delay: int = 0) -> Release:
        """The rows of `action` to publish from row d (`action.delay_steps`; past the chunk,
        its last row), their stamp and the robot's rows after the publish: the running
        rows for the d steps before the new ones take over (when handed over), then them.
        With nothing running the robot stands still until the chunk arrives, `cold_delay`
        control steps after the tick (the caller's measure: no hand-over gave a d): every
        row goes out, stamped that many steps on, so its first row is the first one run."""
        self._chunk_rows = len(action.actions)
        last = len(action.actions) - 1
        if takeover.running is None:
            delay, first = cold_delay, 0
        else:
            delay = min(action.delay_steps, last)
            first = _first_row(takeover, delay)
        end = None if self._horizon is None else first + self._horizon
        rows = action.actions[first:end]
        new = np.asarray(rows, np.float32)
        anchor_ns = takeover.anchor_ns
        stamp_ns = anchor_ns + delay * self.period_ns
        if takeover.handover is None or delay == 0:
            running = RunningChunk(new, stamp_ns, takeover.tick_ns)
        else:
            kept = takeover.upcoming(delay)
            running = RunningChunk(np.concatenate([kept, new]), anchor_ns, takeover.tick_ns)
        cold = takeover.running is None
        clipped = action.delay_steps > last
        return Release(first, rows, stamp_ns, clipped, running, cold, _lead(takeover, delay))

    def last_row_ns(self) -> int | None:
        """When the running chunk's last row executes (the robot stays there after it);
        None when nothing runs."""
        running = self.running
        if running is None:
            return None
        return running.row0_ns + (len(running.rows) - 1) * self.period_ns

    def commit(self, release: Release, latency_s: float) -> None:
        """`release` went out `latency_s` (steady clock) after its tick: the robot runs it
        now, and the latency is one observation of d, unless nothing ran before it (the
        first chunk of an activation: its latency can carry one-off costs, a first use of
        a shape or an allocation, and one such spike would hold d high for a window)."""
        self.running = release.running
        if not release.cold:
            self._delays.observe(latency_s)


def _first_row(takeover: Takeover, delay: int) -> int:
    """The new chunk's first row to publish: d, or the rows the running chunk had left
    from the tick on when fewer (the robot ran those, then stood at the last one)."""
    return min(delay, max(0, len(takeover.running.rows) - takeover.executed))


def _lead(takeover: Takeover, delay: int) -> np.ndarray | None:
    """The running rows two and one periods before the new rows take over, d periods after
    the anchor: rows executed + d - 2 and - 1, its last row once it ran out; the one row
    when the other is before the running chunk's first, None when both are (or nothing
    runs)."""
    running = takeover.running
    last = takeover.executed + delay - 1
    if running is None or last < 0:
        return None
    index = np.minimum(np.arange(max(0, last - 1), last + 1), len(running.rows) - 1)
    return running.rows[index].copy()


def _handover(rows: np.ndarray, executed: int, period_s: float, most: int | None) -> Handover:
    """The running `rows` after `executed` for `Engine.act`, which takes at most a model
    chunk (`most` rows). Rows the gate slowed past that go as the `most` rows from the
    executed one on (the engine reads no others), or the last row once none is left."""
    if most is None or len(rows) <= most:
        return Handover(rows, executed, period_s)
    if executed >= len(rows):
        return Handover(rows[-1:], 1, period_s)
    return Handover(rows[executed : executed + most], 0, period_s)
