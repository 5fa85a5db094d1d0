"""One frame of the node: inputs -> observation -> chunk out -> language out -> stats out.

A frame runs on the worker thread in two phases, as the OxyGen engine does: the action
chunk is published the moment `engine.act` returns (hard deadline), and only then does
the language phase decode, with the time left until the next tick as its budget (soft
deadline); see docs/DESIGN.md section 6. All conversions are `oxygen_ros.convert`'s; this
module only sequences them.

The frame publishes by output name through an `OutputPort` (oxygen_ros.topics) and logs
through a `FrameLogger`: the node hands it its gated lifecycle publishers and rclpy logger,
replay a bag writer and a file logger, the unit test a recorder. The steady clock is a
parameter too, so a test can drive latency and deadline misses exactly.

Chunk hand-over (docs/DESIGN.md section 10) is `oxygen_core.engine.timeline.ChunkTimeline`'s:
it keeps the chunk the robot runs, hands it to `engine.act` with the rows executed by the
tick, and says which rows go out with which stamp (d control periods after the running
row the new chunk continues); this loop only sequences it on the tick's stamp (node
clock; bag time in replay, integer nanoseconds), warns when d reached past the chunk,
counts a chunk stamped before the previous one and tells the timeline when a chunk went
out. On-demand requests go straight to the engine, which queues them thread-safely and
refuses (the loop logs why) what it could not hold.

Nothing reaches the controller unchecked (oxygen_core.safety): the released rows go
through the chunk gate (`ChunkGuard`, shared with the in-process evaluation) against the
frame's measured state of the commanded joints, and the gate's rows are what goes out, on
~/action_chunk and the trajectory alike, and what the timeline says runs. A rejected chunk
sends nothing (the robot keeps running the chunk before, gated when it went out), with one
throttled warning per finding's reason. After `max_rejections` rejections in a row the
loop holds the robot, and the safety status reports ERROR until a chunk goes through.

The watchdog: when a frame sends no chunk (an input of the robot missing, stale or bad;
a rejected chunk; a tick refused because the frame before still runs, e.g. a stalled
engine) and the running chunk's last row comes before the next frame's chunk
could arrive (the next tick plus one frame period), the loop holds the robot where it is.
One hold per outage: the robot stands until a chunk goes out again, which ends it.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from std_msgs.msg import String

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller import shaping
from oxygen_core.controller.shaping import Shaped
from oxygen_core.engine import Engine
from oxygen_core.engine.timeline import ChunkTimeline, Release, RunningChunk, Takeover
from oxygen_core.engine.types import ActionResult, LanguageResult
from oxygen_core.model.rtc import control_steps
from oxygen_core.safety.gate import ChunkGate
from oxygen_core.safety.guard import ChunkGuard
from oxygen_core.safety.velocity import VelocityCap
from oxygen_ros import topics
from oxygen_ros.convert import (
    action_chunk_msg,
    engine_stats_msg,
    language_tokens_msg,
    narration_markers,
    ns_to_stamp,
    shaped_trajectory_msg,
    stamp_to_ns,
    stop_chunk_msg,
)
from oxygen_ros.diagnostics import NodeStats
from oxygen_ros.inputs import SKIP_REASONS, FrameAssembler, Skip
from oxygen_ros.params import ChunkLayout, NodeConfig
from oxygen_ros.throttle import KeyedThrottle
from oxygen_ros.topics import FrameLogger, OutputPort

_ORIGINS_KEPT = 4096  # frames whose stamps stay known for LanguageTokens.origin_stamp
# Skips the watchdog holds for: the robot's inputs failing. An instruction cleared on
# purpose lets the running chunk end where it ends.
_OUTAGES = frozenset(SKIP_REASONS) - {"no_instruction"}


@dataclasses.dataclass(frozen=True)
class Tick:
    """One firing of the frame timer."""

    stamp: Time  # node clock (bag time in replay): stamps every output of the frame
    now_s: float  # the same instant in seconds, for input freshness
    start_s: float  # steady clock, for latency and the deadline
    deadline_s: float  # start_s + frame period: the chunk must be out by then

    @classmethod
    def at(cls, now_ns: int, steady_s: float, period_s: float) -> Tick:
        """The tick of a timer firing at node-clock time now_ns (integer nanoseconds; bag
        time in replay) and steady time steady_s, with one frame period to its deadline."""
        return cls(
            stamp=ns_to_stamp(now_ns),
            now_s=now_ns / NS_PER_S,
            start_s=steady_s,
            deadline_s=steady_s + period_s,
        )


class FrameLoop:
    """Inputs -> observation -> action chunk out -> language out -> stats out."""

    def __init__(
        self,
        *,
        engine: Engine,
        assembler: FrameAssembler,
        outputs: OutputPort,
        stats: NodeStats,
        cfg: NodeConfig,
        layout: ChunkLayout,
        logger: FrameLogger,
        clock: Callable[[], float] = time.monotonic,
        gate: ChunkGate | None = None,
        max_rejections: int = 3,
        latency_scale: float = 1.0,
        velocity_cap: VelocityCap | None = None,
    ) -> None:
        """clock: the steady clock Tick.start_s and deadline_s are on (seconds). gate: the
        chunk gate over `layout.action_names`, which the assembler must read from the joint
        state as its `commanded_names` (None: chunks go out unchecked, reported as an
        ERROR). max_rejections: rejected chunks in
        a row before the loop holds the robot. latency_scale: robot-clock seconds per
        steady second, for the delay estimate d (1 on a robot; 0 in a replay as fast as
        possible, where bag time stands still while a frame computes; R paced at R x).
        velocity_cap: a velocity robot's speed bounds, which every published row is
        scaled into (oxygen_core.safety.velocity)."""
        self._engine = engine
        self._assembler = assembler
        self._out = outputs
        self._stats = stats
        self._cfg = cfg
        self._layout = layout
        self._log = logger
        self._clock = clock
        self._origins: collections.OrderedDict[int, Time] = collections.OrderedDict()
        self._texts: dict[str, str] = {}
        self._throttle = KeyedThrottle(clock=clock)
        self._timeline = ChunkTimeline(
            cfg.control_period_s, engine.cfg.chunk_handover, engine.delay, layout.horizon
        )
        self._last_stamps: tuple[int, int] | None = None  # (row0_ns, tick_ns), kept by reset
        self._held = threading.Event()  # a hold went out: the next frame meets no chunk
        self._standing = False  # a hold went out and no chunk since: the outage has its hold
        self._frame_ns = round(cfg.frame_period_s * NS_PER_S)
        if gate is not None and not assembler.commanded_names:
            raise ValueError("the chunk gate needs action_names: it checks chunks from their state")
        self._last_state: np.ndarray | None = None  # the last frame's, for a hold
        self._guard = None if gate is None else ChunkGuard(gate, max_rejections)
        # What trajectories are screened against and holds stop within: the gate's limits.
        self._limits = None if gate is None else gate.limits
        self._lead_ns = round(cfg.controller_lead_s * NS_PER_S)
        self._velocity_cap = velocity_cap
        self._latency_scale = latency_scale
        if self._guard is not None:
            stats.gated(self._guard.tally)

    def request(self, stream: str) -> None:
        """Ask for an on-demand request of `stream` (any thread: the engine queues it
        thread-safely for its next language phase). What the engine could not hold (while
        frames skip, more than its pool rows plus queue) is refused with a warning."""
        refused = self._engine.request(stream)
        if refused is not None:
            self._log.warning(f"~/request {stream!r} refused: {refused}", throttle_duration_sec=2.0)

    def reset(self) -> None:
        """Drop the engine's requests and the running chunk (on the worker, as it ends)."""
        self._texts.clear()
        self._timeline.reset()  # the robot may have moved anywhere before the next activation
        self._engine.reset()

    def hold(self, reason: str) -> bool:
        """Stop the robot (any thread), replacing whatever its controller runs; the next
        frame hands over from nothing. A trajectory controller gets a stop stamped zero (on
        arrival) from the latest measured joint positions and velocities, decelerating within
        the joints' acceleration limits (oxygen_core.controller.shaping.stop; a JointState
        without velocities: the one point at the positions; one that is not finite: the
        last frame's measured state, where the robot last was known to be); a
        ~/command_chunk controller a chunk of 0 rows (stop). False when nothing went out:
        no controller output, no usable joint state, or the outputs closed."""
        messages = self._hold_messages(reason)
        if not messages:
            return False
        self._held.set()
        sent = False
        for name, msg, controller in messages:
            sent = self._out.publish(name, msg, controller) or sent
        if sent:
            self._standing = True
            self._stats.held(reason)
            self._warn(f"hold {reason}", f"holding the robot where it is: {reason}")
        return sent

    def _hold_messages(self, reason: str) -> list[tuple[str, Any, str | None]]:
        """(output, message, controller) of a hold on each controller output the node has."""
        names, messages = self._layout.action_names, []
        if self._cfg.command_chunk:
            stop = stop_chunk_msg(names, len(names), control_period_s=self._cfg.control_period_s)
            messages.append((topics.COMMAND_CHUNK, stop, None))
        if self._cfg.joint_trajectory:
            positions = self._assembler.measured_positions(names)
            velocities = self._assembler.measured_velocities(names)
            if positions is None:  # a non-finite JointState: the last frame's measured state
                positions, velocities = self._last_state, None
            if positions is None:
                self._warn(f"no hold {reason}", f"cannot hold ({reason}): no finite joint state")
            else:
                period = self._cfg.control_period_s
                stop = shaping.stop(positions, velocities, self._limits, period)
                messages.extend(self._trajectories(stop))
        return messages

    def _trajectories(self, shaped: Shaped) -> list[tuple[str, Any, str | None]]:
        """(output, JointTrajectory, controller) of `shaped` for each trajectory controller
        (the layout's parts, same stamp and times), or the one of every joint."""
        names = self._layout.action_names
        if not self._layout.parts:
            return [(topics.JOINT_TRAJECTORY, shaped_trajectory_msg(names, shaped), None)]
        return [
            (
                topics.JOINT_TRAJECTORY,
                shaped_trajectory_msg(part.controller.joints, part.of(shaped)),
                part.controller.name,
            )
            for part in self._layout.parts
        ]

    def overrun(self, tick_ns: int) -> None:
        """A tick the worker could not take because a frame still runs (a stalled engine,
        say; any thread): the watchdog holds the robot, once, if the running chunk ends
        before a chunk could arrive. The stalled frame then publishes nothing."""
        self._watch(tick_ns, "frame overran: no chunk in time")

    def run(self, tick: Tick) -> None:
        if self._held.is_set():
            self._held.clear()
            self._timeline.reset()  # the robot stopped: no running chunk to meet
        obs = self._assembler.assemble(tick.now_s)
        if isinstance(obs, Skip):
            self._stats.skipped(obs.detail)
            self._warn(obs.reason, f"frame skipped: {obs.detail}")
            if obs.reason in _OUTAGES:
                self._watch(stamp_to_ns(tick.stamp), obs.reason)
            return
        for slot, detail in self._assembler.blanked.items():
            self._warn(f"blank {slot}", f"camera left blank: {detail}")
        self._last_state = self._assembler.commanded
        takeover = self._timeline.at(stamp_to_ns(tick.stamp))
        action = self._engine.act(obs, takeover.handover)
        if self._held.is_set():  # held while act ran (a stall, a stop): this chunk is stale
            return
        if takeover.handover is not None and action.handover != self._engine.cfg.chunk_handover:
            self._stats.handover_fell_back()  # the previous chunk had no row left to meet
        if not self._publish_actions(tick, action, takeover):
            return  # deactivated mid-frame: no language work for a closed node
        time_left_s = max(0.0, tick.deadline_s - self._clock())
        language = self._engine.language(time_left_s=time_left_s)
        self._publish_language(tick, language)
        self._publish_stats(tick, action, language)

    def _publish_actions(self, tick: Tick, action: ActionResult, takeover: Takeover) -> bool:
        """Publish the chunk (and trajectory) at once, the rows and stamp the timeline
        releases, as the gate lets them through; False when the outputs are closed."""
        elapsed_s = (self._clock() - tick.start_s) * self._latency_scale
        cold_delay = control_steps(elapsed_s, self._cfg.control_period_s)
        release = self._timeline.release(takeover, action, cold_delay)
        if release.clipped:
            self._log.warning(
                f"delay of {action.delay_steps} control steps exceeds the chunk's "
                f"{len(action.actions)} rows: publishing from its row {release.first}",
                throttle_duration_sec=2.0,
            )
        release = self._gated(release, takeover.tick_ns)
        if release is not None and self._velocity_cap is not None:
            release = self._capped(release)
        self._remember_origin(action.frame, tick.stamp)
        if release is None:
            return True  # rejected: the robot runs the chunk before; language goes on
        trajectory = None
        if self._cfg.joint_trajectory:
            trajectory = self._trajectory(tick, release, takeover.running)
            if trajectory is None:
                return True  # no trajectory the controller can meet: as a rejection
        chunk = dataclasses.replace(action, actions=release.rows)
        stamp = ns_to_stamp(release.row0_ns)
        now_s = self._clock()
        latency_s, met = now_s - tick.start_s, now_s <= tick.deadline_s
        names, period = self._layout.action_names, self._cfg.control_period_s
        msg = action_chunk_msg(
            chunk,
            stamp=stamp,
            sequence=action.frame,
            joint_names=names,
            control_period_s=period,
            latency_s=latency_s,
            deadline_met=met,
        )
        published = self._out.publish(topics.ACTION_CHUNK, msg)
        if published and self._cfg.command_chunk:
            self._out.publish(topics.COMMAND_CHUNK, msg)
        if published and trajectory is not None:
            for name, msg, controller in self._trajectories(trajectory):
                self._out.publish(name, msg, controller)
        if published:
            self._standing = False  # a chunk runs: the outage, if any, is over
            self._stats.chunk_published(at_s=now_s, latency_s=latency_s, deadline_met=met)
            self._check_stamp_order(release.row0_ns, takeover.tick_ns)
            # The robot gets the chunk at publish, not when act returns: d ("auto") covers
            # the whole tick-to-publish time (docs/DESIGN.md section 10).
            self._timeline.commit(release, latency_s * self._latency_scale)
        return published

    def _gated(self, release: Release, tick_ns: int) -> Release | None:
        """`release` with the gate's rows; None when the gate rejected it (the streak may
        hold the robot, and so may the watchdog). One warning per finding's reason."""
        if self._guard is None:
            return release
        screened = self._guard.screen(release, self._last_state)
        self._stats.gated(self._guard.tally)
        verdict = screened.verdict
        for finding in verdict.findings:
            self._warn(f"gate {finding.reason}", f"chunk {verdict.outcome}: {finding.detail}")
        if screened.trips and not self._standing:
            self.hold(f"the gate rejected {self._guard.max_rejections} chunks in a row")
        if screened.release is None:
            self._watch(tick_ns, "chunk rejected")
        return screened.release

    def _trajectory(
        self, tick: Tick, release: Release, running: RunningChunk | None
    ) -> Shaped | None:
        """What ~/joint_trajectory gets of `release`, shaped for `controller_model` and
        screened as that controller will run it from the state at arrival: where the
        `running` chunk has the robot then and where it was last measured, both
        (oxygen_core.controller.shaping.for_release); None when no trajectory may go out
        (one warning per throttle period; the watchdog may hold the robot)."""
        elapsed_ns = round((self._clock() - tick.start_s) * self._latency_scale * NS_PER_S)
        velocity = self._assembler.measured_velocities(self._layout.action_names)
        shaped = shaping.for_release(
            self._cfg.controller_model,
            release,
            running,
            self._cfg.control_period_s,
            arrival_ns=stamp_to_ns(tick.stamp) + elapsed_ns + self._lead_ns,
            measured=(
                self._last_state,
                np.zeros_like(self._last_state) if velocity is None else velocity,
            ),
            limits=self._limits,
        )
        if isinstance(shaped, Shaped):
            return shaped
        self._stats.trajectory_refused()
        self._warn("trajectory refused", f"chunk not sent to the controller: {shaped}")
        self._watch(stamp_to_ns(tick.stamp), "no trajectory the controller can meet")
        return None

    def _capped(self, release: Release) -> Release:
        """`release` with its rows scaled into the robot's velocity bounds (one warning
        per throttle period when some row was)."""
        rows, factor = self._velocity_cap.cap(release.rows)
        if factor < 1.0:
            self._warn(
                "velocity cap",
                f"chunk slowed to {factor:.0%} of its speed: a joint passed its max_velocity",
            )
        return release.with_rows(rows)

    def _watch(self, tick_ns: int, reason: str) -> None:
        """The watchdog: hold the robot, once per outage, when the running chunk's last row
        comes before the next frame's chunk could arrive (the next tick + one frame)."""
        last = self._timeline.last_row_ns()
        if self._standing or last is None or last >= tick_ns + 2 * self._frame_ns:
            return
        self.hold(reason)

    def _warn(self, key: str, message: str) -> None:
        """One line per key (a skip reason, a blank camera) per throttle period."""
        line = self._throttle.line(key, message)
        if line is not None:
            self._log.warning(line)

    def _check_stamp_order(self, row0_ns: int, tick_ns: int) -> None:
        """Warn and count a chunk stamped before the previous one, with the reason."""
        previous, self._last_stamps = self._last_stamps, (row0_ns, tick_ns)
        if previous is None or row0_ns >= previous[0]:
            return
        reason = "clock_back" if tick_ns < previous[1] else "delay_shrank"
        self._stats.stamp_went_back(reason)
        self._warn(
            f"stamp {reason}",
            f"action chunk stamped {(previous[0] - row0_ns) / NS_PER_S:.3f} s before the previous "
            f"one ({reason})",
        )

    def _publish_language(self, tick: Tick, language: LanguageResult) -> None:
        for event in language.events:
            origin = self._origins.get(event.origin_frame, Time())
            msg = language_tokens_msg(event, stamp=tick.stamp, origin_stamp=origin)
            self._out.publish(topics.TOKENS, msg, event.stream)
            self._texts[event.stream] = event.text
            if event.finished:
                self._out.publish(topics.TEXT, String(data=event.text), event.stream)
        if language.events:
            markers = narration_markers(
                self._texts, stamp=tick.stamp, frame_id=self._cfg.marker_frame_id
            )
            self._out.publish(topics.MARKERS, markers)

    def _publish_stats(self, tick: Tick, action: ActionResult, language: LanguageResult) -> None:
        frame_s = self._clock() - tick.start_s
        self._stats.frame_finished(frame_s, language)
        msg = engine_stats_msg(
            stamp=tick.stamp,
            action=action,
            language=language,
            frame_s=frame_s,
            budget_s=self._cfg.frame_period_s,
            deadline_misses=self._stats.snapshot().deadline_misses,
            skipped_frames=sum(self._assembler.skip_counts.values()),
        )
        self._out.publish(topics.STATS, msg)

    def _remember_origin(self, frame: int, stamp: Time) -> None:
        self._origins[frame] = stamp
        if len(self._origins) > _ORIGINS_KEPT:
            self._origins.popitem(last=False)
