"""The closed-loop comparisons' variants and their table (the runs are oxygen-eval node's)."""

from __future__ import annotations

import argparse

import pytest

from oxygen_ros.tools.sim import compare as C


def test_handover_variants_pair_each_handover_with_both_latencies_and_d_covers_the_delay():
    variants = C.handover_variants(slow_delay=2)
    assert [v.name for v in variants] == [
        "fast-replace-dauto", "fast-blend-dauto", "fast-rtc-dauto",
        "slow-replace-d3", "slow-blend-d3", "slow-rtc-d3",
    ]  # fmt: skip
    for v in variants:
        fast = v.name.startswith("fast")
        assert v.command_delay_steps == (0 if fast else 2)
        # a chunk reaches the sim before the next tick, then waits 2 more: 3 rows run meanwhile
        assert v.overrides["rtc_delay_steps"] == ("auto" if fast else 3)


def test_modes_variants_run_every_mode_at_the_params_frame_and_at_a_tight_one():
    variants = C.modes_variants()
    assert [v.name for v in variants] == [f"{b}-{m}" for b in ("default", "tight") for m in C.MODES]
    for v in variants:
        assert v.overrides["engine_mode"] == v.name.split("-")[1] and v.command_delay_steps == 0
        assert ({k: x for k, x in v.overrides.items() if k != "engine_mode"} == C.TIGHT) == (
            v.name.startswith("tight")
        )


def test_rows_come_from_the_report_and_print_as_one_table():
    report = {
        "seams": {"seams": 40, "jump_mean": 0.0123, "jump_max": 0.05, "jerk_mean": 12.5,
                  "jerk_max": 99.0, "jerks": 38, "arm_jump_mean": 0.0061,
                  "gripper_jump_mean": 0.0115},
        "success": {"all": {"successes": 2, "episodes": 3, "rate": 2 / 3}},
        "action_hz": 19.95,
        "deadline_misses": 1,
        "lang_tps": 40.04,
    }  # fmt: skip
    row = C.row("slow-rtc-d3", report)
    table = C.markdown([row]).splitlines()
    assert len(table) == 3 and table[0].count("|") == table[1].count("|") == 12
    assert table[2] == (
        "| slow-rtc-d3 | 2/3 | 19.95 | 1 | 40.0 | 40 | 0.0123 | 0.0500 | 0.0061 | 0.0115 | 12 |"
    )


def test_set_reads_yaml_values_and_refuses_a_missing_name():
    assert C.override("rtc_max_guidance=10") == ("rtc_max_guidance", 10)
    assert C.override("rtc_delay_steps=auto") == ("rtc_delay_steps", "auto")
    assert C.override("streams.memory.every_frames=2") == ("streams.memory.every_frames", 2)
    for bad in ("rtc_max_guidance", "=3"):
        with pytest.raises(argparse.ArgumentTypeError):
            C.override(bad)
