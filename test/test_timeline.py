"""ChunkTimeline alone: the hand-over bookkeeping the node, replay and the in-process loop
share, on exact integer nanoseconds (docs/DESIGN.md section 10).

Chunks are arithmetic (row i of chunk f is 10 f + i in its first column, its negative in
the second), so every row the robot runs is named by value."""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_core.engine.timeline import ChunkTimeline
from oxygen_core.engine.types import ActionResult
from oxygen_core.model.rtc import DelayEstimator

MS = 1_000_000
PERIOD_S = 0.02  # 20 ms: 20_000_000 ns
T0 = 10_000 * MS


def chunk(frame: int, rows: int = 6, delay: int = 0) -> ActionResult:
    values = np.arange(rows, dtype=np.float32)[:, None] + 10 * frame
    actions = np.hstack([values, -values])
    return ActionResult(frame, actions, 0.001, 0.002, "rtc" if delay else "replace", delay)


def timeline(mode: str = "rtc", horizon: int | None = None) -> ChunkTimeline:
    return ChunkTimeline(PERIOD_S, mode, DelayEstimator(), horizon)


def publish(line: ChunkTimeline, tick_ns: int, action: ActionResult, latency_s=0.01, cold_delay=0):
    takeover = line.at(tick_ns)
    release = line.release(takeover, action, cold_delay)
    line.commit(release, latency_s)
    return takeover, release


def test_a_chunk_with_nothing_running_goes_out_whole_when_it_can_arrive():
    """The robot stands still while the first chunk is computed: no row is skipped, and
    it is stamped `cold_delay` steps on, whatever d the engine named."""
    line = timeline()
    _, release = publish(line, T0, chunk(0, delay=3), cold_delay=2)
    assert (release.first, release.row0_ns, release.cold) == (0, T0 + 40 * MS, True)
    np.testing.assert_array_equal(release.rows, chunk(0).actions)


def test_the_first_tick_has_no_handover_and_stamps_at_the_tick():
    line = timeline()
    takeover, release = publish(line, T0 + 7, chunk(0))
    assert (takeover.handover, takeover.running, takeover.anchor_ns) == (None, None, T0 + 7)
    assert (release.first, release.row0_ns, release.clipped) == (0, T0 + 7, False)
    np.testing.assert_array_equal(release.rows, chunk(0).actions)
    assert line.running.row0_ns == T0 + 7 and line.running.tick_ns == T0 + 7
    assert line.running.rows.dtype == np.float32


@pytest.mark.parametrize(
    ("offset_ns", "executed"),
    [
        (-20 * MS, 0),  # before row 0 (a chunk stamped d after its tick): nothing ran
        (9 * MS, 0),  # 0.45 steps
        (10 * MS, 1),  # 0.5 steps rounds up
        (29 * MS, 1),  # 1.45 steps
        (39 * MS, 2),  # 1.95 steps: a tick 1 ms early still counts two rows, not one
        (41 * MS, 2),
        (200 * MS, 10),  # past the chunk's 6 rows: counted all the same (act falls back)
    ],
)
def test_executed_rows_are_the_nearest_row_not_the_floor(offset_ns, executed):
    line = timeline()
    publish(line, T0, chunk(0), cold_delay=2)  # nothing ran: row 0 runs at T0 + 40 ms
    np.testing.assert_array_equal(line.running.rows[:, 0], [0, 1, 2, 3, 4, 5])
    takeover = line.at(T0 + 40 * MS + offset_ns)
    assert takeover.executed == takeover.handover.executed == executed
    assert takeover.handover.previous is line.running.rows
    assert takeover.handover.control_period_s == PERIOD_S


def test_the_anchor_is_on_the_running_chunks_grid_and_the_stamp_d_steps_after_it():
    line = timeline()
    publish(line, T0, chunk(0))
    takeover, release = publish(line, T0 + 39 * MS, chunk(1, delay=2))  # a jittered tick
    assert takeover.anchor_ns == T0 + 40 * MS  # running row 2, not the tick
    assert (release.first, release.row0_ns) == (2, T0 + 80 * MS)
    np.testing.assert_array_equal(release.rows[:, 0], [12, 13, 14, 15])
    assert (line.running.row0_ns - T0) % (20 * MS) == 0


def test_the_robot_runs_the_previous_rows_during_d_then_the_new_ones():
    line = timeline()
    publish(line, T0, chunk(0, rows=6))  # rows 0..5 from T0
    _, release = publish(line, T0 + 40 * MS, chunk(1, delay=3))  # executed 2: rows 2..5 left
    # rows 2, 3, 4 of chunk 0 during d, then chunk 1 from row 3
    np.testing.assert_array_equal(release.running.rows[:, 0], [2, 3, 4, 13, 14, 15])
    np.testing.assert_array_equal(release.running.rows[:, 1], [-2, -3, -4, -13, -14, -15])
    assert (release.running.row0_ns, release.row0_ns) == (T0 + 40 * MS, T0 + 100 * MS)
    assert release.first == 3 and release.lead.tolist() == [[3, -3], [4, -4]]
    # With d beyond a frame the next tick (T0 + 80 ms) still lies in those kept rows: it
    # meets them, then the chunk not yet started.
    takeover = line.at(T0 + 80 * MS)
    assert takeover.executed == 2 and takeover.anchor_ns == T0 + 80 * MS
    np.testing.assert_array_equal(takeover.upcoming(3)[:, 0], [4, 13, 14])


def test_rows_skipped_never_exceed_the_rows_the_robot_ran_meanwhile():
    """lerobot#4223, #4454: when the running chunk ends within the d steps, the robot runs
    its rows left and stands at the last; the new chunk goes out from the row after as
    many rows as the robot ran (not from row d: d steps into a motion never made), at
    the same stamp, d periods after the anchor."""
    line = timeline()
    publish(line, T0, chunk(0, rows=4))  # rows 0..3 from T0
    _, release = publish(line, T0 + 40 * MS, chunk(1, delay=3))  # executed 2: rows 2, 3 left
    assert (release.first, release.row0_ns) == (2, T0 + 100 * MS)
    np.testing.assert_array_equal(release.rows[:, 0], [12, 13, 14, 15])
    # rows 2 and 3 of chunk 0, its last row held for the third step, then chunk 1 from row 2
    np.testing.assert_array_equal(release.running.rows[:, 0], [2, 3, 3, 12, 13, 14, 15])
    assert release.lead.tolist() == [[3, -3], [3, -3]]  # the held last row
    spent = line.at(T0 + 300 * MS)  # every row ran: nothing left, the chunk goes from row 0
    gone = line.release(spent, chunk(2, delay=2))
    assert (gone.first, gone.row0_ns) == (0, spent.anchor_ns + 40 * MS)
    np.testing.assert_array_equal(gone.rows[:, 0], [20, 21, 22, 23, 24, 25])
    assert gone.lead.tolist() == [[15, -15], [15, -15]]


def test_the_lead_is_unknown_when_nothing_runs_or_it_had_not_started():
    line = timeline("replace")
    first = line.release(line.at(T0), chunk(0))
    assert first.lead is None  # nothing ran
    line.commit(first, 0.01)
    early = line.release(line.at(T0 + 5 * MS), chunk(1))  # executed 0, d 0: row -1
    assert early.lead is None
    later = line.release(line.at(T0 + 40 * MS), chunk(1))  # replace: d 0, row 1 ran last
    assert later.lead.tolist() == [[0, 0], [1, -1]]
    one = line.release(line.at(T0 + 20 * MS), chunk(1))  # row 0 ran last: one row known
    assert one.lead.tolist() == [[0, 0]]


def test_a_delay_past_the_chunk_publishes_its_last_row_and_says_so():
    line = timeline()
    publish(line, T0, chunk(0, rows=12))
    takeover, release = publish(line, T0 + 40 * MS, chunk(1, delay=9))
    assert (release.first, release.clipped) == (5, True)  # 10 rows left: d clipped to row 5
    np.testing.assert_array_equal(release.rows[:, 0], [15])
    assert release.row0_ns == takeover.anchor_ns + 5 * 20 * MS
    _, within = publish(line, T0 + 80 * MS, chunk(2, delay=1))
    assert not within.clipped


def test_a_horizon_bounds_the_rows_published():
    line = timeline(horizon=4)
    publish(line, T0, chunk(0))
    _, release = publish(line, T0 + 40 * MS, chunk(1, delay=1))
    np.testing.assert_array_equal(release.rows[:, 0], [11, 12, 13, 14])


def test_a_tick_before_the_running_chunks_forgets_it():
    line = timeline()
    publish(line, T0, chunk(0))
    publish(line, T0 + 40 * MS, chunk(1, delay=1))
    back = line.at(T0 + 20 * MS)  # before the tick that computed the running chunk
    assert (back.handover, back.running, back.anchor_ns) == (None, None, T0 + 20 * MS)
    assert line.running is None
    assert line.at(T0 + 40 * MS).handover is None  # forgotten, not only skipped once


def test_reset_forgets_the_running_chunk():
    line = timeline("blend")
    publish(line, T0, chunk(0))
    line.reset()
    takeover, release = publish(line, T0 + 40 * MS, chunk(1))
    assert takeover.handover is None and release.row0_ns == T0 + 40 * MS


def test_replace_hands_over_on_the_running_grid_like_the_others():
    """The engine ignores the old chunk under replace, but d and the rows the robot runs
    meanwhile are the same: the handover sizes d, the anchor is on the running grid."""
    line = timeline("replace")
    publish(line, T0, chunk(0))
    takeover, release = publish(line, T0 + 39 * MS, chunk(1, delay=1))
    assert takeover.handover.executed == 2 and takeover.anchor_ns == T0 + 40 * MS
    assert (release.first, release.row0_ns) == (1, T0 + 60 * MS)
    np.testing.assert_array_equal(release.rows[:, 0], [11, 12, 13, 14, 15])
    np.testing.assert_array_equal(line.running.rows[:, 0], [2, 11, 12, 13, 14, 15])


def test_commit_is_what_feeds_the_delay_estimate():
    delays = DelayEstimator()
    line = ChunkTimeline(PERIOD_S, "rtc", delays)
    line.commit(line.release(line.at(T0), chunk(0)), latency_s=0.01)  # an activation's first
    takeover = line.at(T0 + 40 * MS)
    release = line.release(takeover, chunk(1, delay=1))
    assert delays.steps(PERIOD_S) == 0  # nothing until it went out
    line.commit(release, latency_s=0.05)
    assert delays.steps(0.01) == 5 and line.running is release.running


def test_an_activations_first_chunk_never_inflates_d():
    """Its latency can carry one-off costs (lerobot#4223, #4454: a 0.7 s first inference
    against 0.3 s steady held d high for the whole window): only chunks that met a running
    one count, also after a reset (a reactivation) and after the clock went back."""
    delays = DelayEstimator()
    line = ChunkTimeline(PERIOD_S, "rtc", delays)
    first = line.release(line.at(T0), chunk(0))
    assert first.cold
    line.commit(first, latency_s=0.7)  # the spike
    assert delays.steps(PERIOD_S) == 0
    line.commit(line.release(line.at(T0 + 40 * MS), chunk(1, delay=1)), latency_s=0.03)
    assert delays.steps(PERIOD_S) == 2
    line.reset()
    line.commit(line.release(line.at(T0 + 80 * MS), chunk(2)), latency_s=0.9)
    line.commit(line.release(line.at(T0 + 60 * MS), chunk(3)), latency_s=0.9)  # clock back
    assert delays.steps(PERIOD_S) == 2


def test_executed_never_counts_a_row_that_runs_after_the_tick():
    """Skipped rows must have run: at every nanosecond of ticks around row boundaries (a
    10 ns period), the `executed` rows all run at or before the tick, and the new chunk's
    row 0 stands for a time at most half a period after it. Rounding to the nearest row can
    only count a row as not yet run (then the stamp is in the past and the controller drops
    it), never one that has not run."""
    line = ChunkTimeline(1e-8, "rtc", DelayEstimator())
    line.commit(line.release(line.at(1000), chunk(0, rows=8)), latency_s=0.0)
    for tick in range(1000, 1000 + 9 * 10):
        takeover = line.at(tick)
        ran = [1000 + 10 * k for k in range(takeover.executed)]
        assert all(t <= tick for t in ran), (tick, takeover.executed)
        assert -5 < takeover.anchor_ns - tick <= 5


def test_ticks_of_step_times_period_count_whole_steps_at_any_rate():
    """The in-process loop's times: step * period_ns, exact even for a period that is no
    whole number of nanoseconds in seconds (30 Hz)."""
    line = ChunkTimeline(1 / 30, "rtc", DelayEstimator())
    publish(line, 0, chunk(0))
    for step in (2, 4, 6):
        takeover, _ = publish(line, step * line.period_ns, chunk(step, delay=1))
        assert (takeover.executed, takeover.anchor_ns) == (2, step * line.period_ns)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, "rtc"), "control period must be >= 1 ns, got 0.0 s"),
        ((1e-10, "rtc"), "control period must be >= 1 ns"),
        ((PERIOD_S, "fade"), "unknown chunk_handover 'fade'"),
        ((PERIOD_S, "rtc", 0), "horizon must be >= 1 row, got 0"),
    ],
)
def test_bad_settings_are_refused_in_one_line(args, message):
    period, mode, *horizon = args
    with pytest.raises(ValueError, match=message):
        ChunkTimeline(period, mode, DelayEstimator(), *horizon)


def test_nothing_running_has_no_upcoming_rows():
    with pytest.raises(ValueError, match="no chunk is running"):
        timeline().at(T0).upcoming(2)


def test_with_rows_puts_the_gates_rows_after_the_kept_ones_at_the_same_stamp():
    line = timeline()
    publish(line, T0, chunk(0, rows=4))
    takeover = line.at(T0 + 40 * MS)
    release = line.release(takeover, chunk(1, delay=3))  # keeps chunk 0's rows 2, 3, 3
    slowed = np.array([[13.0, -13.0], [13.5, -13.5], [14.0, -14.0]])
    gated = release.with_rows(slowed)
    assert (gated.first, gated.row0_ns, gated.clipped) == (2, release.row0_ns, False)
    np.testing.assert_array_equal(gated.lead, release.lead)
    assert gated.rows.dtype == np.float32 and gated.running.rows.dtype == np.float32
    np.testing.assert_array_equal(gated.rows, slowed)
    np.testing.assert_array_equal(gated.running.rows[:, 0], [2, 3, 3, 13, 13.5, 14])
    assert (gated.running.row0_ns, gated.running.tick_ns) == (T0 + 40 * MS, T0 + 40 * MS)
    line.commit(gated, 0.01)
    np.testing.assert_array_equal(line.at(T0 + 80 * MS).upcoming(3)[:, 0], [3, 13, 13.5])


def test_with_rows_without_a_handover_is_the_gates_rows_alone():
    line = timeline("replace")
    release = line.release(line.at(T0), chunk(0), cold_delay=2)
    gated = release.with_rows(np.zeros((7, 2)))
    assert gated.running.row0_ns == release.row0_ns == T0 + 40 * MS
    np.testing.assert_array_equal(gated.running.rows, np.zeros((7, 2)))


def test_the_last_row_is_when_the_running_chunk_ends():
    line = timeline()
    assert line.last_row_ns() is None
    publish(line, T0, chunk(0, rows=4))  # rows at T0 .. T0 + 60 ms
    assert line.last_row_ns() == T0 + 60 * MS
    publish(line, T0 + 40 * MS, chunk(1, rows=6, delay=3))  # 3 kept + 4 new from T0 + 40 ms
    assert line.last_row_ns() == T0 + 40 * MS + 6 * 20 * MS


def test_rows_slowed_past_the_models_chunk_are_handed_over_as_the_window_act_reads():
    line = timeline()
    takeover = line.at(T0)
    line.commit(line.release(takeover, chunk(0, rows=4)).with_rows(np.ones((9, 2))), 0.01)
    window = line.at(T0 + 40 * MS)  # 2 of the 9 rows ran; the model's chunk has 4
    assert window.executed == 2 and window.handover.executed == 0
    assert window.handover.previous.shape == (4, 2)
    spent = line.at(T0 + 200 * MS).handover  # 10 rows by then: nothing left to meet
    assert (spent.previous.shape, spent.executed) == ((1, 2), 1)
