"""One frame of the node: inputs -> observation -> chunk out -> language out -> stats out.

A frame runs on the worker thread in two phases, as the OxyGen engine does: the action
chunk is published the moment `engine.act` returns (hard deadline), and only then does
the language phase decode, with the time left until the next tick as its budget (soft
deadline); see docs/DESIGN.md section 6. All conversions are `oxygen_ros.convert`'s; this
module only sequences them.

The frame's action phase is the control step's (`oxygen_core.control_step.ControlStep`,
the one copy the in-process evaluation runs too): the tick against the running chunk,
the engine's act, the rows released from d through the chunk gate against the frame's
measured state of the commanded joints, shaped for `controller_model`, the watchdog and
the delay estimate. This loop converts its decision into messages and publishes them at
once: the rows on ~/action_chunk (and ~/command_chunk), the trajectory per controller;
the decision's warnings go out throttled per key, its counts to the node's stats. A
rejected chunk, or one the controller could not meet, sends nothing (the robot keeps
running the chunk before); after `max_rejections` rejections in a row, or when the
running chunk ends before the next chunk could arrive while none comes (the watchdog: an
input missing, stale or bad; a tick refused because the frame before still runs), the
robot is held.

Everything goes out through the motion authority (`oxygen_ros.motion`), which decides
whether it reaches the controller and sends every hold; this loop only says what a hold
is (`hold_messages`). The authority sits in front of the node's gated lifecycle
publishers, replay's bag writer or a test's recorder, and the loop logs through a
`FrameLogger` (rclpy's, a file logger); the steady clock is a parameter too, so a test
can drive latency and deadline misses exactly. On-demand requests go straight to the
engine, which queues them thread-safely and refuses (the loop logs why) what it could
not hold.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np
from builtin_interfaces.msg import Time
from std_msgs.msg import String

from oxygen_core.clock import NS_PER_S
from oxygen_core.control_step import Acted, ControlStep, Decision, Measured, Note
from oxygen_core.controller.shaping import Shaped
from oxygen_core.engine import Engine
from oxygen_core.engine.types import ActionResult, LanguageResult
from oxygen_core.safety.gate import ChunkGate
from oxygen_core.safety.velocity import VelocityCap
from oxygen_ros import topics
from oxygen_ros.convert import (
    action_chunk_msg,
    engine_stats_msg,
    language_tokens_msg,
    narration_markers,
    ns_to_stamp,
    shaped_trajectory_msg,
    stop_chunk_msg,
)
from oxygen_ros.diagnostics import NodeStats
from oxygen_ros.inputs import JOINT_STATE, SKIP_REASONS, FrameAssembler, Skip
from oxygen_ros.motion import RESUME_HOLD, MotionAuthority, Outgoing
from oxygen_ros.params import ChunkLayout, NodeConfig
from oxygen_ros.throttle import KeyedThrottle
from oxygen_ros.topics import FrameLogger

_ORIGINS_KEPT = 4096  # frames whose stamps stay known for LanguageTokens.origin_stamp
# Skips the watchdog holds for: the robot's inputs failing. An instruction cleared on
# purpose lets the running chunk end where it ends.
_OUTAGES = frozenset(SKIP_REASONS) - {"no_instruction"}


@dataclasses.dataclass(frozen=True)
class Tick:
    """One firing of the frame timer."""

    ns: int  # node clock (bag time in replay), integer nanoseconds: the frame's time
    stamp: Time  # the same instant: stamps every output of the frame
    start_s: float  # steady clock, for latency and the deadline
    deadline_s: float  # start_s + frame period: the chunk must be out by then

    @classmethod
    def at(cls, now_ns: int, steady_s: float, period_s: float) -> Tick:
        """The tick of a timer firing at node-clock time now_ns (integer nanoseconds; bag
        time in replay) and steady time steady_s, with one frame period to its deadline."""
        return cls(now_ns, ns_to_stamp(now_ns), steady_s, steady_s + period_s)

    @property
    def now_s(self) -> float:
        """The tick in seconds, for input freshness."""
        return self.ns / NS_PER_S


class FrameLoop:
    """Inputs -> observation -> action chunk out -> language out -> stats out."""

    def __init__(
        self,
        *,
        engine: Engine,
        assembler: FrameAssembler,
        motion: MotionAuthority,
        stats: NodeStats,
        cfg: NodeConfig,
        layout: ChunkLayout,
        logger: FrameLogger,
        clock: Callable[[], float] = time.monotonic,
        now_ns: Callable[[], int] | None = None,
        gate: ChunkGate | None = None,
        max_rejections: int = 3,
        latency_scale: float = 1.0,
        velocity_cap: VelocityCap | None = None,
    ) -> None:
        """motion: the outputs, through the authority that decides what reaches the
        controller and sends the holds (this loop says what a hold is). clock: the steady
        clock Tick.start_s and deadline_s are on (seconds). now_ns: the node's clock (bag
        time in replay), against which a hold reads its joint state's age (None: taken as
        fresh). gate: the
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
        self._motion = motion
        self._stats = stats
        self._cfg = cfg
        self._layout = layout
        self._log = logger
        self._clock = clock
        self._now_ns = now_ns
        self._origins: collections.OrderedDict[int, Time] = collections.OrderedDict()
        self._texts: dict[str, str] = {}
        self._throttle = KeyedThrottle(clock=clock)
        if gate is not None and not assembler.commanded_names:
            raise ValueError("the chunk gate needs action_names: it checks chunks from their state")
        self._step = ControlStep(
            engine,
            control_period_s=cfg.control_period_s,
            frame_period_s=cfg.frame_period_s,
            horizon=layout.horizon,
            gate=gate,
            max_rejections=max_rejections,
            controller=cfg.controller_model if cfg.joint_trajectory else None,
            lead_s=cfg.controller_lead_s,
            velocity_cap=velocity_cap,
            from_desired=cfg.interpolate_from_desired_state,
        )
        self._latency_scale = latency_scale
        if gate is not None:
            stats.gated(self._step.tally)
        motion.serve(self)

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
        self._step.reset()  # the robot may have moved anywhere before the next activation
        self._engine.reset()

    def held(self, reason: str, sent: bool) -> None:
        """The motion authority decided a hold (any thread); `sent`: it went out. The next
        frame hands over from nothing either way."""
        self._step.held(standing=sent)
        if sent:
            self._stats.held(reason)
            self._warn(f"hold {reason}", f"holding the robot where it is: {reason}")

    def hold_messages(self, reason: str) -> list[Outgoing]:
        """A hold on each controller output the node has (for the motion authority, any
        thread): a trajectory controller gets a stop stamped zero (on arrival) from the
        latest measured joint positions and velocities, moved on for the JointState's age,
        decelerating within the joints' acceleration limits (ControlStep.stop; a JointState
        without velocities: the one point at the positions; one that is not finite: the last
        frame's measured state, where the robot last was known to be; a controller that
        interpolates from its desired state: from its command, where known); a ~/command_chunk
        controller a chunk of 0 rows (stop). [] when there is nothing to hold at."""
        names, messages = self._layout.action_names, []
        if self._cfg.command_chunk:
            stop = stop_chunk_msg(names, len(names), control_period_s=self._cfg.control_period_s)
            messages.append((topics.COMMAND_CHUNK, stop, None))
        if self._cfg.joint_trajectory:
            if reason == RESUME_HOLD:  # the robot may have been moved while dark
                self._step.reset()
            positions = self._assembler.measured_positions(names)
            velocities = self._assembler.measured_velocities(names)
            now_ns = None if self._now_ns is None else self._now_ns()
            stop = self._step.stop(positions, velocities, self._joint_state_age_s(), now_ns)
            if stop is None:
                self._warn(f"no hold {reason}", f"cannot hold ({reason}): no finite joint state")
            else:
                messages.extend(self._trajectories(stop))
        return messages

    def _joint_state_age_s(self) -> float:
        """How old the latest JointState is by its stamp on the node's clock (0 without
        the clock or before the first one)."""
        if self._now_ns is None:
            return 0.0
        age = self._assembler.freshness(self._now_ns() / NS_PER_S)[JOINT_STATE]
        return age if math.isfinite(age) else 0.0

    def _trajectories(self, shaped: Shaped) -> list[Outgoing]:
        """(output, JointTrajectory, controller) of `shaped` for each trajectory controller
        (the layout's parts, same stamp and times; a setpoints' controller positions only),
        or the one of every joint."""
        names = self._layout.action_names
        if not self._layout.parts:
            return [(topics.JOINT_TRAJECTORY, shaped_trajectory_msg(names, shaped), None)]
        setpoints = self._step.setpoints
        return [
            (
                topics.JOINT_TRAJECTORY,
                shaped_trajectory_msg(part.controller.joints, part.of(shaped, setpoints)),
                part.controller.name,
            )
            for part in self._layout.parts
        ]

    def overrun(self, tick_ns: int) -> None:
        """A tick the worker could not take because a frame still runs (a stalled engine,
        say; any thread): the watchdog holds the robot, once, if the running chunk ends
        before a chunk could arrive. The stalled frame then publishes nothing."""
        self._hold_if(self._step.skipped(tick_ns, "frame overran: no chunk in time"))

    def run(self, tick: Tick) -> None:
        self._motion.frame_starts()  # a resume of the controller output waits for a frame
        self._step.begin()
        obs = self._assembler.assemble(tick.now_s)
        if isinstance(obs, Skip):
            self._stats.skipped(obs.detail)
            self._warn(obs.reason, f"frame skipped: {obs.detail}")
            if obs.reason in _OUTAGES:
                self._hold_if(self._step.skipped(tick.ns, obs.reason))
            return
        for slot, detail in self._assembler.blanked.items():
            self._warn(f"blank {slot}", f"camera left blank: {detail}")
        acted = self._step.act(tick.ns, obs, self._measured())
        if acted is None:  # held while act ran (a stall, a stop): this chunk is stale
            return
        if acted.fell_back:
            self._stats.handover_fell_back()  # the previous chunk had no row left to meet
        if not self._publish_actions(tick, acted):
            return  # deactivated mid-frame: no language work for a closed node
        time_left_s = max(0.0, tick.deadline_s - self._clock())
        language = self._engine.language(time_left_s=time_left_s)
        self._publish_language(tick, language)
        self._publish_stats(tick, acted.action, language)

    def _measured(self) -> Measured | None:
        """The commanded joints in the frame's JointState (None without commanded joints)."""
        positions = self._assembler.commanded
        if positions is None:
            return None
        return Measured(np.asarray(positions, np.float64), self._assembler.commanded_velocities)

    def _publish_actions(self, tick: Tick, acted: Acted) -> bool:
        """Publish the chunk (and trajectory) at once, what the control step decides to
        send now; False when the outputs are closed."""
        elapsed_s = (self._clock() - tick.start_s) * self._latency_scale
        decision = self._step.decide(acted, round(elapsed_s * NS_PER_S))
        self._report(decision)
        self._remember_origin(acted.action.frame, tick.stamp)
        self._hold_if(decision.hold)
        release = decision.release
        if release is None:
            return True  # nothing goes out: the robot runs the chunk before; language goes on
        chunk = dataclasses.replace(acted.action, actions=release.rows)
        now_s = self._clock()
        latency_s, met = now_s - tick.start_s, now_s <= tick.deadline_s
        msg = action_chunk_msg(
            chunk,
            stamp=ns_to_stamp(release.row0_ns),
            sequence=acted.action.frame,
            joint_names=self._layout.action_names,
            control_period_s=self._cfg.control_period_s,
            latency_s=latency_s,
            deadline_met=met,
        )
        published = self._motion.publish(topics.ACTION_CHUNK, msg)
        if published and self._cfg.command_chunk:
            self._motion.publish(topics.COMMAND_CHUNK, msg)
        if published and decision.trajectory is not None:
            for name, msg, controller in self._trajectories(decision.trajectory):
                self._motion.publish(name, msg, controller)
        if published:
            self._stats.chunk_published(at_s=now_s, latency_s=latency_s, deadline_met=met)
            # The robot gets the chunk at publish, not when act returns: d ("auto") covers
            # the whole tick-to-publish time (docs/DESIGN.md section 10).
            back = self._step.sent(decision, latency_s * self._latency_scale)
            if back is not None:
                self._stats.stamp_went_back(back.reason)
                self._note(back.note)
        return published

    def _report(self, decision: Decision) -> None:
        """The decision's warnings and counts."""
        if decision.verdict is not None:
            self._stats.gated(self._step.tally)
        if decision.refused:
            self._stats.trajectory_refused()
        for note in decision.notes:
            self._note(note)

    def _hold_if(self, reason: str | None) -> None:
        if reason is not None:
            self._motion.hold(reason)

    def _note(self, note: Note) -> None:
        self._warn(note.key, note.message)

    def _warn(self, key: str, message: str) -> None:
        """One line per key (a skip reason, a blank camera) per throttle period."""
        line = self._throttle.line(key, message)
        if line is not None:
            self._log.warning(line)

    def _publish_language(self, tick: Tick, language: LanguageResult) -> None:
        for event in language.events:
            origin = self._origins.get(event.origin_frame, Time())
            msg = language_tokens_msg(event, stamp=tick.stamp, origin_stamp=origin)
            self._motion.publish(topics.TOKENS, msg, event.stream)
            self._texts[event.stream] = event.text
            if event.finished:
                self._motion.publish(topics.TEXT, String(data=event.text), event.stream)
        if language.events:
            markers = narration_markers(
                self._texts, stamp=tick.stamp, frame_id=self._cfg.marker_frame_id
            )
            self._motion.publish(topics.MARKERS, markers)

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
        self._motion.publish(topics.STATS, msg)

    def _remember_origin(self, frame: int, stamp: Time) -> None:
        self._origins[frame] = stamp
        if len(self._origins) > _ORIGINS_KEPT:
            self._origins.popitem(last=False)
