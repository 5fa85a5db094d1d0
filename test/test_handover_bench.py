"""The closed-loop hand-over benchmark's plan and table (its runs are oxygen-sim-eval's)."""

from __future__ import annotations

from oxygen_ros.tools.sim import handover_bench as B


def test_plan_pairs_each_handover_with_both_latencies_and_d_covers_the_link_delay():
    plan = B.runs(slow_delay=2)
    assert [(lat, h) for lat, h, _, _ in plan] == [
        (lat, h) for lat in ("fast", "slow") for h in B.HANDOVERS
    ]
    fast = {h: (delay, d) for lat, h, delay, d in plan if lat == "fast"}
    slow = {h: (delay, d) for lat, h, delay, d in plan if lat == "slow"}
    assert set(fast.values()) == {(0, "auto")}
    # a chunk reaches the sim before the next tick, then waits 2 more: 3 rows run meanwhile
    assert set(slow.values()) == {(2, 3)}


def test_rows_come_from_the_report_and_print_as_one_table():
    report = {
        "seams": {"seams": 40, "jump_mean": 0.0123, "jump_max": 0.05, "jerk_mean": 12.5,
                  "jerk_max": 99.0, "jerks": 38},
        "success": {"all": {"successes": 2, "episodes": 3, "rate": 2 / 3}},
        "frames": 410,
        "deadline_misses": 1,
    }  # fmt: skip
    row = B.row("slow", "rtc", 3, report)
    assert row["success"] == "2/3" and row["chunks"] == 410 and row["late"] == 1
    table = B.markdown([row]).splitlines()
    assert len(table) == 3 and table[0].count("|") == table[1].count("|") == 12
    assert table[2] == "| slow | rtc | 3 | 2/3 | 40 | 0.0123 | 0.0500 | 12.5 | 99.0 | 410 | 1 |"
