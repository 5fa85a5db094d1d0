"""Node statistics and the /diagnostics report built from them (exact counts and levels)."""

from __future__ import annotations

import dataclasses

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticStatus

from oxygen_core.engine.types import LanguageResult
from oxygen_core.safety.guard import GateTally
from oxygen_core.text import excerpt, excerpt_list
from oxygen_ros.diagnostics import ClockWatch, DiagnosticsReporter, InputReport, NodeStats
from oxygen_ros.inputs import FrameAssembler

pytestmark = pytest.mark.ros

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
FRESH = InputReport(
    ages_s={"base_0_rgb": 0.01, "joint_state": 0.02},
    skips={"stale_camera": 0, "bad_image": 0},
    blanks={"base_0_rgb": 0},
    stale_timeout_s=0.5,
)


def _language(**fields) -> LanguageResult:
    base = dict(
        frame=0, events=(), decode_s=0.01, k=2, batch=3, bucket=4, admitted=1, rejected=0,
        queued=0, pool_used=3, pool_capacity=8,
    )  # fmt: skip
    return LanguageResult(**{**base, **fields})


def _statuses(
    reporter: DiagnosticsReporter, stats: NodeStats, inputs: InputReport = FRESH, clock=None
):
    array = reporter.report(Time(sec=5), stats.snapshot(), inputs, clock)
    return {s.name.split(": ")[1]: s for s in array.status}


def _values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_frame_rate_and_latency_come_from_the_published_chunks():
    stats = NodeStats()
    for i in range(11):  # one chunk every 0.1 s, the fourth one late
        stats.chunk_published(at_s=2.0 + 0.1 * i, latency_s=0.01 * i, deadline_met=i != 3)
    s = stats.snapshot()
    assert s.frames == 11
    assert s.frame_rate_hz == pytest.approx(10.0)
    assert (s.last_latency_s, s.max_latency_s) == (pytest.approx(0.1), pytest.approx(0.1))
    assert (s.late_frames, s.overruns, s.deadline_misses) == (1, 0, 1)


def test_overruns_are_deadline_misses_and_qos_events_are_counted_apart():
    stats = NodeStats()
    stats.overrun()
    stats.overrun()
    stats.qos_deadline_missed(5)
    s = stats.snapshot()
    assert (s.overruns, s.deadline_misses, s.qos_deadline_events, s.frames) == (2, 2, 5, 0)


def test_engine_load_is_the_last_frame_and_rejections_accumulate():
    stats = NodeStats()
    stats.frame_finished(0.05, _language(rejected=2))
    stats.frame_finished(0.04, _language(rejected=1, batch=5, pool_used=5))
    s = stats.snapshot()
    assert (s.last_frame_s, s.batch, s.pool_used, s.pool_capacity, s.rejected) == (
        0.04, 5, 5, 8, 3,
    )  # fmt: skip


def test_actions_status_warns_once_per_new_miss_and_errors_on_failed_frames():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    stats.chunk_published(at_s=1.0, latency_s=0.02, deadline_met=True)
    first = _statuses(reporter, stats)["actions"]
    assert (first.level, first.message) == (OK, "action chunks on time")
    assert _values(first)["target frame rate (Hz)"] == "10.00"
    stats.overrun()
    stats.chunk_published(at_s=1.1, latency_s=0.15, deadline_met=False)
    late = _statuses(reporter, stats)["actions"]
    assert (late.level, late.message) == (WARN, "2 deadline misses since last report")
    assert _values(late)["deadline misses"] == "2"
    assert _statuses(reporter, stats)["actions"].level == OK  # nothing new since
    stats.error()
    failed = _statuses(reporter, stats)["actions"]
    assert (failed.level, failed.message) == (ERROR, "1 frames failed")


def test_inputs_status_reports_new_skips_with_the_reason_then_recovers():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    assert _statuses(reporter, stats)["inputs"].level == OK
    stats.skipped("camera /cam (base_0_rgb) image is 2.000 s old")
    skipping = dataclasses.replace(FRESH, skips={"stale_camera": 3, "bad_image": 0})
    status = _statuses(reporter, stats, skipping)["inputs"]
    assert status.level == WARN
    assert status.message == "3 frames skipped; last: camera /cam (base_0_rgb) image is 2.000 s old"
    assert _values(status)["skipped stale_camera"] == "3"
    assert _values(status)["age base_0_rgb (s)"] == "0.010"
    assert _statuses(reporter, stats, skipping)["inputs"].level == OK


def test_inputs_status_warns_about_a_stale_input_even_without_skips():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    stale = dataclasses.replace(FRESH, ages_s={"base_0_rgb": 0.9, "joint_state": 0.01})
    status = _statuses(reporter, stats, stale)["inputs"]
    assert (status.level, status.message) == (WARN, "stale inputs: base_0_rgb")
    # A stamp from the future is as stale as an old one (a looped bag, a clock ahead).
    future = dataclasses.replace(FRESH, ages_s={"base_0_rgb": 0.01, "joint_state": -40.0})
    status = _statuses(reporter, stats, future)["inputs"]
    assert (status.level, status.message) == (WARN, "stale inputs: joint_state")


def test_inputs_status_counts_blanked_cameras():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    blanking = dataclasses.replace(FRESH, blanks={"base_0_rgb": 0, "left_wrist_0_rgb": 7})
    values = _values(_statuses(reporter, stats, blanking)["inputs"])
    assert (values["blanked base_0_rgb"], values["blanked left_wrist_0_rgb"]) == ("0", "7")


def test_language_status_warns_when_the_kv_pool_is_full():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    stats.frame_finished(0.05, _language(batch=8, pool_used=8))
    status = _statuses(reporter, stats)["language"]
    assert (status.level, status.message) == (WARN, "KV pool full")
    assert _values(status)["KV pool used"] == "8"
    assert status.hardware_id == "/oxygen"


def test_qos_deadline_events_alone_never_read_as_misses():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    stats.chunk_published(at_s=1.0, latency_s=0.02, deadline_met=True)
    stats.qos_deadline_missed(7)
    status = _statuses(reporter, stats)["actions"]
    assert (status.level, status.message) == (OK, "action chunks on time")
    values = _values(status)
    assert (values["deadline misses"], values["QoS deadline events (DDS, not misses)"]) == (
        "0",
        "7",
    )


def test_refused_instructions_warn_once_with_the_reason_and_stay_counted():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    assembler = FrameAssembler(
        camera_topics=["/cam"], joint_names=["a", "b"], state_dim=2, image_size=8,
        stale_timeout_s=0.5, sync_slop_s=0.05, max_instruction_chars=100,
    )  # fmt: skip
    assert assembler.on_instruction("stack the cups") is None
    hostile = "x" * 10_000_000
    assert assembler.on_instruction(hostile) is not None
    status = _statuses(reporter, stats, InputReport.of(assembler, 0.0))["inputs"]
    reason = f"instruction of 10000000 chars is over max_instruction_chars=100: {excerpt(hostile)}"
    assert status.level == WARN
    assert status.message == f"1 instructions refused, the previous one kept; last: {reason}"
    assert _values(status)["instructions refused"] == "1"
    assert _values(status)["last instruction refusal"] == reason
    assert len(status.message) < 256  # not 10 MB
    again = _statuses(reporter, stats, InputReport.of(assembler, 0.0))["inputs"]
    assert again.message != status.message and _values(again)["instructions refused"] == "1"


def test_a_hundred_thousand_ignored_joints_are_reported_as_an_excerpt():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    names = [f"joint_{i}" for i in range(100_000)]
    inputs = dataclasses.replace(FRESH, ignored_joints=excerpt_list(names))
    array = reporter.report(Time(sec=5), stats.snapshot(), inputs)
    values = _values(array.status[2])
    assert values["joints ignored"].endswith("... (100000 items)]")
    assert sum(len(kv.key) + len(kv.value) for st in array.status for kv in st.values) < 4096


def test_unknown_stream_requests_are_counted_and_warned_once_per_report():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    for _ in range(13_257):
        stats.unknown_request()
    status = _statuses(reporter, stats)["language"]
    assert (status.level, status.message) == (
        WARN,
        "13257 requests named no stream since last report",
    )
    assert _statuses(reporter, stats)["language"].level == OK


def test_clock_watch_reports_a_stall_and_a_backward_jump_against_steady_time():
    watch = ClockWatch(stall_after_s=0.3)
    reporter = DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    stats = NodeStats()

    def clock_status(ros_s, steady_s):
        return _statuses(reporter, stats, FRESH, watch.observe(ros_s, steady_s))["clock"]

    first = clock_status(100.0, 5.0)
    assert (first.level, first.message) == (OK, "ROS clock advancing")
    running = clock_status(101.0, 6.0)
    assert _values(running)["ROS clock rate (x steady)"] == "1.000"
    stopped = clock_status(101.0, 7.0)  # /clock stopped: ROS time stands, steady time runs
    assert stopped.level == WARN and stopped.message.startswith(
        "ROS clock stalled for 1.0 s at 101.000"
    )
    assert clock_status(101.0, 8.0).message.startswith("ROS clock stalled for 2.0 s")
    back = clock_status(40.0, 9.0)
    assert (back.level, back.message) == (WARN, "ROS clock jumped back 61.000 s since last report")
    assert _values(back)["backward jumps"] == "1"
    resumed = clock_status(41.0, 10.0)
    assert (resumed.level, resumed.message) == (OK, "ROS clock advancing")
    assert _values(resumed)["backward jumps"] == "1"


def test_the_tools_read_back_the_counts_the_reporter_writes():
    """tools.live / tools.report parse /diagnostics by the keys defined in diagnostics.py."""
    from oxygen_ros.tools.live import node_counts
    from oxygen_ros.tools.report import Recording

    stats = NodeStats()
    stats.overrun()
    stats.overrun()
    stats.chunk_published(at_s=1.0, latency_s=0.2, deadline_met=False)
    stats.error()
    inputs = dataclasses.replace(FRESH, skips={"bad_image": 4, "stale_camera": 1})
    recording = Recording()
    recording.add(DiagnosticsReporter("/oxygen", 0.1).report(Time(), stats.snapshot(), inputs))
    counts = node_counts(recording, "/oxygen")
    assert counts.skipped == {"bad_image": 4, "stale_camera": 1}
    assert (counts.deadline_misses, counts.overruns, counts.errors) == (3, 2, 1)


def _gate(**fields) -> GateTally:
    outcomes = {"passed": 0, "clamped": 0, "slowed": 0, "rejected": 0}
    findings = dict.fromkeys(("shape", "non_finite", "jump", "position", "velocity",
                              "acceleration"), 0)  # fmt: skip
    outcomes.update(fields.pop("outcomes", {}))
    findings.update(fields.pop("findings", {}))
    return GateTally(policy="slow", outcomes=outcomes, findings=findings, **fields)


def test_safety_status_is_an_error_while_the_gate_is_off():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    status = _statuses(reporter, stats)["safety"]
    assert (status.level, status.message) == (
        ERROR,
        "chunk gate off: chunks reach the robot unchecked",
    )
    assert _values(status)["gate policy"] == "off"


def test_safety_status_warns_on_changed_chunks_and_holds_and_errors_while_tripped():
    stats, reporter = NodeStats(), DiagnosticsReporter("/oxygen", frame_period_s=0.1)
    stats.gated(_gate(outcomes={"passed": 4}))
    quiet = _statuses(reporter, stats)["safety"]
    assert (quiet.level, quiet.message) == (
        OK,
        "no chunk changed by the gate, no hold since last report",
    )
    stats.gated(_gate(outcomes={"passed": 5, "slowed": 2, "rejected": 1},
                      findings={"velocity": 2, "jump": 1}, streak=1, last_stretch=2.5))  # fmt: skip
    changed = _statuses(reporter, stats)["safety"]
    assert (changed.level, changed.message) == (
        WARN,
        "since last report: 2 chunks slowed, 1 chunks rejected",
    )
    values = _values(changed)
    assert (values["gate policy"], values["chunks passed"], values["chunks slowed"]) == (
        "slow", "5", "2",
    )  # fmt: skip
    assert (values["findings velocity"], values["findings jump"]) == ("2", "1")
    assert (values["rejected in a row"], values["last stretch"], values["holds"]) == (
        "1", "2.500", "0",
    )  # fmt: skip
    stats.held("stale_camera")
    held = _statuses(reporter, stats)["safety"]
    assert (held.level, held.message) == (
        WARN,
        "since last report: no chunk changed; 1 holds (last: stale_camera)",
    )
    stats.gated(_gate(outcomes={"passed": 5, "slowed": 2, "rejected": 3}, streak=3, tripped=True))
    tripped = _statuses(reporter, stats)["safety"]
    assert (tripped.level, tripped.message) == (
        ERROR,
        "holding: the gate rejected 3 chunks in a row; until one passes",
    )
