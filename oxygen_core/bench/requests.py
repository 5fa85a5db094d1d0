"""Each language request of a row, from submission to its last token, on the row's clock.

A request's latency is what the asker waits: from the frame that submits it (requests are
submitted first thing in a frame) to the end of the language phase that hands back its
first token, and the one that hands back its last (tokens leave the engine only when
`language()` returns). Rows take turns within every frame, so the wall clock between two
frames of one row also holds the other rows' turns and the probes; the row's clock counts
its own frame times only, back to back, as if it ran alone. Latencies are kept in frames
too, counting the submitting frame: 1 means the frame that asked delivered it.

The engine names a request only once it admits it (`TokenEvent.request_id`), so the
tracker follows the scheduler's documented order: requests it accepts wait in one queue,
are admitted oldest first with ids counting up from 0 after `Engine.restart`, and
requests trimmed from a full queue are the oldest (`LanguageResult.rejected` counts them
with the frame's refused `request` calls). A token for an id the tracker never admitted
raises, so a change in that order cannot go unnoticed.
"""

from __future__ import annotations

import collections
import dataclasses

from oxygen_core.engine.types import LanguageResult


@dataclasses.dataclass
class RequestTiming:
    """One accepted request: its frames (row frame index) and row-clock times (seconds)."""

    submit_frame: int
    submit_s: float
    measured: bool  # submitted in a measured frame (only those enter the latencies)
    first_frame: int | None = None
    first_s: float | None = None
    done_frame: int | None = None
    done_s: float | None = None
    dropped: bool = False  # trimmed from a full queue or evicted: never completed

    @property
    def completed(self) -> bool:
        return self.done_frame is not None and not self.dropped

    def first_token(self) -> tuple[int, float]:
        """Frames (counting the submitting one) and seconds to the first token."""
        assert self.first_frame is not None and self.first_s is not None
        return self.first_frame - self.submit_frame + 1, self.first_s - self.submit_s

    def completion(self) -> tuple[int, float]:
        """Frames (counting the submitting one) and seconds to the last token."""
        assert self.done_frame is not None and self.done_s is not None
        return self.done_frame - self.submit_frame + 1, self.done_s - self.submit_s


class RequestTracker:
    """Follows one row's requests; `submit` at a frame's start, `deliver` at its end."""

    def __init__(self) -> None:
        self.clock_s = 0.0  # the row's own frame times so far
        self.frame = 0  # the row's frame index (warm-up, measured and drain frames)
        self.timings: list[RequestTiming] = []
        self._waiting: collections.deque[RequestTiming] = collections.deque()
        self._live: dict[int, RequestTiming] = {}
        self._next_id = 0

    def submit(self, measured: bool) -> None:
        """A request the engine accepted (`Engine.request` returned no reason)."""
        timing = RequestTiming(self.frame, self.clock_s, measured)
        self.timings.append(timing)
        self._waiting.append(timing)

    def deliver(self, lang: LanguageResult, refused: int, frame_s: float) -> None:
        """The frame's language result; `refused`: its `request` calls that got a reason."""
        end_s = self.clock_s + frame_s
        for _ in range(lang.admitted):
            self._live[self._next_id] = self._waiting.popleft()
            self._next_id += 1
        for _ in range(lang.rejected - refused):  # trimmed from the queue, oldest first
            self._waiting.popleft().dropped = True
        for event in lang.events:
            timing = self._live.get(event.request_id)
            if timing is None:
                raise RuntimeError(f"tokens of request {event.request_id}, never admitted")
            if event.token_ids and timing.first_frame is None:
                timing.first_frame, timing.first_s = self.frame, end_s
            if event.finished:
                timing.done_frame, timing.done_s = self.frame, end_s
                timing.dropped = event.finish_reason == "evicted"
                del self._live[event.request_id]
        self.clock_s, self.frame = end_s, self.frame + 1
