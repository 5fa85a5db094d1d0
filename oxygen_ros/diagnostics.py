"""What the node counts, and how it reports it on /diagnostics for rqt_robot_monitor.

Three threads touch these numbers: the frame worker (frames, latencies, engine load),
the executor (timer overruns, QoS deadline events) and the diagnostics timer (reads).
`NodeStats` keeps them behind one lock and hands out immutable snapshots, so a report is
consistent with itself.

A deadline miss is a frame whose action chunk did not go out within one frame period of
its timer tick, measured on the steady clock: either it was published late, or the tick
found the previous frame still running (an overrun; that tick's chunk never exists and
the previous chunk stays valid). Only these are called misses, and only they turn the
actions status WARN. DDS deadline events (the QoS deadline offered on ~/action_chunk,
qos_deadline_factor x the frame period) are counted apart and never called misses: some
RMWs (rmw_zenoh) never raise them, they also fire for skipped frames, and with a deadline
of exactly one period ordinary timer jitter raised one for most chunks.

The report runs on a steady-clock timer, so it keeps coming when the ROS clock stops
(use_sim_time with no /clock). `ClockWatch` compares the ROS clock with the steady clock
at each report and says when the ROS clock stalled (no advance for stall_after_s of steady
time) or went backwards since the last report.

The tools read some counts back from /diagnostics (a live run's report: skips by reason,
misses, overruns, errors): the status and key names they look up are the constants below,
defined once here and imported there, so a renamed key cannot silently read as 0.

Everything a peer sent that a report quotes (a refused instruction, ignored joint names)
arrives here already cut to an excerpt (oxygen_core.text), so a report stays a few KB.
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
from oxygen_core.safety.guard import GATE_OFF, GateTally
from oxygen_core.text import excerpt_list
from oxygen_ros.inputs import FrameAssembler, is_stale

_RATE_WINDOW = 64  # frames over which the published frame rate is measured

# Status names are "<node>: <part>"; keys the tools read back (tools.report, tools.live).
INPUTS_STATUS = "inputs"
SKIPPED_PREFIX = "skipped "  # + a skip reason: frames skipped for it
DEADLINE_MISSES = "deadline misses"
OVERRUNS = "overruns"
FRAME_ERRORS = "frame errors"
CONTROLLER_OUTPUT = "controller output"  # safety status: enabled, or dry run and why


@dataclasses.dataclass(frozen=True)
class StatsSnapshot:
    """The node's counters at one instant."""

    frames: int = 0  # chunks published
    deadline_misses: int = 0  # late chunks + overruns
    late_frames: int = 0
    overruns: int = 0
    qos_deadline_events: int = 0
    errors: int = 0
    unknown_requests: int = 0  # ~/request messages naming no stream
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
    holds: int = 0  # hold trajectories sent to the controller
    trajectories_refused: int = 0  # gated chunks with no trajectory the controller can meet
    last_hold: str = ""  # why the last of them was
    gate: GateTally = GateTally()  # what the chunk gate did (policy "off": no gate)
    motion: str = ""  # "enabled", or why the controller gets nothing (oxygen_ros.motion)


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

    def trajectory_refused(self) -> None:
        """A gated chunk had no trajectory the controller could run within the limits from
        the measured state (oxygen_core.controller.shaping.met): nothing went out."""
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(s, trajectories_refused=s.trajectories_refused + 1)

    def held(self, reason: str) -> None:
        """A hold trajectory went to the controller (oxygen_ros.motion)."""
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(s, holds=s.holds + 1, last_hold=reason)

    def gated(self, tally: GateTally) -> None:
        """The chunk gate's tally after its latest chunk (see FrameLoop)."""
        with self._lock:
            self._state = dataclasses.replace(self._state, gate=tally)

    def motion_changed(self, state: str) -> None:
        """The motion authority's state changed (see oxygen_ros.motion)."""
        with self._lock:
            self._state = dataclasses.replace(self._state, motion=state)

    def qos_deadline_missed(self, count: int) -> None:
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(s, qos_deadline_events=s.qos_deadline_events + count)

    def unknown_request(self) -> None:
        with self._lock:
            s = self._state
            self._state = dataclasses.replace(s, unknown_requests=s.unknown_requests + 1)

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
    instruction_refusals: int = 0
    instruction_refused: str = ""  # why the latest instruction was refused (an excerpt)
    ignored_joints: str = ""  # JointState names the model does not use (an excerpt_list)

    @classmethod
    def of(cls, assembler: FrameAssembler, now_s: float) -> InputReport:
        ignored = assembler.ignored_joints
        return cls(
            ages_s=assembler.freshness(now_s),
            skips=dict(assembler.skip_counts),
            blanks=dict(assembler.blank_counts),
            stale_timeout_s=assembler.stale_timeout_s,
            instruction_refusals=assembler.instruction_refusals,
            instruction_refused=assembler.instruction_refused,
            ignored_joints=excerpt_list(ignored) if ignored else "",
        )


@dataclasses.dataclass(frozen=True)
class ClockReport:
    """What `ClockWatch` saw of the ROS clock at one report."""

    ros_s: float
    rate: float  # ROS seconds per steady second since the last report (1.0 on system time)
    stalled_s: float  # steady time since the ROS clock last advanced
    stalled: bool
    backward_jumps: int  # total
    last_jump_s: float  # how far the latest backward jump went


class ClockWatch:
    """The ROS clock against the steady clock, one observation per diagnostics report.

    A backward jump is seen when a report reads an earlier ROS time than the report before
    (a jump that comes back past the old reading within one period goes unseen)."""

    def __init__(self, stall_after_s: float) -> None:
        self.stall_after_s = stall_after_s
        self._last: tuple[float, float] | None = None  # (ros_s, steady_s) of the last report
        self._advanced_s: float | None = None  # steady time the ROS clock last advanced
        self._jumps, self._jump_s = 0, 0.0

    def observe(self, ros_s: float, steady_s: float) -> ClockReport:
        rate = 0.0
        if self._last is None:
            self._advanced_s = steady_s
        else:
            last_ros, last_steady = self._last
            if steady_s > last_steady:
                rate = (ros_s - last_ros) / (steady_s - last_steady)
            if ros_s < last_ros:
                self._jumps, self._jump_s = self._jumps + 1, last_ros - ros_s
            if ros_s != last_ros:
                self._advanced_s = steady_s
        self._last = (ros_s, steady_s)
        stalled_s = steady_s - self._advanced_s
        return ClockReport(
            ros_s=ros_s,
            rate=rate,
            stalled_s=stalled_s,
            stalled=stalled_s > self.stall_after_s,
            backward_jumps=self._jumps,
            last_jump_s=self._jump_s,
        )


class DiagnosticsReporter:
    """Builds /diagnostics messages; a status turns WARN when a count grew since the last."""

    def __init__(self, name: str, frame_period_s: float) -> None:
        self.name = name
        self.frame_period_s = frame_period_s
        self._previous = StatsSnapshot()
        self._previous_inputs: InputReport | None = None
        self._previous_jumps = 0

    def report(
        self,
        stamp: Time,
        stats: StatsSnapshot,
        inputs: InputReport,
        clock: ClockReport | None = None,
    ) -> DiagnosticArray:
        """Statuses actions, language and inputs, and clock when `clock` is given (the
        node's; a replay runs on the bag clock, which cannot stall)."""
        previous = self._previous_inputs or dataclasses.replace(
            inputs, skips={}, instruction_refusals=0
        )
        status = [
            _actions_status(self.name, stats, self._previous, self.frame_period_s),
            _language_status(self.name, stats, self._previous),
            _inputs_status(self.name, inputs, previous, stats.last_skip),
            _safety_status(self.name, stats, self._previous),
        ]
        if clock is not None:
            status.append(_clock_status(self.name, clock, self._previous_jumps))
            self._previous_jumps = clock.backward_jumps
        self._previous, self._previous_inputs = stats, inputs
        return DiagnosticArray(header=Header(stamp=stamp), status=status)


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
        DEADLINE_MISSES: s.deadline_misses,
        "late chunks": s.late_frames,
        OVERRUNS: s.overruns,
        "QoS deadline events (DDS, not misses)": s.qos_deadline_events,
        FRAME_ERRORS: s.errors,
        "handover fallbacks to replace": s.handover_fallbacks,
        "chunk stamps back in time": (
            f"{s.stamps_back} (last: {s.last_stamp_back})" if s.stamps_back else 0
        ),
    }
    return _status(level, f"{name}: actions", message, values)


def _safety_status(name: str, s: StatsSnapshot, prev: StatsSnapshot) -> DiagnosticStatus:
    """What stood between the model and the controller: the gate's verdicts and the holds.
    WARN when chunks were changed, rejected or a hold went out since the last report;
    ERROR while the gate is off, or while it holds the robot after a rejection streak."""
    g, altered = s.gate, _altered(s.gate, prev.gate)
    level, message = DiagnosticStatus.OK, "no chunk changed by the gate, no hold since last report"
    refused = s.trajectories_refused - prev.trajectories_refused
    if altered or s.holds > prev.holds or refused:
        level = DiagnosticStatus.WARN
        message = f"since last report: {altered or 'no chunk changed'}"
        if refused:
            message += f"; {refused} chunks with no trajectory the controller can meet"
        if s.holds > prev.holds:
            message += f"; {s.holds - prev.holds} holds (last: {s.last_hold})"
    if g.tripped:
        level = DiagnosticStatus.ERROR
        message = f"holding: the gate rejected {g.streak} chunks in a row; until one passes"
    if g.policy == GATE_OFF:
        level, message = DiagnosticStatus.ERROR, "chunk gate off: chunks reach the robot unchecked"
    values: dict[str, object] = {"gate policy": g.policy}
    values.update({f"chunks {outcome}": count for outcome, count in g.outcomes.items()})
    values["rejected in a row"] = g.streak
    values.update({f"findings {reason}": count for reason, count in g.findings.items()})
    values["last stretch"] = f"{g.last_stretch:.3f}"
    values["trajectories refused"] = s.trajectories_refused
    values["holds"] = f"{s.holds} (last: {s.last_hold})" if s.holds else 0
    values[CONTROLLER_OUTPUT] = s.motion
    return _status(level, f"{name}: safety", message, values)


def _altered(now: GateTally, before: GateTally) -> str:
    """The chunks clamped, slowed or rejected between two tallies, in words ("" for none)."""
    grown = {
        outcome: now.outcomes[outcome] - before.outcomes[outcome]
        for outcome in ("clamped", "slowed", "rejected")
    }
    return ", ".join(f"{count} chunks {outcome}" for outcome, count in grown.items() if count > 0)


def _language_status(name: str, s: StatsSnapshot, prev: StatsSnapshot) -> DiagnosticStatus:
    full = s.pool_capacity > 0 and s.pool_used >= s.pool_capacity
    level = DiagnosticStatus.WARN if full else DiagnosticStatus.OK
    message = "KV pool full" if full else f"{s.batch} requests decoding"
    unknown = s.unknown_requests - prev.unknown_requests
    if unknown > 0 and not full:
        level = DiagnosticStatus.WARN
        message = f"{unknown} requests named no stream since last report"
    values = {
        "k (tokens per frame)": s.k,
        "batch": s.batch,
        "queued requests": s.queued,
        "rejected requests": s.rejected,
        "KV pool used": s.pool_used,
        "KV pool capacity": s.pool_capacity,
        "unknown stream requests": s.unknown_requests,
    }
    return _status(level, f"{name}: language", message, values)


def _inputs_status(
    name: str, inputs: InputReport, prev: InputReport, last_skip: str
) -> DiagnosticStatus:
    stale = [k for k, age in inputs.ages_s.items() if is_stale(age, inputs.stale_timeout_s)]
    new_skips = sum(inputs.skips.values()) - sum(prev.skips.values())
    refused = inputs.instruction_refusals - prev.instruction_refusals
    level, message = DiagnosticStatus.OK, "inputs fresh"
    if refused > 0:
        level = DiagnosticStatus.WARN
        message = f"{refused} instructions refused, the previous one kept; last: "
        message += inputs.instruction_refused or "(a later one was taken)"
    elif new_skips > 0:
        level, message = DiagnosticStatus.WARN, f"{new_skips} frames skipped; last: {last_skip}"
    elif stale:
        level, message = DiagnosticStatus.WARN, f"stale inputs: {', '.join(stale)}"
    values: dict[str, object] = {f"age {k} (s)": f"{age:.3f}" for k, age in inputs.ages_s.items()}
    values.update({f"{SKIPPED_PREFIX}{reason}": count for reason, count in inputs.skips.items()})
    values.update({f"blanked {slot}": count for slot, count in inputs.blanks.items()})
    values["instructions refused"] = inputs.instruction_refusals
    values["last instruction refusal"] = inputs.instruction_refused
    values["joints ignored"] = inputs.ignored_joints
    return _status(level, f"{name}: {INPUTS_STATUS}", message, values)


def _clock_status(name: str, c: ClockReport, previous_jumps: int) -> DiagnosticStatus:
    level, message = DiagnosticStatus.OK, "ROS clock advancing"
    if c.backward_jumps > previous_jumps:
        level = DiagnosticStatus.WARN
        message = f"ROS clock jumped back {c.last_jump_s:.3f} s since last report"
    elif c.stalled:
        level = DiagnosticStatus.WARN
        message = (
            f"ROS clock stalled for {c.stalled_s:.1f} s at {c.ros_s:.3f} (use_sim_time: is "
            "/clock published?): no frames run until it advances"
        )
    values = {
        "ROS time (s)": f"{c.ros_s:.3f}",
        "ROS clock rate (x steady)": f"{c.rate:.3f}",
        "stalled for (s)": f"{c.stalled_s:.3f}",
        "backward jumps": c.backward_jumps,
        "last backward jump (s)": f"{c.last_jump_s:.3f}",
    }
    return _status(level, f"{name}: clock", message, values)


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
