"""FrameLoop alone: a fake engine, a recording output port, an injected clock.

The real engine needs a model and real time; here `FakeEngine` (named as the fake it is)
returns actions and token events computed by plain arithmetic from the frame number, and
advances a `FakeClock` by fixed phase times, so every latency, deadline and count below is
exact and nothing depends on how busy the machine is. The assembler, stats, output gate,
chunk gate, converters and messages are the real ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Header

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller.split import ControllerJoints, split
from oxygen_core.engine.scheduler import Scheduler
from oxygen_core.engine.types import (
    ActionResult,
    EngineConfig,
    Handover,
    LanguageResult,
    TokenEvent,
)
from oxygen_core.model.rtc import DelayEstimator
from oxygen_core.observation import Observation
from oxygen_core.safety.gate import ChunkGate
from oxygen_core.safety.limits import JointLimits
from oxygen_core.safety.velocity import VelocityCap
from oxygen_ros import topics
from oxygen_ros.convert import seconds_to_stamp
from oxygen_ros.diagnostics import DiagnosticsReporter, InputReport, NodeStats
from oxygen_ros.frame import FrameLoop, Tick
from oxygen_ros.inputs import FrameAssembler
from oxygen_ros.motion import MotionAuthority
from oxygen_ros.params import ChunkLayout, NodeConfig
from oxygen_ros.topics import LifecycleGate

JOINTS = ("a", "b")
PERIOD_S = 0.1  # execute_horizon 5 at 50 Hz
MODEL_HORIZON, HORIZON = 6, 4
CFG = NodeConfig(
    camera_topics=("/cam",),
    joint_names=JOINTS,
    stream_names=("narration", "memory"),
    execute_horizon=5,
    control_rate_hz=50.0,
    instruction="stack",
    # The rows as the timeline releases them, which these tests read; what "jtc" makes of
    # them is tested by the jtc tests at the end.
    controller_model="none",
)


class FakeClock:
    """The steady clock, moved only by the fake engine."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class FakeEngine:
    """A fake of oxygen_core.engine.Engine: arithmetic results, fixed phase times.

    act: chunk [MODEL_HORIZON, 2] with value 10 * frame + row. language: on frame 0 one
    narration event "n0" (running), on frame 1 that request finishes ("n0 n1", eos) and a
    memory request starts and finishes at once ("m1", max_tokens); nothing after.
    Hand-over: act records the handover it gets and answers with the next of `delays` as
    d (0 without `delays`); mode is the configured one when the
    handover still has a row at `executed`, else replace, as the real engine decides.
    `delay` is the real DelayEstimator, so what the loop feeds it is observable, and
    requests go to a real `Scheduler` (1 pool row, a queue of 1), which takes or refuses
    them as the engine's does.
    """

    def __init__(
        self,
        clock: FakeClock,
        act_s: list[float],
        language_s: float = 0.02,
        handover: str = "replace",
        delays: list[int] = (),
    ) -> None:
        self.cfg = EngineConfig(
            max_active_requests=1, max_queued_requests=1, chunk_handover=handover
        )
        self.clock, self.act_s, self.language_s = clock, list(act_s), language_s
        self.delays = list(delays)
        self.state = [0.5, -0.5]  # the joint state the rig fed, in the model's order
        self.frame = -1
        self.scheduler = Scheduler(self.cfg.streams, 1, (1,), "queue", 1)
        self.time_left: list[float] = []
        self.handovers: list[Handover | None] = []
        self.delay = DelayEstimator()
        self.on_act = lambda: None  # a test's hook: what happens while phase 1 runs

    def act(
        self, obs: Observation, handover: Handover | None = None, plan_answer: str | None = None
    ) -> ActionResult:
        assert obs.prompt == "stack" and obs.state.tolist() == self.state
        self.frame += 1
        self.handovers.append(handover)
        self.clock.now_s += self.act_s[self.frame]
        self.on_act()
        rows = np.arange(MODEL_HORIZON, dtype=np.float32)[:, None]
        actions = np.hstack([rows, -rows]) + 10 * self.frame
        if handover is None:
            return ActionResult(self.frame, actions, prefill_s=0.001, denoise_s=0.002)
        overlaps = handover.executed < len(handover.previous)
        mode = self.cfg.chunk_handover if overlaps else "replace"
        delay = self.delays[self.frame] if self.delays else 0
        return ActionResult(self.frame, actions, 0.001, 0.002, mode, delay)

    def request(self, stream: str) -> str | None:
        return self.scheduler.demand(stream)

    def language(self, time_left_s: float | None = None) -> LanguageResult:
        self.time_left.append(time_left_s)
        self.clock.now_s += self.language_s
        events = {
            0: (_event(0, "narration", 0, "n0", "n0", None),),
            1: (
                _event(0, "narration", 0, " n1", "n0 n1", "eos"),
                _event(1, "memory", 1, "m1", "m1", "max_tokens"),
            ),
        }.get(self.frame, ())
        return LanguageResult(self.frame, events, self.language_s, 2, 1, 1, 0, 0, 0, len(events), 1)

    def reset(self) -> None:
        self.scheduler.clear()


def _event(rid: int, stream: str, origin: int, delta: str, text: str, reason) -> TokenEvent:
    return TokenEvent(rid, stream, origin, (7,), delta, text, reason is not None, reason)


class RecordingPort:
    """An OutputPort behind the node's real LifecycleGate, recording (name, stream, msg)."""

    def __init__(self, gate: LifecycleGate) -> None:
        self.gate = gate
        self.sent: list[tuple[str, str | None, object]] = []

    def publish(self, name: str, msg: object, stream: str | None = None) -> bool:
        return self.gate.run(lambda: self.sent.append((name, stream, msg)))


class RecordingLogger:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, **kwargs: object) -> None:
        self.warnings.append(message)


@dataclasses.dataclass
class Rig:
    loop: FrameLoop
    motion: MotionAuthority  # live: enabled, activated, a frame started
    engine: FakeEngine
    port: RecordingPort
    stats: NodeStats
    assembler: FrameAssembler
    clock: FakeClock
    log: RecordingLogger

    def tick(self, now_s: float = 10.0) -> None:
        self.loop.run(Tick.at(round(now_s * NS_PER_S), self.clock(), PERIOD_S))

    def feed(self, stamp_s: float = 10.0, a: float = 0.5, b: float = -0.5) -> None:
        self.feed_joints(stamp_s, a, b)
        self.assembler.on_image(0, _mono(stamp_s))

    def feed_joints(self, stamp_s: float, a: float = 0.5, b: float = -0.5) -> None:
        """A JointState of joints a and b, listed b first (the model's order is a, b)."""
        header = Header(stamp=seconds_to_stamp(stamp_s))
        self.assembler.on_joint_state(JointState(header=header, name=["b", "a"], position=[b, a]))
        self.engine.state = [a, b]


def rig(
    act_s: list[float],
    *,
    open_gate: bool = True,
    handover: str = "replace",
    delays=(),
    cameras=CFG.camera_topics,
    missing_camera="skip",
    chunk_gate: ChunkGate | None = None,
    max_rejections: int = 3,
    cfg: NodeConfig = CFG,
    velocity_cap: VelocityCap | None = None,
    parts: tuple = (),
    now_ns=None,
) -> Rig:
    clock = FakeClock()
    engine = FakeEngine(clock, act_s, handover=handover, delays=list(delays))
    gate = LifecycleGate()
    if open_gate:
        gate.open()
    port, stats, log = RecordingPort(gate), NodeStats(), RecordingLogger()
    motion = MotionAuthority(port, stats, enabled=True)
    assembler = FrameAssembler(
        camera_topics=cameras,
        joint_names=JOINTS,
        state_dim=2,
        image_size=8,
        stale_timeout_s=0.5,
        sync_slop_s=0.05,
        missing_camera=missing_camera,
        commanded_names=JOINTS,
    )
    loop = FrameLoop(
        engine=engine,
        assembler=assembler,
        motion=motion,
        stats=stats,
        cfg=cfg,
        layout=ChunkLayout(horizon=HORIZON, action_names=JOINTS, parts=parts),
        logger=log,
        clock=clock,
        now_ns=now_ns,
        gate=chunk_gate,
        max_rejections=max_rejections,
        velocity_cap=velocity_cap,
    )
    motion.activated()
    motion.frame_starts()
    return Rig(loop, motion, engine, port, stats, assembler, clock, log)


def test_each_frame_publishes_the_chunk_first_then_language_then_stats():
    r = rig(act_s=[0.03, 0.04, 0.05])
    r.assembler.on_instruction("stack")
    r.feed()
    for _ in range(3):
        r.tick()
    names = [(name, stream) for name, stream, _ in r.port.sent]
    chunk, trajectory = (topics.ACTION_CHUNK, None), (topics.JOINT_TRAJECTORY, None)
    stats, markers = (topics.STATS, None), (topics.MARKERS, None)
    assert names == [
        chunk, trajectory, (topics.TOKENS, "narration"), markers, stats,
        chunk, trajectory, (topics.TOKENS, "narration"), (topics.TEXT, "narration"),
        (topics.TOKENS, "memory"), (topics.TEXT, "memory"), markers, stats,
        chunk, trajectory, stats,
    ]  # fmt: skip
    chunks = [m for name, _, m in r.port.sent if name == topics.ACTION_CHUNK]
    assert [c.sequence for c in chunks] == [0, 1, 2]
    assert (chunks[1].horizon, chunks[1].action_dim) == (HORIZON, 2)
    assert list(chunks[1].actions) == [10, 10, 11, 9, 12, 8, 13, 7]  # first HORIZON rows
    texts = [(s, m.data) for name, s, m in r.port.sent if name == topics.TEXT]
    assert texts == [("narration", "n0 n1"), ("memory", "m1")]
    tokens = [m for name, _, m in r.port.sent if name == topics.TOKENS]
    assert [(m.stream, m.text, m.finished, m.finish_reason) for m in tokens] == [
        ("narration", "n0", False, ""),
        ("narration", "n0 n1", True, "eos"),
        ("memory", "m1", True, "max_tokens"),
    ]
    # Language gets what is left of the period after phase 1 (and the chunk's publish).
    assert r.engine.time_left == pytest.approx([0.07, 0.06, 0.05])


def test_deadline_misses_are_counted_exactly_from_the_injected_clock():
    r = rig(act_s=[0.05, 0.15, 0.1, 0.2, 0.01])  # period 0.1: frames 1 and 3 are late
    r.assembler.on_instruction("stack")
    r.feed()
    for _ in range(5):
        r.tick()
    s = r.stats.snapshot()
    assert (s.frames, s.late_frames, s.deadline_misses, s.overruns) == (5, 2, 2, 0)
    chunks = [m for name, _, m in r.port.sent if name == topics.ACTION_CHUNK]
    assert [c.deadline_met for c in chunks] == [True, False, True, False, True]
    latency = [c.latency.sec + c.latency.nanosec * 1e-9 for c in chunks]
    assert latency == pytest.approx([0.05, 0.15, 0.1, 0.2, 0.01], abs=1e-8)
    assert r.engine.time_left == pytest.approx([0.05, 0.0, 0.0, 0.0, 0.09])
    last_stats = [m for name, _, m in r.port.sent if name == topics.STATS][-1]
    assert last_stats.deadline_misses == 2
    assert last_stats.frame_s == pytest.approx(0.01 + 0.02)


def test_skips_are_counted_by_reason_and_publish_nothing():
    r = rig(act_s=[0.01])
    r.tick()  # no instruction yet
    r.tick()
    r.assembler.on_instruction("stack")
    r.tick()  # no joint state
    r.feed(stamp_s=10.0)
    r.tick(now_s=11.0)  # 1 s old with a 0.5 s timeout: stale joint state
    counts = {k: v for k, v in r.assembler.skip_counts.items() if v}
    assert counts == {"no_instruction": 2, "missing_joint_state": 1, "stale_joint_state": 1}
    assert r.port.sent == [] and r.engine.frame == -1
    assert r.stats.snapshot().frames == 0
    # One line per reason per throttle period: the second no_instruction skip is held back.
    assert [w.split(":")[0:2] for w in r.log.warnings] == [
        ["frame skipped", " no instruction received yet, or it was blank"],
        ["frame skipped", " no JointState received yet"],
        ["frame skipped", " JointState is 1.000 s old (stale_timeout_s=0.5)"],
    ]
    r.clock.now_s += 2.0  # a throttle period later the reason logs again, with the count
    r.assembler.on_instruction("")
    r.tick(now_s=10.2)
    assert r.log.warnings[-1] == (
        "frame skipped: no instruction received yet, or it was blank (1 more held back since "
        "the last)"
    )
    r.assembler.on_instruction("stack")
    r.tick(now_s=10.2)  # fresh again: one frame, and the stats count the five skips
    stats = [m for name, _, m in r.port.sent if name == topics.STATS]
    assert len(stats) == 1 and stats[0].skipped_frames == 5


def test_a_blank_camera_is_throttled_by_its_slot_so_another_camera_still_shows():
    r = rig(act_s=[0.01, 0.01, 0.01], cameras=("/cam", "/cam2"), missing_camera="blank")
    r.assembler.on_instruction("stack")
    r.feed(stamp_s=10.0)  # camera 0 only
    r.tick(now_s=10.0)
    r.tick(now_s=10.0)  # the same camera blank again, within the throttle period
    r.assembler.on_image(1, _mono(10.0))
    r.assembler.on_image(0, _mono(9.0))  # camera 0 now stale, camera 1 fresh
    r.tick(now_s=10.0)
    assert r.stats.snapshot().frames == 3
    assert r.log.warnings == [
        "camera left blank: no image received yet from /cam2 (left_wrist_0_rgb)",
        "camera left blank: /cam (base_0_rgb) image is 1.000 s old (stale_timeout_s=0.5)",
    ]


def _mono(stamp_s: float) -> Image:
    header = Header(stamp=seconds_to_stamp(stamp_s))
    return Image(header=header, height=2, width=2, encoding="mono8", step=2, data=b"\x80" * 4)


def test_nothing_is_published_while_the_gate_is_closed():
    r = rig(act_s=[0.01, 0.01, 0.01], open_gate=False)
    r.assembler.on_instruction("stack")
    r.feed()
    r.tick()
    assert r.port.sent == [] and r.engine.time_left == []  # no language work when closed
    assert r.stats.snapshot().frames == 0
    r.port.gate.open()
    r.engine.on_act = r.port.gate.close  # deactivated while phase 1 runs
    r.tick()
    assert r.port.sent == [] and r.engine.time_left == []
    r.port.gate.open()
    r.engine.on_act = lambda: None
    r.tick()
    assert [name for name, _, _ in r.port.sent][0] == topics.ACTION_CHUNK
    assert r.stats.snapshot().frames == 1


def test_requests_beyond_what_the_engine_can_take_are_refused_with_its_reason():
    """While frames skip (no inputs yet) requests go straight into the engine's one
    queue; past its pool row plus queue the engine refuses and the loop logs why."""
    r = rig(act_s=[0.01])
    r.tick()  # skipped: no instruction
    for _ in range(3):
        r.loop.request("memory")
    assert r.log.warnings[1:] == [
        "~/request 'memory' refused: 2 requests already wait for a language phase, as many "
        "as it can take (pool rows 1 + queue 1)"
    ]
    assert [p.stream for p in r.engine.scheduler.queue] == ["memory", "memory"]
    admission = r.engine.scheduler.admit(0)  # the refusal counts with the next frame's rejected
    assert (len(admission.admitted), admission.rejected, len(r.engine.scheduler.queue)) == (1, 1, 1)
    r.loop.reset()
    assert len(r.engine.scheduler.queue) == 0


# ------------------------------------------------------------------ chunk hand-over


def _sent(r: Rig, name: str) -> list:
    return [m for n, _, m in r.port.sent if n == name]


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def test_a_delay_longer_than_a_frame_keeps_chunks_on_the_frame_grid():
    """Frames every 2 steps (40 ms), d = 3: each chunk arrives after the next frame's tick,
    so at that tick the robot still runs the plan before it. The new chunk meets that plan
    (its rows until the unstarted chunk takes over, then that chunk's), and stamps advance
    one frame at a time; anchoring on the unstarted chunk instead pushed every stamp a
    step further out per frame, and each chunk was replaced before it ever took over."""
    r = rig(act_s=[0.0] + [0.01] * 3, handover="rtc", delays=[0, 3, 3, 3])
    r.assembler.on_instruction("stack")
    r.feed()
    for now_s in (10.00, 10.04, 10.08, 10.12):
        r.tick(now_s)
    ms = 1_000_000
    stamps = [_ns(c.header.stamp) for c in _sent(r, topics.ACTION_CHUNK)]
    assert stamps == [10_000 * ms, 10_100 * ms, 10_140 * ms, 10_180 * ms]
    h = r.engine.handovers
    upcoming = [x.previous[x.executed :, 0].tolist() for x in h[1:]]
    # at 10.08: frame 0's row 3 held (it sent 4 rows and ran out at 10.06) until frame 1's
    # chunk takes over at 10.10 from its row 2 (the robot ran 2 rows of frame 0 meanwhile,
    # not d = 3); the running 7 rows pass the model's 6, so the engine gets the window
    # from the executed row (executed 0)
    assert upcoming == [[2, 3], [3, 12, 13, 14, 15], [13, 23, 24, 25]]
    assert [x.executed for x in h[1:]] == [2, 0, 2]


def test_handover_counts_executed_steps_from_the_last_chunks_row_0_and_stamps_with_d():
    """Control period 20 ms. Each frame's handover is the robot's plan from the previous
    chunk's row-0 time (the d rows it kept of the plan before, then the rows it sent), with
    the steps from that time to the tick, rounded to the nearest row; each chunk starts at
    row d and is stamped d steps after the time of the previous row its row 0 continues
    (the tick, without a handover)."""
    delays = [0, 2, 1, 0, 1, 0]
    r = rig(act_s=[0.0, 0.01, 0.05, 0.01, 0.01, 0.01], handover="rtc", delays=delays)
    r.assembler.on_instruction("stack")
    r.feed()
    for now_s in (10.00, 10.03, 10.099, 10.11, 10.30, 10.20):
        r.tick(now_s)
    chunks = _sent(r, topics.ACTION_CHUNK)
    trajectories = _sent(r, topics.JOINT_TRAJECTORY)
    ms = 1_000_000
    # 10.03: 1.5 steps after 10.00 -> row 2 (10.04), + d 2. 10.099: 0.95 steps after 10.08
    # (a tick 1 ms early) -> row 1 (10.10), + d 1. 10.11: before 10.12 -> row 0, + d 0.
    # 10.30: 9 rows after 10.12, past the 4 sent: replace, on the grid at 10.30, + d 1.
    # 10.20: the tick went back: nothing runs, stamped at the first control step after
    # its publish (10 ms of act: one step on). Frame 0 took no time: at its tick.
    row0 = [10_000 * ms, 10_080 * ms, 10_120 * ms, 10_120 * ms, 10_320 * ms, 10_220 * ms]
    assert [_ns(c.header.stamp) for c in chunks] == row0
    assert [_ns(t.header.stamp) for t in trajectories] == row0
    # Frame f's rows are 10 f + row (first column); published from row d, HORIZON at most,
    # or from the rows the robot ran meanwhile when fewer: at 10.30 it had run every row
    # and stood still, so frame 4's chunk goes out from row 0 (d 1 is its stamp's).
    skipped = [0, 2, 1, 0, 0, 0]
    firsts = [
        [10 * f + i for i in range(d, min(d + HORIZON, MODEL_HORIZON))]
        for f, d in enumerate(skipped)
    ]
    assert [list(c.actions)[::2] for c in chunks] == firsts
    assert [[p.positions[0] for p in t.points] for t in trajectories] == firsts
    assert [t.points[1].time_from_start.nanosec for t in trajectories] == [20 * ms] * 6
    handovers = r.engine.handovers
    assert handovers[0] is None and handovers[5] is None
    # The previous plan from the last chunk's row-0 time: the d rows of the plan before it
    # that run until it takes over, then the rows it sent (frame 1: rows 2-3 of frame 0's,
    # then its own from row 2; frame 2: row 3 of frame 1's plan, i.e. frame 1's row 3).
    plans = [firsts[0], [2, 3, *firsts[1]], [13, *firsts[2]], firsts[3]]
    owners = [[0] * len(firsts[0]), [0, 0] + [1] * len(firsts[1]), [1] + [2] * len(firsts[2]),
              [3] * len(firsts[3])]  # fmt: skip
    assert [h.executed for h in handovers[1:5]] == [2, 3, 1, 9]
    for h, plan, owner in zip(handovers[1:5], plans, owners, strict=True):
        np.testing.assert_array_equal(h.previous[:, 0], plan)
        np.testing.assert_array_equal(
            h.previous[:, 1], [20 * f - v for f, v in zip(owner, plan, strict=True)]
        )  # noqa: E501
        assert h.control_period_s == pytest.approx(0.02)
    stats = _sent(r, topics.STATS)
    assert [(m.handover, m.delay_steps) for m in stats] == [
        ("replace", 0), ("rtc", 2), ("rtc", 1), ("rtc", 0), ("replace", 1), ("replace", 0)
    ]  # fmt: skip
    s = r.stats.snapshot()
    assert (s.handover_fallbacks, s.stamps_back, s.last_stamp_back) == (1, 1, "clock_back")
    backwards = [w for w in r.log.warnings if "before the previous" in w]
    assert backwards == ["action chunk stamped 0.100 s before the previous one (clock_back)"]
    # The loop feeds its tick-to-publish latencies (here the fake act times) to the
    # engine's delay estimate: the largest is 50 ms, 5 steps of 10 ms.
    assert r.engine.delay.steps(0.01) == 5


def test_no_handover_after_a_reset_and_a_stamp_before_the_last_is_counted():
    r = rig(act_s=[0.0] + [0.01] * 3, handover="blend", delays=[0, 4, 0, 9])
    r.assembler.on_instruction("stack")
    r.feed()
    r.tick(10.0)
    # 5 rows after 10.0, past the 4 sent: replace, d 4; the robot stood still, so the chunk
    # goes from row 0, stamped at 10.18
    r.tick(10.1)
    r.loop.reset()  # deactivate: the robot may be anywhere when frames start again
    r.assembler.on_instruction("stack")
    r.tick(10.12)  # nothing runs: stamped a step on (its 10 ms of act), before 10.18
    r.tick(10.3)  # d 9 is past the 6 rows: stamped at row 5's time, with a warning
    assert [h is None for h in r.engine.handovers] == [True, False, True, False]
    chunks = _sent(r, topics.ACTION_CHUNK)
    assert [(c.horizon, list(c.actions)[::2]) for c in chunks] == [
        (4, [0, 1, 2, 3]), (4, [10, 11, 12, 13]), (4, [20, 21, 22, 23]), (4, [30, 31, 32, 33])
    ]  # fmt: skip
    ms = 1_000_000
    assert [_ns(c.header.stamp) for c in chunks] == [
        10_000 * ms, 10_180 * ms, 10_140 * ms, 10_300 * ms + 5 * 20 * ms
    ]  # fmt: skip
    s = r.stats.snapshot()
    assert (s.handover_fallbacks, s.stamps_back, s.last_stamp_back) == (2, 1, "delay_shrank")
    assert "0.040 s before the previous one (delay_shrank)" in r.log.warnings[0]
    assert "exceeds the chunk's 6 rows" in r.log.warnings[1]


def test_replace_waits_out_d_like_the_others_but_the_engine_ignores_the_old_chunk():
    """replace still learns what runs: its chunk goes out from row d, stamped d periods
    on (a controller would drop the rows before, which the gate then never judged); the
    engine gets the handover only to size d, and replace is no fallback."""
    r = rig(act_s=[0.0] + [0.01] * 2, delays=[0, 1, 1])
    r.assembler.on_instruction("stack")
    r.feed()
    for now_s in (10.0, 10.04, 10.08):
        r.tick(now_s)
    assert r.engine.handovers[0] is None
    assert [h.executed for h in r.engine.handovers[1:]] == [2, 2]
    chunks = _sent(r, topics.ACTION_CHUNK)
    ms = 1_000_000
    assert [_ns(c.header.stamp) for c in chunks] == [10_000 * ms, 10_060 * ms, 10_100 * ms]
    assert [list(c.actions)[::2] for c in chunks] == [
        [0, 1, 2, 3], [11, 12, 13, 14], [21, 22, 23, 24]
    ]  # fmt: skip
    stats = [(m.handover, m.delay_steps) for m in _sent(r, topics.STATS)]
    assert stats == [("replace", 0), ("replace", 1), ("replace", 1)]
    s = r.stats.snapshot()
    assert (s.stamps_back, s.handover_fallbacks) == (0, 0)


def test_a_hold_is_one_point_at_the_measured_state_and_the_next_frame_meets_nothing():
    r = rig(act_s=[0.03, 0.03], handover="rtc")
    r.assembler.on_instruction("stack")
    assert not r.motion.hold("e-stop")  # no joint state yet: nothing to hold at
    r.feed()
    r.tick(10.0)
    r.port.sent.clear()
    assert r.motion.hold("e-stop")
    ((name, _, msg),) = r.port.sent
    assert name == topics.JOINT_TRAJECTORY and list(msg.joint_names) == list(JOINTS)
    (point,) = msg.points
    assert list(point.positions) == [0.5, -0.5]  # a, b as measured (the message has b, a)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (0, 0)
    s = r.stats.snapshot()
    assert (s.holds, s.last_hold) == (1, "e-stop")
    assert any("holding the robot where it is: e-stop" in w for w in r.log.warnings)
    r.tick(10.1)
    assert r.engine.handovers[-1] is None  # the stopped robot runs no chunk to meet


def test_a_command_chunk_controller_gets_the_chunk_and_a_zero_row_chunk_as_its_hold():
    """A velocity or end-effector robot: no trajectory, its controller reads
    ~/command_chunk, whose hold needs no measured state."""
    cfg = dataclasses.replace(CFG, joint_trajectory=False, command_chunk=True)
    r = rig(act_s=[0.03], cfg=cfg)
    r.assembler.on_instruction("stack")
    assert r.motion.hold("e-stop")  # no joint state yet: the stop needs none
    ((name, _, stop),) = r.port.sent
    assert (name, stop.horizon, len(stop.actions)) == (topics.COMMAND_CHUNK, 0, 0)
    assert (stop.header.stamp.sec, stop.header.stamp.nanosec) == (0, 0)
    assert list(stop.joint_names) == list(JOINTS)
    r.port.sent.clear()
    r.feed()
    r.tick(10.1)
    sent = {name: msg for name, _, msg in r.port.sent}
    assert topics.JOINT_TRAJECTORY not in sent
    assert sent[topics.COMMAND_CHUNK] is sent[topics.ACTION_CHUNK]


def test_a_velocity_robots_rows_go_out_scaled_into_its_bounds():
    """The fake engine's rows reach 3 per second on joint a: capped at 1, b with it."""
    cfg = dataclasses.replace(CFG, joint_trajectory=False, command_chunk=True)
    r = rig(act_s=[0.03], cfg=cfg, velocity_cap=VelocityCap(np.array([1.0, np.inf])))
    r.assembler.on_instruction("stack")
    r.feed()
    r.tick(10.0)
    sent = {name: msg for name, _, msg in r.port.sent}
    chunk = sent[topics.COMMAND_CHUNK]
    rows = np.asarray(chunk.actions).reshape(chunk.horizon, chunk.action_dim)
    assert np.abs(rows[:, 0]).max() <= 1.0 + 1e-6 and np.abs(rows[:, 0]).max() > 0.99
    assert any("chunk slowed to 33% of its speed" in w for w in r.log.warnings)


# ------------------------------------------------------------------ the chunk gate

MS = 1_000_000
WARN, ERROR = DiagnosticStatus.WARN, DiagnosticStatus.ERROR
# Frame 0's rows from the measured state (0.5, -0.5), 20 ms apart: a at 0, 1, 2, 3 and b
# at 0, -1, -2, -3: -25 /s then 50 /s, 3750 /s^2 between the first two steps. Frame f's
# rows are 10 f + i (a) and 10 f - i (b), 10 f away from a state near frame 0's.
WIDE = {"lower": -100.0, "upper": 100.0, "velocity": 100.0, "acceleration": 1e4, "jump": 1.0}


def chunk_gate(policy: str = "slow", **bounds: float) -> ChunkGate:
    arrays = {key: np.full(2, value) for key, value in {**WIDE, **bounds}.items()}
    return ChunkGate(JointLimits(names=JOINTS, source="test", **arrays), policy, 0.02)


def _safety(r: Rig, reporter: DiagnosticsReporter, now_s: float = 10.0):
    """The safety and inputs statuses of one report."""
    inputs = InputReport.of(r.assembler, now_s)
    array = reporter.report(seconds_to_stamp(now_s), r.stats.snapshot(), inputs)
    return {s.name.split(": ")[1]: s for s in array.status}


def _hold_points(r: Rig) -> list[list[float]]:
    """The single point of every hold sent (a trajectory stamped zero)."""
    holds = [t for t in _sent(r, topics.JOINT_TRAJECTORY) if _ns(t.header.stamp) == 0]
    return [list(t.points[0].positions) for t in holds if len(t.points) == 1]


@pytest.mark.parametrize(
    ("policy", "bounds", "outcome", "rows"),
    [
        ("slow", {}, "passed", [0, 1, 2, 3]),
        ("clamp", {"lower": -2.5, "upper": 2.5}, "clamped", [0, 1, 2, 2.5]),
        ("slow", {"velocity": 25.0}, "slowed", [0.25, 0, 0.5, 1, 1.5, 2, 2.5, 3]),
    ],
)
def test_the_gates_rows_go_out_on_the_chunk_and_the_trajectory_alike(policy, bounds, outcome, rows):
    r = rig(act_s=[0.0], chunk_gate=chunk_gate(policy, **bounds))
    r.assembler.on_instruction("stack")
    r.feed()
    r.tick(10.0)
    (chunk,) = _sent(r, topics.ACTION_CHUNK)
    (trajectory,) = _sent(r, topics.JOINT_TRAJECTORY)
    assert chunk.horizon == len(rows) == len(trajectory.points)
    np.testing.assert_allclose(list(chunk.actions)[::2], rows, atol=1e-6)
    np.testing.assert_allclose(list(chunk.actions)[1::2], [-v for v in rows], atol=1e-6)
    np.testing.assert_allclose([p.positions for p in trajectory.points], chunk_rows(chunk))
    assert trajectory.points[-1].time_from_start.nanosec == (len(rows) - 1) * 20 * MS
    assert _ns(chunk.header.stamp) == _ns(trajectory.header.stamp) == 10_000 * MS
    tally = r.stats.snapshot().gate
    assert tally.outcomes == {"passed": 0, "clamped": 0, "slowed": 0, "rejected": 0} | {outcome: 1}
    assert tally.policy == policy and tally.streak == 0
    assert tally.last_stretch == (2.0 if outcome == "slowed" else 1.0)


def chunk_rows(chunk) -> np.ndarray:
    return np.asarray(chunk.actions, np.float64).reshape(chunk.horizon, chunk.action_dim)


def test_the_next_handover_meets_the_slowed_rows_the_robot_runs():
    r = rig(act_s=[0.0, 0.01], handover="rtc", delays=[0, 0], chunk_gate=chunk_gate(velocity=25.0))
    r.assembler.on_instruction("stack")
    r.feed()
    r.tick(10.0)  # slowed x2: 8 rows from 10.00
    r.tick(10.04)
    # 2 of them ran; longer than the model's 6-row chunk, they go from the executed row on
    handover = r.engine.handovers[1]
    assert handover.executed == 0
    np.testing.assert_allclose(handover.previous[:, 0], [0.5, 1, 1.5, 2, 2.5, 3])
    np.testing.assert_allclose(handover.previous[:, 1], [-0.5, -1, -1.5, -2, -2.5, -3])


def test_a_rejected_chunk_sends_nothing_and_is_counted_with_one_warning_per_reason():
    r = rig(act_s=[0.01] * 3, chunk_gate=chunk_gate("reject", velocity=25.0), max_rejections=5)
    r.assembler.on_instruction("stack")
    r.feed()
    for now_s in (10.0, 10.1, 10.2):  # velocity, then twice a jump of 10 f + 0.5 at b
        r.tick(now_s)
    sent = {name for name, _, _ in r.port.sent}
    assert topics.ACTION_CHUNK not in sent and topics.JOINT_TRAJECTORY not in sent
    assert len(_sent(r, topics.STATS)) == 3  # the frames ran: language and stats went on
    s = r.stats.snapshot()
    assert (s.frames, s.holds, s.gate.streak, s.gate.tripped) == (0, 0, 3, False)
    assert s.gate.outcomes["rejected"] == 3
    assert {k: v for k, v in s.gate.findings.items() if v} == {"velocity": 1, "jump": 2}
    gate_lines = [w for w in r.log.warnings if w.startswith("chunk ")]
    assert gate_lines == [
        "chunk rejected: a velocity 50 over its limit 25",
        "chunk rejected: b start jump 10.5 over its limit 1",  # frame 2's held back
    ]


def test_a_rejection_streak_holds_once_reports_error_and_a_chunk_through_recovers():
    """Frame 0 slowed x4.95 runs to 10.38, past every watchdog check: the third rejection
    in a row holds, the fourth does not hold again, ERROR until a chunk goes through."""
    r = rig(act_s=[0.01] * 6, chunk_gate=chunk_gate(velocity=10.1))
    reporter = DiagnosticsReporter("/oxygen", PERIOD_S)
    r.assembler.on_instruction("stack")
    r.feed(10.0)
    r.tick(10.0)
    assert len(_sent(r, topics.ACTION_CHUNK)[0].actions) == 2 * 20
    assert _safety(r, reporter)["safety"].level == WARN  # a chunk slowed
    for now_s in (10.02, 10.04):
        r.feed(now_s)
        r.tick(now_s)  # frames 1 and 2: 10 f away from the state, rejected
    assert _hold_points(r) == []
    r.feed(10.06)
    r.tick(10.06)  # the third in a row
    assert _hold_points(r) == [[0.5, -0.5]]
    s = r.stats.snapshot()
    assert (s.holds, s.last_hold) == (1, "the gate rejected 3 chunks in a row")
    safety = _safety(r, reporter)["safety"]
    assert (safety.level, safety.message) == (
        ERROR,
        "holding: the gate rejected 3 chunks in a row; until one passes",
    )
    values = {kv.key: kv.value for kv in safety.values}
    assert (values["chunks rejected"], values["rejected in a row"], values["findings jump"]) == (
        "3",
        "3",
        "3",
    )
    assert values["holds"] == "1 (last: the gate rejected 3 chunks in a row)"
    r.feed(10.08)
    r.tick(10.08)  # a fourth: still held, no second hold
    assert len(_hold_points(r)) == 1 and _safety(r, reporter)["safety"].level == ERROR
    r.feed(10.10, a=50.0, b=50.0)  # frame 5's rows start at 50: slowed, it goes out
    r.tick(10.10)
    assert len(_sent(r, topics.ACTION_CHUNK)) == 2 and r.stats.snapshot().gate.streak == 0
    safety = _safety(r, reporter)["safety"]
    assert (safety.level, safety.message) == (WARN, "since last report: 1 chunks slowed")


def test_a_rejected_chunk_holds_when_the_running_one_ends_first_once_per_outage():
    r = rig(act_s=[0.01] * 4, chunk_gate=chunk_gate("reject"))
    r.assembler.on_instruction("stack")
    r.feed(10.0)
    r.tick(10.0)  # frame 0 passes and ends at 10.06, where the robot then stands
    for now_s in (10.1, 10.2, 10.3):
        r.feed(now_s, a=3.0, b=-3.0)
        r.tick(now_s)
    assert _hold_points(r) == [[3.0, -3.0]]  # at 10.1; not again as the streak trips
    s = r.stats.snapshot()
    assert (s.holds, s.last_hold, s.gate.tripped) == (1, "chunk rejected", True)


# ------------------------------------------------------------------ the watchdog


def _stale_joint_state(r: Rig) -> None:
    r.assembler.on_image(0, _mono(10.6))  # the joint state stays at 10.0


def _silenced_camera(r: Rig) -> None:
    r.feed_joints(10.6)  # the camera stays at 10.0


def _nan_joint_state(r: Rig) -> None:
    r.assembler.on_image(0, _mono(10.6))
    r.feed_joints(10.6, a=float("nan"))


@pytest.mark.parametrize(
    ("outage", "reason"),
    [
        (_stale_joint_state, "stale_joint_state"),
        (_silenced_camera, "stale_camera"),
        (_nan_joint_state, "bad_joint_state"),
    ],
)
def test_the_watchdog_holds_once_per_outage_and_frames_resume_when_the_input_recovers(
    outage, reason
):
    r = rig(act_s=[0.01] * 2, chunk_gate=chunk_gate())
    reporter = DiagnosticsReporter("/oxygen", PERIOD_S)
    r.assembler.on_instruction("stack")
    r.feed(10.0)
    r.tick(10.0)  # 4 rows, the last at 10.06
    _safety(r, reporter)
    r.port.sent.clear()
    outage(r)
    r.tick(10.6)
    r.tick(10.7)
    assert _hold_points(r) == [[0.5, -0.5]]  # where the robot was last measured
    assert _sent(r, topics.ACTION_CHUNK) == []
    s = r.stats.snapshot()
    assert (s.holds, s.last_hold, r.assembler.skip_counts[reason]) == (1, reason, 2)
    assert f"holding the robot where it is: {reason}" in r.log.warnings
    statuses = _safety(r, reporter, 10.7)
    assert (statuses["safety"].level, statuses["safety"].message) == (
        WARN,
        f"since last report: no chunk changed; 1 holds (last: {reason})",
    )
    assert statuses["inputs"].level == WARN
    r.feed(10.8, a=10.0, b=10.0)  # back, where frame 1's rows start
    r.tick(10.8)
    assert len(_sent(r, topics.ACTION_CHUNK)) == 1 and r.stats.snapshot().holds == 1
    r.tick(11.4)  # every input 0.6 s old: a new outage, a new hold
    assert len(_hold_points(r)) == 2


def test_the_watchdog_waits_while_the_running_chunk_lasts_and_not_for_a_cleared_instruction():
    r = rig(act_s=[0.0], chunk_gate=chunk_gate(velocity=10.1))
    r.assembler.on_instruction("stack")
    r.feed(10.0)
    r.tick(10.0)  # slowed x4.95: 20 rows, the last at 10.38
    r.feed_joints(10.0, a=float("nan"))
    r.tick(10.1)  # the next chunk could arrive by 10.30, before 10.38
    assert _hold_points(r) == []
    r.assembler.on_instruction("")
    r.tick(10.2)  # no instruction: not an outage of the robot's inputs
    assert _hold_points(r) == []
    r.assembler.on_instruction("stack")
    r.tick(10.2)  # by 10.40: the robot would stand at the last row first
    assert _hold_points(r) == [[0.5, -0.5]]
    assert r.stats.snapshot().last_hold == "bad_joint_state"


def test_the_gate_needs_the_commanded_joints_read():
    assembler = rig([]).assembler
    assembler.commanded_names = ()
    with pytest.raises(ValueError, match="the chunk gate needs action_names"):
        FrameLoop(
            engine=FakeEngine(FakeClock(), []),
            assembler=assembler,
            motion=MotionAuthority(RecordingPort(LifecycleGate()), NodeStats(), enabled=True),
            stats=NodeStats(),
            cfg=CFG,
            layout=ChunkLayout(horizon=HORIZON, action_names=JOINTS),
            logger=RecordingLogger(),
            gate=chunk_gate(),
        )


def test_a_chunk_with_nothing_running_is_stamped_at_the_first_step_after_its_publish():
    """The robot stands still until it arrives: every row goes out, stamped at the first
    control step (20 ms) the chunk can run, not at its tick (a controller would skip its
    row 0 and step two rows in one period)."""
    r = rig(act_s=[0.01, 0.03])
    r.assembler.on_instruction("stack")
    r.feed()
    r.tick(10.0)  # 10 ms to publish: a step on
    r.loop.reset()
    r.tick(10.1)  # 30 ms: two steps on
    chunks = _sent(r, topics.ACTION_CHUNK)
    assert [_ns(c.header.stamp) for c in chunks] == [10_020 * MS, 10_140 * MS]
    assert [list(c.actions)[::2] for c in chunks] == [[0, 1, 2, 3], [10, 11, 12, 13]]


def test_a_stalled_engine_holds_once_from_the_refused_ticks_and_its_stale_chunk_stays_out():
    """Frame 1's act stalls across the ticks at 10.2 and 10.3, which the worker refuses:
    the first finds the running chunk over (its last row at 10.08) and holds; the second
    does not hold again; the stalled frame's chunk, computed for where the robot was,
    never goes out; the next frame hands over from nothing and resumes."""
    r = rig(act_s=[0.01, 0.3, 0.01], handover="rtc", delays=[0, 0, 0], chunk_gate=chunk_gate())
    r.assembler.on_instruction("stack")
    r.feed(10.0)
    r.tick(10.0)
    r.engine.on_act = lambda: [r.loop.overrun(t * MS) for t in (10_200, 10_300)]
    r.feed(10.1, a=3.0, b=-3.0)  # where frame 0's chunk left the robot
    r.tick(10.1)
    r.engine.on_act = lambda: None
    assert _hold_points(r) == [[3.0, -3.0]]
    assert len(_sent(r, topics.ACTION_CHUNK)) == 1  # frame 0's only
    assert r.stats.snapshot().last_hold == "frame overran: no chunk in time"
    r.feed(10.4, a=20.0, b=20.0)  # where frame 2's rows start
    r.tick(10.4)
    assert r.engine.handovers[2] is None and len(_sent(r, topics.ACTION_CHUNK)) == 2
    assert r.stats.snapshot().holds == 1


JTC = dataclasses.replace(CFG, controller_model="jtc", controller_lead_s=0.005)


def _points(trajectory) -> list[tuple[float, float, int]]:
    """Joint a's (position, velocity, time_from_start ms) of each point."""
    return [
        (p.positions[0], p.velocities[0], p.time_from_start.nanosec // MS)
        for p in trajectory.points
    ]


@pytest.mark.parametrize(
    ("acceleration", "stamp_ms", "points"),
    [
        # Rows 0, 1, 2, 3 due at 10.04 ... 10.10 (d = 2 after 30 ms of act); the latest
        # arrival 10.035: rows before 10.055 dropped. From rest at 0 to row 1 (1.0 at 50
        # rad/s) in 25 ms peaks at 5600 rad/s^2, under 1e4; the last row's 50 rad/s stops
        # within one period (2500 rad/s^2).
        (1e4, 10_060, [(1.0, 50.0, 0), (2.0, 50.0, 20), (3.0, 50.0, 40), (3.5, 0.0, 60)]),
        # At 3000 rad/s^2 the segment from rest reaches row 1 too sharply (5600), row 2 too
        # (3704 in 45 ms); row 3 in 65 ms peaks at 2722.
        (3000.0, 10_100, [(3.0, 50.0, 0), (3.5, 0.0, 20)]),
    ],
)
def test_jtc_gets_the_rows_it_can_meet_from_the_state_with_velocities_and_a_stop(
    acceleration, stamp_ms, points
):
    r = rig(act_s=[0.03], cfg=JTC, chunk_gate=chunk_gate(acceleration=acceleration))
    r.assembler.on_instruction("stack")
    r.feed(a=0.0, b=0.0)
    r.tick(10.0)
    (chunk,) = _sent(r, topics.ACTION_CHUNK)
    (trajectory,) = _sent(r, topics.JOINT_TRAJECTORY)
    assert _ns(chunk.header.stamp) == 10_040 * MS and list(chunk.actions)[::2] == [0, 1, 2, 3]
    assert _ns(trajectory.header.stamp) == stamp_ms * MS
    got = _points(trajectory)
    np.testing.assert_allclose(got, points)
    assert got[-1][1] == 0.0 and list(trajectory.points[0].velocities)[1] == -50.0


def test_jtc_refuses_a_chunk_no_row_of_which_can_be_met_within_the_limits():
    # Velocity 55 rad/s: the rows' 50 pass the gate, but from rest every row's segment
    # peaks over it (54.4 with 5600 rad/s^2 into row 1, then 59.5, 61.6): nothing goes out.
    r = rig(act_s=[0.03], cfg=JTC, chunk_gate=chunk_gate(velocity=55.0, acceleration=3000.0))
    r.assembler.on_instruction("stack")
    r.feed(a=0.0, b=0.0)
    r.tick(10.0)
    assert _sent(r, topics.ACTION_CHUNK) == [] and _sent(r, topics.JOINT_TRAJECTORY) == []
    assert r.stats.snapshot().trajectories_refused == 1
    assert any("every row is too far from the state at arrival" in w for w in r.log.warnings)


def test_a_hold_from_a_moving_joint_state_decelerates_within_the_limits():
    now_ns = [10_010 * MS]  # the node's clock: the joint state below is 10 ms old
    r = rig(
        act_s=[0.03], cfg=JTC, chunk_gate=chunk_gate(acceleration=10.0), now_ns=lambda: now_ns[0]
    )
    r.assembler.on_instruction("stack")
    r.feed()
    header = Header(stamp=seconds_to_stamp(10.0))
    moving = JointState(header=header, name=["b", "a"], position=[-0.5, 0.5], velocity=[0.0, 0.1])
    r.assembler.on_joint_state(moving)
    assert r.motion.hold("e-stop")
    (hold,) = _sent(r, topics.JOINT_TRAJECTORY)
    assert _ns(hold.header.stamp) == 0
    # a at 0.1 rad/s stops in 10 ms at 10 rad/s^2; a hold lasts three 20 ms periods: at
    # 1.7 rad/s^2 from where it is when the controller takes the hold over (10 ms of age
    # and the 5 ms lead on from 0.5, 0.5015), to 0.5045, its one point 60 ms later.
    np.testing.assert_allclose(_points(hold), [(0.5045, 0.0, 60)])
    np.testing.assert_allclose([p.positions[1] for p in hold.points], [-0.5])


def test_each_trajectory_controller_gets_its_joints_with_the_same_stamp():
    parts = split(
        JOINTS, [ControllerJoints("arm_b", "/b", ("b",)), ControllerJoints("arm_a", "/a", ("a",))]
    )
    r = rig(act_s=[0.03], cfg=JTC, chunk_gate=chunk_gate(), parts=parts)
    r.assembler.on_instruction("stack")
    r.feed(a=0.0, b=0.0)
    r.tick(10.0)
    sent = [(stream, m) for n, stream, m in r.port.sent if n == topics.JOINT_TRAJECTORY]
    assert [stream for stream, _ in sent] == ["arm_b", "arm_a"]
    (_, b), (_, a) = sent
    assert list(a.joint_names) == ["a"] and list(b.joint_names) == ["b"]
    assert _ns(a.header.stamp) == _ns(b.header.stamp) == 10_060 * MS
    assert [p.positions[0] for p in a.points] == [-p.positions[0] for p in b.points]
    assert [p.time_from_start for p in a.points] == [p.time_from_start for p in b.points]
    r.port.sent.clear()
    assert r.motion.hold("e-stop")
    assert [(n, stream) for n, stream, _ in r.port.sent] == [
        (topics.JOINT_TRAJECTORY, "arm_b"),
        (topics.JOINT_TRAJECTORY, "arm_a"),
    ]
