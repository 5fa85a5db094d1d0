"""Node statistics and the /diagnostics report built from them (exact counts and levels)."""

from __future__ import annotations

import dataclasses

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticStatus

from oxygen_core.engine.types import LanguageResult
from oxygen_ros.diagnostics import DiagnosticsReporter, InputReport, NodeStats

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


def _statuses(reporter: DiagnosticsReporter, stats: NodeStats, inputs: InputReport = FRESH):
    array = reporter.report(Time(sec=5), stats.snapshot(), inputs)
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
