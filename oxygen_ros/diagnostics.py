"""What the node counts, and how it reports it on /diagnostics for rqt_robot_monitor.

Three threads touch these numbers: the frame worker (frames, latencies, engine load),
the executor (timer overruns, QoS deadline events) and the diagnostics timer (reads).
`NodeStats` keeps them behind one lock and hands out immutable snapshots, so a report is
consistent with itself.

A deadline miss is a frame whose action chunk did not go out within one frame period of
its timer tick, measured on the steady clock: either it was published late, or the tick
found the previous frame still running (an overrun; that tick's chunk never exists and
the previous chunk stays valid). DDS deadline events are counted apart, because some
RMWs (rmw_zenoh) never raise them and they also fire for skipped frames.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Mapping

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

from oxygen_core.engine.types import LanguageResult
from oxygen_ros.inputs import FrameAssembler, is_stale

_RATE_WINDOW = 64  # frames over which the published frame rate is measured


@dataclasses.dataclass(frozen=True)
class StatsSnapshot:
    """The node's counters at one instant."""

    frames: int = 0  # chunks published
    deadline_misses: int = 0  # late chunks + overruns
    late_frames: int = 0
    overruns: int = 0
    qos_deadline_events: int = 0
    errors: int = 0
    frame_rate_hz: float = 0.0
    last_latency_s: float = 0.0
    max_latency_s: float = 0.0  # over the rate window
    last_frame_s: float = 0.0
    k: int = 0
    batch: int = 0
    queued: int = 0
    rejected: int = 0
    pool_used: int = 0
    pool_capacity: int = 0
    last_skip: str = ""  # why the last skipped frame was skipped
    handover_fallbacks: int = 0  # frames that wanted blend/rtc but had no row to meet
    stamps_back: int = 0  # chunks stamped before the previous chunk
    last_stamp_back: str = ""  # why the last of them was: clock_back or delay_shrank


class NodeStats:
    """Thread-safe counters of the frame loop (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = StatsSnapshot()
        self._publish_times: collections.deque[float] = collections.deque(maxlen=_RATE_WINDOW)
        self._latencies: collections.deque[float] = collections.deque(maxlen=_RATE_WINDOW)

    def chunk_published(self, *, at_s: float, latency_s: float, deadline_met: bool) -> None:
        """An action chunk went out `latency_s` after its tick (steady clock `at_s`)."""
        with self._lock:
            self._publish_times.append(at_s)
            self._latencies.append(latency_s)
            late = 0 if deadline_met else 1
            s = self._state
            self._state = dataclasses.replace(
                s,
                frames=s.frames + 1,
                late_frames=s.late_frames + late,
                deadline_misses=s.deadline_misses + late,
                frame_rate_hz=_rate(self._publish_times),
                last_latency_s=latency_s,
                max_latency_s=max(self._latencies),
            )

    def frame_finished(self, frame_s: float, language: LanguageResult) -> None:
        """The whole frame (actions and language) took `frame_s`; record the engine load."""
        with self._lock:
            self._state = dataclasses.replace(
                self._state,
                last_frame_s=frame_s,
                k=language.k,
                batch=language.batch,
                queued=language.queued,
                rejected=self._state.rejected + language.rejected,
                pool_used=language.pool_used,
                pool_capacity=language.pool_capacity,
            )

    def restart_rate(self) -> None:
        """Forget publish times and latencies (activate): the rate is of this activation."""
        with self._lock:
            self._publish_times.clear()
            self._latencies.clear()
            self._state = dataclasses.replace(self._state, frame_rate_hz=0.0, max_latency_s=0.0)

    def skipped(self, detail: str) -> None:
        """A frame was skipped (the assembler counts reasons; this keeps the sentence)."""
        with self._lock:
            self._state = dataclasses.replace(self._state, last_skip=detail)

    def overrun(self) -> None:
        """The timer fired while the previous frame was still running."""
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(
                s, overruns=s.overruns + 1, deadline_misses=s.deadline_misses + 1
            )

    def handover_fell_back(self) -> None:
        """A frame wanted blend or rtc, but the previous chunk had no row left to meet."""
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(s, handover_fallbacks=s.handover_fallbacks + 1)

    def stamp_went_back(self, reason: str) -> None:
        """A chunk went out stamped before the previous one (see FrameLoop)."""
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(
                s, stamps_back=s.stamps_back + 1, last_stamp_back=reason
            )

    def qos_deadline_missed(self, count: int) -> None:
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(s, qos_deadline_events=s.qos_deadline_events + count)

    def error(self) -> None:
        with self._lock:
            self._state = dataclasses.replace(self._state, errors=self._state.errors + 1)

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return self._state


def _rate(times: collections.deque[float]) -> float:
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    return (len(times) - 1) / (times[-1] - times[0])


@dataclasses.dataclass(frozen=True)
class InputReport:
    """The frame assembler's view of the inputs, copied for one diagnostics message."""

    ages_s: Mapping[str, float]  # input name -> age by header stamp
    skips: Mapping[str, int]  # skip reason -> frames skipped
    blanks: Mapping[str, int]  # image slot -> frames it was left blank ("blank" policy)
    stale_timeout_s: float

    @classmethod
    def of(cls, assembler: FrameAssembler, now_s: float) -> InputReport:
        return cls(
            ages_s=assembler.freshness(now_s),
            skips=dict(assembler.skip_counts),
            blanks=dict(assembler.blank_counts),
            stale_timeout_s=assembler.stale_timeout_s,
        )


class DiagnosticsReporter:
    """Builds /diagnostics messages; a status turns WARN when a count grew since the last."""

    def __init__(self, name: str, frame_period_s: float) -> None:
        self.name = name
        self.frame_period_s = frame_period_s
        self._previous = StatsSnapshot()
        self._previous_skips = 0

    def report(self, stamp: Time, stats: StatsSnapshot, inputs: InputReport) -> DiagnosticArray:
        """Three statuses: actions, language and inputs."""
        skips = sum(inputs.skips.values())
        array = DiagnosticArray(
            header=Header(stamp=stamp),
            status=[
                _actions_status(self.name, stats, self._previous, self.frame_period_s),
                _language_status(self.name, stats),
                _inputs_status(self.name, inputs, skips - self._previous_skips, stats.last_skip),
            ],
        )
        self._previous, self._previous_skips = stats, skips
        return array


def _actions_status(
    name: str, s: StatsSnapshot, prev: StatsSnapshot, period_s: float
) -> DiagnosticStatus:
    level, message = DiagnosticStatus.OK, "action chunks on time"
    if s.deadline_misses > prev.deadline_misses:
        level = DiagnosticStatus.WARN
        message = f"{s.deadline_misses - prev.deadline_misses} deadline misses since last report"
    if s.errors > prev.errors:
        level, message = DiagnosticStatus.ERROR, f"{s.errors - prev.errors} frames failed"
    values = {
        "frame rate (Hz)": f"{s.frame_rate_hz:.2f}",
        "target frame rate (Hz)": f"{1.0 / period_s:.2f}",
        "frames published": s.frames,
        "latency last (s)": f"{s.last_latency_s:.4f}",
        "latency max (s)": f"{s.max_latency_s:.4f}",
        "frame time last (s)": f"{s.last_frame_s:.4f}",
        "deadline misses": s.deadline_misses,
        "late chunks": s.late_frames,
        "overruns": s.overruns,
        "QoS deadline events": s.qos_deadline_events,
        "frame errors": s.errors,
        "handover fallbacks to replace": s.handover_fallbacks,
        "chunk stamps back in time": (
            f"{s.stamps_back} (last: {s.last_stamp_back})" if s.stamps_back else 0
        ),
    }
    return _status(level, f"{name}: actions", message, values)


def _language_status(name: str, s: StatsSnapshot) -> DiagnosticStatus:
    full = s.pool_capacity > 0 and s.pool_used >= s.pool_capacity
    level = DiagnosticStatus.WARN if full else DiagnosticStatus.OK
    message = "KV pool full" if full else f"{s.batch} requests decoding"
    values = {
        "k (tokens per frame)": s.k,
        "batch": s.batch,
        "queued requests": s.queued,
        "rejected requests": s.rejected,
        "KV pool used": s.pool_used,
        "KV pool capacity": s.pool_capacity,
    }
    return _status(level, f"{name}: language", message, values)


def _inputs_status(
    name: str, inputs: InputReport, new_skips: int, last_skip: str
) -> DiagnosticStatus:
    stale = [k for k, age in inputs.ages_s.items() if is_stale(age, inputs.stale_timeout_s)]
    level, message = DiagnosticStatus.OK, "inputs fresh"
    if new_skips > 0:
        level, message = DiagnosticStatus.WARN, f"{new_skips} frames skipped; last: {last_skip}"
    elif stale:
        level, message = DiagnosticStatus.WARN, f"stale inputs: {', '.join(stale)}"
    values: dict[str, object] = {f"age {k} (s)": f"{age:.3f}" for k, age in inputs.ages_s.items()}
    values.update({f"skipped {reason}": count for reason, count in inputs.skips.items()})
    values.update({f"blanked {slot}": count for slot, count in inputs.blanks.items()})
    return _status(level, f"{name}: inputs", message, values)


def _status(
    level: bytes, name: str, message: str, values: Mapping[str, object]
) -> DiagnosticStatus:
    return DiagnosticStatus(
        level=level,
        name=name,
        message=message,
        hardware_id=name.split(":")[0],
        values=[KeyValue(key=k, value=str(v)) for k, v in values.items()],
    )
