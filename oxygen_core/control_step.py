"""One control step: a frame's observation in, what may reach the controller out.

The node's frame (`oxygen_ros.frame`, which replay runs too) and the in-process evaluation
(`oxygen_core.train.rollout`) run a frame's action phase through `ControlStep`, so its
order of operations and every decision in it are written once, on integer nanoseconds of
the robot's clock (the node clock, bag time in replay, step * period in process):

1. `begin()`: a hold went out since the last frame: the robot stopped, so the next chunk
   hands over from nothing (the running chunk is forgotten).
2. `act(tick_ns, obs, measured)`: the tick against the running chunk
   (`ChunkTimeline.at`), the engine's chunk for it; None when a hold went out while the
   engine ran (the chunk is stale).
3. `decide(acted, elapsed_ns)`: the rows to send `elapsed_ns` after the tick (from row d;
   with nothing running the chunk waits `elapsed` in control steps), through the chunk
   gate against the frame's measured joints (`ChunkGuard`: its rows go out, a rejection
   sends nothing, `max_rejections` in a row hold the robot), scaled into a velocity
   robot's bounds, and shaped for the trajectory controller as it will run them from the
   state at arrival (`shaping.for_release`; arrival between tick + elapsed and `lead_s`
   later; under "jtc" the state is also where the controller's command has the robot, from
   the trajectories sent since the last hold, `expected.ExpectedCommand`; a controller that
   interpolates from its desired state starts from its command only, so the measured state
   is then screened from only when the node knows no command); a chunk none of which the
   controller can meet is refused like a rejection.
4. `sent(decision, latency_s)`: the rows went out: they are what runs, the latency
   (robot seconds) feeds the delay estimate d, and a stamp earlier than the last one's is
   reported with its reason.
5. `skipped(tick_ns)`: a frame that sends nothing (an input outage, an overrun): the
   watchdog.
6. `held()` (any thread): a hold went out; `stop(positions, velocities, age_s, now_ns)` is
   the hold's trajectory from the measured state, or, for a controller that starts from
   its command, from where the command is; that hold, once out, is the command the next
   chunk is screened and eased from (`reset()` when the robot may have been moved).

The watchdog holds the robot once per outage: when no chunk goes out and the running
chunk's last row comes before the next frame's chunk could arrive (the next tick plus one
frame period); the robot then stands until a chunk goes out again. Sending is the
caller's: a `Decision` says what to send and what to hold for, and `Note`s say what to
warn about, keyed for throttling.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Protocol

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller import shaping
from oxygen_core.controller.expected import ExpectedCommand
from oxygen_core.controller.shaping import ControllerModel, Shaped
from oxygen_core.engine.timeline import ChunkTimeline, Release, Takeover
from oxygen_core.engine.types import ActionResult, EngineConfig, Handover
from oxygen_core.model.rtc import DelayEstimator, control_steps
from oxygen_core.observation import Observation
from oxygen_core.safety.gate import ChunkGate, Verdict
from oxygen_core.safety.guard import ChunkGuard, GateTally
from oxygen_core.safety.velocity import VelocityCap


class Actor(Protocol):
    """What computes chunks: the engine, or what sits in its seat (a baseline, a tap)."""

    cfg: EngineConfig
    delay: DelayEstimator

    def act(
        self, obs: Observation, handover: Handover | None = None, plan_answer: str | None = None
    ) -> ActionResult: ...


@dataclasses.dataclass(frozen=True)
class Measured:
    """The commanded joints as the frame's joint state had them (the gate's order)."""

    positions: np.ndarray  # float64 [J]
    velocities: np.ndarray | None  # float64 [J]; None: the joint state carries none

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions, velocities), at rest where the joint state carries no velocities: the
        start the controller's first segment is screened from."""
        velocities = np.zeros_like(self.positions) if self.velocities is None else self.velocities
        return self.positions, velocities


@dataclasses.dataclass(frozen=True)
class Acted:
    """A tick against the running chunk and the engine's chunk for it."""

    takeover: Takeover
    action: ActionResult
    measured: Measured | None
    fell_back: bool  # a hand-over was asked and the engine had no row left to meet


@dataclasses.dataclass(frozen=True)
class Note:
    """Something to warn about: one line per key per throttle period."""

    key: str
    message: str


@dataclasses.dataclass(frozen=True)
class StampBack:
    """A chunk stamped before the one sent before it, and why: the clock went back (a
    restarted simulation, a looped bag), or d shrank."""

    reason: str  # "clock_back" or "delay_shrank"
    back_s: float

    @property
    def note(self) -> Note:
        return Note(
            f"stamp {self.reason}",
            f"action chunk stamped {self.back_s:.3f} s before the previous one ({self.reason})",
        )


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a frame sends: `release`'s rows stamped `release.row0_ns` (and `trajectory` to a
    trajectory controller), or nothing; `hold` says to hold the robot now, and why."""

    release: Release | None
    trajectory: Shaped | None  # None: no trajectory output, or nothing goes out
    published_ns: int  # when it goes out: the controller takes it over from then
    hold: str | None
    verdict: Verdict | None  # the gate's; None without a gate
    refused: bool  # no trajectory the controller can meet
    notes: tuple[Note, ...]


class ControlStep:
    """A frame's action phase, under one owner (module docstring)."""

    def __init__(
        self,
        actor: Actor,
        *,
        control_period_s: float,
        frame_period_s: float,
        horizon: int | None = None,
        gate: ChunkGate | None = None,
        max_rejections: int = 3,
        controller: ControllerModel | None = None,
        lead_s: float = 0.0,
        velocity_cap: VelocityCap | None = None,
        from_desired: bool = False,
    ) -> None:
        """actor: the engine, or what sits in its seat. gate: judges every chunk from the measured
        joints (None: chunks go out unchecked). controller: the trajectory controller's
        model the rows are shaped for (None: no trajectory goes out). lead_s: the
        controller's latest take-over after the send (its update period, the transport).
        velocity_cap: a velocity robot's speed bounds, every row scaled into them.
        from_desired: the "jtc" controller starts each trajectory from its last command
        (its `interpolate_from_desired_state`), not from the measured joints."""
        self._actor = actor
        self.timeline = ChunkTimeline(
            control_period_s, actor.cfg.chunk_handover, actor.delay, horizon
        )
        self._period_s = control_period_s
        self._frame_ns = round(frame_period_s * NS_PER_S)
        self._guard = None if gate is None else ChunkGuard(gate, max_rejections)
        self._limits = None if gate is None else gate.limits
        # The commanded joints without a velocity bound (shaping.setpoints); None without limits.
        self.setpoints = None if self._limits is None else shaping.setpoints(self._limits)
        self._controller = controller
        self._lead_ns = round(lead_s * NS_PER_S)
        self._velocity_cap = velocity_cap
        self._from_desired = from_desired
        # Under "jtc" the trajectories sent, run as the controller runs them: a start to screen.
        self.expected = (
            ExpectedCommand((0, self._lead_ns)) if controller == "jtc" and gate else None
        )
        self._lock = threading.Lock()  # the hold state and `expected`: used from any thread
        self._held = False  # a hold went out: the next frame meets no running chunk
        self._hold: tuple[Shaped, int, tuple[np.ndarray, np.ndarray]] | None = None  # the
        # last stop from the command (from_desired): its trajectory, instant and start
        self._standing = False  # a hold went out and no chunk since: the outage has its hold
        self._measured: Measured | None = None  # the last frame's, where a hold falls back
        self._last_stamps: tuple[int, int] | None = None  # (row0_ns, tick_ns) last sent

    @property
    def tally(self) -> GateTally | None:
        """What the gate did so far; None without a gate."""
        return None if self._guard is None else self._guard.tally

    def reset(self) -> None:
        """Forget the running chunk and the command (the robot may be anywhere when frames
        start again, or someone may have moved it)."""
        self.timeline.reset()
        with self._lock:
            if self.expected is not None:
                self.expected.forget()

    def begin(self) -> None:
        """Before a frame: after a hold, hand over from nothing (a controller that starts
        from its command keeps the hold as its command)."""
        with self._lock:
            held, self._held = self._held, False
        if held and self._from_desired:
            self.timeline.reset()
        elif held:
            self.reset()

    def act(
        self, tick_ns: int, obs: Observation, measured: Measured | None, plan: str | None = None
    ) -> Acted | None:
        """The engine's chunk for the tick (plan: a two-stage actor's given answer); None
        when a hold went out meanwhile (the chunk is stale)."""
        if measured is None and (self._guard is not None or self._controller is not None):
            raise ValueError("the gate and the trajectory need the joints' measured state")
        self._measured = measured
        takeover = self.timeline.at(tick_ns)
        action = self._actor.act(obs, takeover.handover, plan)
        with self._lock:
            if self._held:
                return None
        asked = self._actor.cfg.chunk_handover
        fell_back = takeover.handover is not None and action.handover != asked
        return Acted(takeover, action, measured, fell_back)

    def decide(self, acted: Acted, elapsed_ns: int) -> Decision:
        """What goes out `elapsed_ns` (robot clock) after the tick (module docstring)."""
        takeover, action = acted.takeover, acted.action
        published_ns = takeover.tick_ns + elapsed_ns
        cold_delay = control_steps(elapsed_ns / NS_PER_S, self._period_s)
        release = self.timeline.release(takeover, action, cold_delay)
        notes = []
        if release.clipped:
            notes.append(_clipped(action, release))
        verdict, hold = None, None
        if self._guard is not None:
            release = self._command_lead(release)
            screened = self._guard.screen(release, acted.measured.positions)
            verdict, release = screened.verdict, screened.release
            notes += [
                Note(f"gate {f.reason}", f"chunk {verdict.outcome}: {f.detail}")
                for f in verdict.findings
            ]
            if screened.trips and not self.standing:
                hold = f"the gate rejected {self._guard.max_rejections} chunks in a row"
        if release is not None and self._velocity_cap is not None:
            release = self._capped(release, notes)
        trajectory, refused = None, False
        if release is not None and self._controller is not None:
            trajectory = self._trajectory(acted, release, published_ns)
            if isinstance(trajectory, str):
                notes.append(
                    Note("trajectory refused", f"chunk not sent to the controller: {trajectory}")
                )
                release, trajectory, refused = None, None, True
        if release is None and hold is None:
            why = "no trajectory the controller can meet" if refused else "chunk rejected"
            hold = self._watchdog(takeover.tick_ns, why)
        return Decision(release, trajectory, published_ns, hold, verdict, refused, tuple(notes))

    def sent(self, decision: Decision, latency_s: float) -> StampBack | None:
        """`decision`'s rows went out `latency_s` (robot seconds) after the tick: they run
        now, the latency is one observation of d, the outage (if any) is over. Returns a
        stamp earlier than the last sent one's."""
        release = decision.release
        with self._lock:
            self._standing = False
        self.timeline.commit(release, latency_s)
        if self.expected is not None and decision.trajectory is not None:
            with self._lock:
                self.expected.sent(
                    decision.trajectory, decision.published_ns, self._measured.state()
                )
        return self._stamp_order(release.row0_ns, release.running.tick_ns)

    def skipped(self, tick_ns: int, reason: str) -> str | None:
        """A frame at `tick_ns` sends nothing (`reason`): the hold's reason when the
        watchdog holds the robot (module docstring), else None."""
        return self._watchdog(tick_ns, reason)

    def held(self, standing: bool = True) -> None:
        """A hold was decided (any thread): the next frame starts afresh. standing: it
        reached the controller, so the robot stands and this outage has its hold (False: it
        was not sent, e.g. in a dry run, and the watchdog may ask again); a stop from the
        command that went out is the controller's command from then on."""
        with self._lock:
            self._held = True
            self._standing = self._standing or standing
            hold, self._hold = self._hold, None
            if standing and hold is not None and self.expected is not None:
                self.expected.sent(*hold)

    @property
    def standing(self) -> bool:
        """A hold went out and no chunk since."""
        with self._lock:
            return self._standing

    def stop(
        self,
        positions: np.ndarray | None,
        velocities: np.ndarray | None,
        age_s: float = 0.0,
        now_ns: int | None = None,
    ) -> Shaped | None:
        """The hold's trajectory: a stop within the gate's limits from where the robot will
        be when the controller takes it over (oxygen_core.controller.shaping.stop): the
        measured `positions` moved on at `velocities` for the measurement's `age_s` now (at
        most one control period: an older joint state is a gap, whose velocity says little
        about now) and `lead_s` more. positions None (no usable joint state): where the
        last frame measured the robot, without velocities; None when no frame did either.
        A controller that starts from its command (`from_desired`) stops from where the
        command is `lead_s` after `now_ns` (robot clock), when the node knows it."""
        with self._lock:
            command = self._command(now_ns)
            if command is not None:
                stop = shaping.stop(*command, self._limits, self._period_s, 0.0)
                self._hold = (stop, now_ns, command)
                return stop
            self._hold = None
        if positions is None:
            last = self._measured
            if last is None:
                return None
            positions, velocities = last.positions, None
        ahead_s = min(max(age_s, 0.0), self._period_s) + self._lead_ns / NS_PER_S
        return shaping.stop(positions, velocities, self._limits, self._period_s, ahead_s)

    def _command(self, now_ns: int | None) -> tuple[np.ndarray, np.ndarray] | None:
        """Under `from_desired`, the controller's command `lead_s` after `now_ns` as the
        trajectories sent have it (the expected command, else the running rows); None when
        not known or the controller starts from the measured joints."""
        if not self._from_desired or now_ns is None:
            return None
        at_ns = now_ns + self._lead_ns
        expected = [] if self.expected is None else self.expected.states(at_ns)
        if expected:
            return expected[0]
        return shaping.planned_state(self.timeline.running, at_ns, self._period_s)

    def _commanded(self, at_ns: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The expected command's states at `at_ns` (`for_release`'s, any thread safe)."""
        with self._lock:
            return self.expected.states(at_ns)

    def _command_lead(self, release: Release) -> Release:
        """Under `from_desired` with nothing running, the release's lead from the command
        (after a hold: where it left the controller), so the gate eases and judges the seam
        the controller will run, not one from the measured joints."""
        if not self._from_desired or release.lead is not None or self.expected is None:
            return release
        period_ns = round(self._period_s * NS_PER_S)
        with self._lock:
            rows = [self.expected.states(release.row0_ns - k * period_ns) for k in (2, 1)]
        if not all(rows):
            return release
        lead = np.stack([states[0][0] for states in rows]).astype(np.float32)
        return dataclasses.replace(release, lead=lead)

    def _watchdog(self, tick_ns: int, reason: str) -> str | None:
        last = self.timeline.last_row_ns()
        if self.standing or last is None or last >= tick_ns + 2 * self._frame_ns:
            return None
        return reason

    def _trajectory(self, acted: Acted, release: Release, published_ns: int) -> Shaped | str:
        """The rows as the controller gets them, screened from each state the robot may be in
        at each instant it may take them over, from their publishing to `lead_s` after it."""
        return shaping.for_release(
            self._controller,
            release,
            acted.takeover.running,
            self._period_s,
            arrival_ns=published_ns + self._lead_ns,
            earliest_ns=published_ns,
            measured=acted.measured.state(),
            limits=self._limits,
            commanded=None if self.expected is None else self._commanded,
            from_desired=self._from_desired,
        )

    def _capped(self, release: Release, notes: list[Note]) -> Release:
        rows, factor = self._velocity_cap.cap(release.rows)
        if factor < 1.0:
            notes.append(
                Note(
                    "velocity cap",
                    f"chunk slowed to {factor:.0%} of its speed: a joint passed its max_velocity",
                )
            )
        return release.with_rows(rows)

    def _stamp_order(self, row0_ns: int, tick_ns: int) -> StampBack | None:
        previous, self._last_stamps = self._last_stamps, (row0_ns, tick_ns)
        if previous is None or row0_ns >= previous[0]:
            return None
        reason = "clock_back" if tick_ns < previous[1] else "delay_shrank"
        return StampBack(reason, (previous[0] - row0_ns) / NS_PER_S)


def _clipped(action: ActionResult, release: Release) -> Note:
    return Note(
        "delay clipped",
        f"delay of {action.delay_steps} control steps exceeds the chunk's "
        f"{len(action.actions)} rows: publishing from its row {release.first}",
    )
