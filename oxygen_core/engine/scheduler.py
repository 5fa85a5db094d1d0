"""Which language requests run, where, and how many tokens per frame: no arrays here.

The scheduler is the host-side half of the KV cache manager. It turns stream triggers
into pending requests, admits them into free pool slots (lowest first, so the occupied
rows stay packed and the decode bucket small), applies the pool-full policy, and picks
the decode bucket. Each frame it emits a plain `Admission` and takes back plain facts
(which requests finished), so its tests need no model. How many tokens the admitted rows
decode (k) is not its call: `latency.StepBudget` decides that from the admission
(docs/DESIGN.md section 7).
Running out of slots is an outcome in the admission (`rejected`, `evicted`), never an
exception.

Requests arrive from any thread (the node's ROS callbacks) while the engine admits on its
worker, so the queue is behind a lock, and it is the one queue: `demand` refuses, with
the reason, a request beyond what one frame can take (every pool row, plus `max_queue`
with the queue policy), so requests asked for while frames skip are not hoarded. A
refusal counts in the next admission's `rejected`, as the excess would have been trimmed there.

A request queued while the pool is full starts from the frame that admits it: its
origin frame's prefix cache is not kept, and the newest observation is the better one
to talk about anyway.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import threading

from oxygen_core.engine.types import PoolFullPolicy, StreamConfig


@dataclasses.dataclass
class Request:
    id: int
    stream: str
    origin_frame: int
    slot: int
    max_tokens: int


@dataclasses.dataclass(frozen=True)
class Pending:
    stream: str
    max_tokens: int


@dataclasses.dataclass(frozen=True)
class Admission:
    """One frame's admission: the requests given a pool row, those evicted for them, how
    many were rejected, the decode bucket the live rows need, and the backlog."""

    frame: int
    admitted: tuple[Request, ...]
    evicted: tuple[Request, ...]
    rejected: int
    bucket: int  # 0 when no row is live
    # Requests that wanted a pool row this frame and did not get one (still queued,
    # rejected or evicted): the pool is not keeping up.
    backlog: int


class Scheduler:
    def __init__(
        self,
        streams: tuple[StreamConfig, ...],
        capacity: int,
        buckets: tuple[int, ...],
        pool_full: PoolFullPolicy = "queue",
        max_queue: int = 64,
    ) -> None:
        if not buckets or max(buckets) < capacity:
            raise ValueError(
                f"largest bucket {max(buckets, default=0)} must hold the pool ({capacity} rows)"
            )
        self.streams = {s.name: s for s in streams}
        self.capacity = capacity
        self.buckets = tuple(sorted(buckets))
        self.pool_full = pool_full
        self.max_queue = max_queue
        self.active: dict[int, Request] = {}
        self.queue: collections.deque[Pending] = collections.deque()
        self.holds = capacity + (max_queue if pool_full == "queue" else 0)  # what a frame takes
        self._lock = threading.Lock()  # `demand` may come from any thread
        self._refused = 0  # demands refused since the last admission
        self._next_id = 0
        self._instruction: str | None = None

    # ------------------------------------------------------------------ triggers
    def trigger(self, frame: int, instruction: str) -> None:
        """Queue the requests that this frame's stream triggers fire."""
        changed = instruction != self._instruction
        self._instruction = instruction
        for s in self.streams.values():
            fire = (s.trigger == "every" and frame % s.every_frames == 0) or (
                s.trigger == "instruction_change" and changed
            )
            if fire:
                with self._lock:
                    self.queue.append(Pending(s.name, s.max_tokens))

    def demand(self, stream: str, max_tokens: int | None = None) -> str | None:
        """Queue one request of `stream` (on demand, or a benchmark workload; any thread).
        Returns why it was refused (the queue already holds what a frame can take), or None."""
        if stream not in self.streams:
            raise ValueError(f"unknown stream {stream!r}; configured: {sorted(self.streams)}")
        with self._lock:
            if len(self.queue) >= self.holds:
                self._refused += 1
                return (
                    f"{len(self.queue)} requests already wait for a language phase, as many as "
                    f"it can take (pool rows {self.capacity} + queue "
                    f"{self.holds - self.capacity})"
                )
            self.queue.append(Pending(stream, max_tokens or self.streams[stream].max_tokens))
        return None

    # ------------------------------------------------------------------ admission
    def admit(self, frame: int) -> Admission:
        """Admit, evict or reject queued requests, then pick the bucket."""
        admitted: list[Request] = []
        evicted: list[Request] = []
        with self._lock:
            while self.queue:
                slot = self._free_slot()
                if slot is None and self.pool_full == "evict_oldest":
                    slot = self._evict_oldest(exclude={r.id for r in admitted}, out=evicted)
                if slot is None:
                    break
                admitted.append(self._start(self.queue.popleft(), frame, slot))
            rejected, self._refused = self._trim_queue() + self._refused, 0
            waiting = len(self.queue)
        return Admission(
            frame,
            tuple(admitted),
            tuple(evicted),
            rejected,
            self._bucket(),
            backlog=waiting + rejected + len(evicted),
        )

    def finish(self, request_id: int) -> Request:
        """Free a finished request's slot."""
        return self.active.pop(request_id)

    def clear(self) -> None:
        self.active.clear()
        with self._lock:
            self.queue.clear()
            self._refused = 0
        self._instruction = None

    def restart(self) -> None:
        """As new: no requests, and ids count from 0 again (they seed sampling keys)."""
        self.clear()
        self._next_id = 0

    @property
    def slots(self) -> dict[int, Request]:
        return {r.slot: r for r in self.active.values()}

    # ------------------------------------------------------------------ helpers
    def _free_slot(self) -> int | None:
        used = {r.slot for r in self.active.values()}
        return next((s for s in range(self.capacity) if s not in used), None)

    def _evict_oldest(self, exclude: set[int], out: list[Request]) -> int | None:
        candidates = [r for r in self.active.values() if r.id not in exclude]
        if not candidates:
            return None
        oldest = min(candidates, key=lambda r: r.id)
        out.append(self.active.pop(oldest.id))
        return oldest.slot

    def _start(self, pending: Pending, frame: int, slot: int) -> Request:
        req = Request(self._next_id, pending.stream, frame, slot, pending.max_tokens)
        self._next_id += 1
        self.active[req.id] = req
        return req

    def _trim_queue(self) -> int:
        limit = self.max_queue if self.pool_full == "queue" else 0
        rejected = 0
        while len(self.queue) > limit:
            self.queue.popleft()
            rejected += 1
        return rejected

    def _bucket(self) -> int:
        if not self.active:
            return 0
        rows = 1 + max(r.slot for r in self.active.values())
        return self.buckets[bisect.bisect_left(self.buckets, rows)]
