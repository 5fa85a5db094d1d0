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

Chunk hand-over (docs/DESIGN.md section 10): the loop remembers the last chunk it
sent (`SentChunk`: the rows published and the node-clock time its row 0 executes). With
chunk_handover blend or rtc, each frame hands it to `engine.act` with the rows executed
by the tick's time; the engine answers with d, the control steps that run before the new
chunk can arrive, and the chunk goes out stamped d control periods after the tick
(on the previous chunk's control grid: `_handover`) with its rows from d on, so its
first point is where the robot is when it takes over. With replace there is no handover
and d is 0: the chunk is stamped at the tick with all its rows, as it always was. All
hand-over time is the tick's stamp (node clock; bag time in replay) in integer
nanoseconds, so step counts are exact. After a reset (deactivate) or a tick earlier than
the last chunk's, the next frame has no handover.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable

import numpy as np
from builtin_interfaces.msg import Time
from std_msgs.msg import String

from oxygen_core.engine import Engine
from oxygen_core.engine.types import ActionResult, Handover, LanguageResult
from oxygen_core.model.rtc import shift_chunk
from oxygen_ros import topics
from oxygen_ros.convert import (
    action_chunk_msg,
    engine_stats_msg,
    joint_trajectory_msg,
    language_tokens_msg,
    narration_markers,
    ns_to_stamp,
    stamp_to_ns,
)
from oxygen_ros.diagnostics import NodeStats
from oxygen_ros.inputs import FrameAssembler, Skip
from oxygen_ros.params import ChunkLayout, NodeConfig
from oxygen_ros.throttle import KeyedThrottle
from oxygen_ros.topics import FrameLogger, OutputPort

_ORIGINS_KEPT = 4096  # frames whose stamps stay known for LanguageTokens.origin_stamp


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
            now_s=now_ns * 1e-9,
            start_s=steady_s,
            deadline_s=steady_s + period_s,
        )


@dataclasses.dataclass(frozen=True)
class SentChunk:
    """What the robot executes from the last chunk's row-0 time on: the d rows of the plan
    before it that run until it takes over, then the rows it published. With d within a
    frame (d <= execute_horizon) the next tick lies past the first d rows; with a longer
    delay it does not, and the next chunk must meet these, not the unstarted chunk's."""

    rows: np.ndarray  # float32 [rows, D], robot units: the plan's d rows, then the published
    row0_ns: int  # node clock at which rows[0] executes
    tick_ns: int  # the stamp of the frame that computed it


def _plan(
    handover: Handover | None,
    first: int,
    rows: np.ndarray,
    anchor_ns: int,
    period_ns: int,
    tick_ns: int,
) -> SentChunk:
    """The robot's commands from the new chunk's row-0 time (`anchor_ns`): the previous
    plan's rows for the `first` (d) steps before the new rows take over (its last row held
    if it ends sooner), then the new rows. Without a handover, the new rows from d on."""
    rows = np.asarray(rows, np.float32)
    if handover is None or first == 0:
        return SentChunk(rows, anchor_ns + first * period_ns, tick_ns)
    running = shift_chunk(np.asarray(handover.previous, np.float32), handover.executed, first)
    return SentChunk(np.concatenate([running, rows]), anchor_ns, tick_ns)


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
    ) -> None:
        """clock: the steady clock Tick.start_s and deadline_s are on (seconds)."""
        self._engine = engine
        self._assembler = assembler
        self._out = outputs
        self._stats = stats
        self._cfg = cfg
        self._layout = layout
        self._log = logger
        self._clock = clock
        self._requests: collections.deque[str] = collections.deque()
        self._origins: collections.OrderedDict[int, Time] = collections.OrderedDict()
        self._texts: dict[str, str] = {}
        self._throttle = KeyedThrottle(clock=clock)
        self._period_ns = round(cfg.control_period_s * 1e9)
        self._sent: SentChunk | None = None  # the handover source; None after a reset
        self._last_stamps: tuple[int, int] | None = None  # (row0_ns, tick_ns), kept by reset

    def request(self, stream: str) -> None:
        """Ask for an on-demand request of `stream` (any thread; the worker passes it on).

        Requests wait here until a frame runs. While frames skip (no inputs), more than the
        engine could hold (pool rows plus queue) are refused with a warning, not hoarded.
        """
        engine_cfg = self._engine.cfg
        limit = engine_cfg.max_active_requests + engine_cfg.max_queued_requests
        if len(self._requests) >= limit:
            self._log.warning(
                f"~/request {stream!r} refused: {limit} requests already wait for a frame "
                f"(max_active_requests + max_queued_requests)",
                throttle_duration_sec=2.0,
            )
            return
        self._requests.append(stream)

    def reset(self) -> None:
        """Drop waiting requests and the engine's requests (on the worker, as it ends)."""
        self._requests.clear()
        self._texts.clear()
        self._sent = None  # the robot may have moved anywhere before the next activation
        self._engine.reset()

    def run(self, tick: Tick) -> None:
        obs = self._assembler.assemble(tick.now_s)
        if isinstance(obs, Skip):
            self._stats.skipped(obs.detail)
            self._warn(obs.reason, f"frame skipped: {obs.detail}")
            return
        for slot, detail in self._assembler.blanked.items():
            self._warn(f"blank {slot}", f"camera left blank: {detail}")
        while self._requests:
            self._engine.request(self._requests.popleft())
        handover, anchor_ns = self._handover(tick)
        action = self._engine.act(obs, handover)
        if handover is not None and action.handover == "replace":
            self._stats.handover_fell_back()  # the previous chunk had no row left to meet
        if not self._publish_actions(tick, action, anchor_ns, handover):
            return  # deactivated mid-frame: no language work for a closed node
        time_left_s = max(0.0, tick.deadline_s - self._clock())
        language = self._engine.language(time_left_s=time_left_s)
        self._publish_language(tick, language)
        self._publish_stats(tick, action, language)

    def _handover(self, tick: Tick) -> tuple[Handover | None, int]:
        """The sent chunk with its rows executed by the tick (None: nothing to meet), and
        the node-clock time the new chunk's row 0 stands for (`anchor`).

        executed is the sent row whose time is nearest the tick, not the floor: tick
        stamps jitter by the executor's latency, and a tick 1 ms early of a whole number
        of steps would floor to one step too few. With a handover, the new chunk's row i
        continues sent row executed + i, so the anchor is that row's time: every chunk
        stays on the first one's control grid (within half a step of the tick)."""
        tick_ns = stamp_to_ns(tick.stamp)
        sent = self._sent
        if self._engine.cfg.chunk_handover == "replace" or sent is None:
            return None, tick_ns
        if tick_ns < sent.tick_ns:  # the clock went back (sim reset, bag loop)
            self._sent = None
            return None, tick_ns
        period = self._period_ns
        executed = max(0, (tick_ns - sent.row0_ns + period // 2) // period)
        handover = Handover(sent.rows, executed, self._cfg.control_period_s)
        return handover, sent.row0_ns + executed * period

    def _first_row(self, action: ActionResult) -> int:
        """d, the chunk's first row to publish (rows before it run before it arrives)."""
        last = len(action.actions) - 1
        if action.delay_steps > last:
            self._log.warning(
                f"delay of {action.delay_steps} control steps exceeds the chunk's "
                f"{last + 1} rows: publishing its last row only",
                throttle_duration_sec=2.0,
            )
        return min(action.delay_steps, last)

    def _publish_actions(
        self, tick: Tick, action: ActionResult, anchor_ns: int, handover: Handover | None
    ) -> bool:
        """Publish the chunk (and trajectory) at once, from row d, stamped d control steps
        after `anchor_ns` (the time of its row 0); False when the outputs are closed."""
        first = self._first_row(action)
        rows = action.actions[first : first + self._layout.horizon]
        chunk = dataclasses.replace(action, actions=rows)
        tick_ns = stamp_to_ns(tick.stamp)
        row0_ns = anchor_ns + first * self._period_ns
        stamp = ns_to_stamp(row0_ns)
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
        if published and self._cfg.joint_trajectory:
            trajectory = joint_trajectory_msg(
                chunk, stamp=stamp, joint_names=names, control_period_s=period
            )
            self._out.publish(topics.JOINT_TRAJECTORY, trajectory)
        if published:
            self._stats.chunk_published(at_s=now_s, latency_s=latency_s, deadline_met=met)
            self._check_stamp_order(row0_ns, tick_ns)
            self._sent = _plan(handover, first, rows, anchor_ns, self._period_ns, tick_ns)
            # The robot gets the chunk at publish, not when act returns: d ("auto") must
            # cover the whole tick-to-publish time (docs/DESIGN.md section 10).
            self._engine.delay.observe(latency_s)
        self._remember_origin(action.frame, tick.stamp)
        return published

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
            f"action chunk stamped {(previous[0] - row0_ns) * 1e-9:.3f} s before the previous "
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
