"""Lockstep between a sim and the policy node it hosts: the sim's clock stands while the
node works.

A latency sweep asks how success depends on the delay d between a frame and the control
period its chunk starts at, with nothing else changing. Paced at a real-time factor, a
slow node's compute would take sim time as well; in lockstep each tick first waits until
the node has finished its latest frame due (its ~/stats say so) and that frame's command is
here (`lockstep_due`), so a frame reads the clock of its due tick, its work (language
included) takes no sim time, and each chunk runs exactly the d periods after its frame
that the node stamps it with (its rtc_delay_steps).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class LockstepMarks:
    """What lockstep knows of the policy node: its frames done, their grid, its commands."""

    frame_ns: int | None = None  # the tick of the newest frame done (None: none yet)
    frame_seq: int = -1  # that frame's number
    command_seq: int = -1  # the frame number of the newest command
    grid_ns: int | None = None  # a tick the node's frame timer is due at (None: not known)

    def finished(self, tick_ns: int, frame: int) -> None:
        """The node finished the frame of tick `tick_ns`. The first frame may be off the
        grid (the timer, started before the clock, is overdue at the first /clock); the
        second ran at a due tick, where the loop was waiting for it."""
        if self.frame_ns is not None and self.grid_ns is None:
            self.grid_ns = tick_ns
        if self.frame_ns is None or tick_ns > self.frame_ns:
            self.frame_ns, self.frame_seq = tick_ns, frame

    def commanded(self, frame: int) -> None:
        """A command of frame `frame` arrived."""
        self.command_seq = max(self.command_seq, frame)

    def let_go(self, t: int) -> None:
        """Stop waiting for the frame due at t (the node skipped it): count it done."""
        self.frame_ns = max(self.frame_ns or t, t)
        self.command_seq = max(self.command_seq, self.frame_seq)


def lockstep_due(marks: LockstepMarks, t: int, frame_ticks: int, period_ns: int) -> bool:
    """Whether tick t may run: the node, whose frame timer is due every `frame_ticks`
    ticks of `period_ns`, has finished its frame of the latest due tick at or before t,
    and that frame's command is here. Before the grid is known: a frame at t itself."""
    if marks.frame_ns is None:
        return False
    if marks.grid_ns is None:
        return marks.frame_ns >= t
    period = frame_ticks * period_ns
    due = t - (t - marks.grid_ns) % period
    return marks.frame_ns >= due and marks.command_seq >= marks.frame_seq
