"""oxygen-eval sweep: the shipped policy at two delays and two hand-overs on one seed,
the marks converted to control steps, the table, JSON and plot written."""

import json
from pathlib import Path

import pytest

from oxygen_core.train import latency_sweep

ROOT = Path(__file__).resolve().parents[1]


def test_latencies_become_control_steps_rounded_up():
    assert latency_sweep.steps_for(198.0, 20.0) == 4  # 3.96 steps: late into the 4th
    assert latency_sweep.steps_for(1030.0, 20.0) == 21
    assert latency_sweep.steps_for(50.0, 20.0) == 1


def test_bench_marks_take_frames_for_isolated_and_shared_and_the_action_phase_for_oxygen():
    rows = [
        {"mode": "isolated", "frame_p50_s": 0.9, "prefill_s": 0.4, "denoise_s": 0.1},
        {"mode": "oxygen", "frame_p50_s": 0.7, "prefill_s": 0.3, "denoise_s": 0.05},
        {"mode": "oxygen", "frame_p50_s": 0.8, "prefill_s": 0.5, "denoise_s": 0.05},
        {"mode": "shared", "frame_p50_s": 0.6, "prefill_s": 0.3, "denoise_s": 0.1},
    ]
    marks = latency_sweep.bench_marks({"preset": "demo", "rows": rows})
    assert marks == pytest.approx(
        {"isolated (demo, measured)": 900.0, "oxygen (demo, measured)": 350.0,
         "shared (demo, measured)": 600.0}
    )  # fmt: skip


def test_a_delay_that_leaves_too_few_rows_is_refused_in_one_line():
    checkpoint = str(ROOT / "data" / "policy" / "sim_demo")
    with pytest.raises(SystemExit, match="at most 8, got 9"):  # H = 10, 2 rows a frame
        latency_sweep.main(["--checkpoint", checkpoint, "--delays", "0,9"])


@pytest.mark.slow
def test_a_small_sweep_writes_its_table_json_and_plot(tmp_path, capsys):
    out = tmp_path / "sweep"
    latency_sweep.main([
        "--checkpoint", str(ROOT / "data" / "policy" / "sim_demo"), "--delays", "0,3",
        "--handovers", "replace,rtc", "--episodes", "1", "--families", "pick",
        "--out", str(out),
    ])  # fmt: skip
    payload = json.loads((out / "sweep.json").read_text())
    cells = [(r["handover"], r["delay"]) for r in payload["rows"]]
    assert cells == [("replace", 0), ("replace", 3), ("rtc", 0), ("rtc", 3)]
    assert all(r["success"]["all"]["episodes"] == 1 for r in payload["rows"])
    assert payload["marks"]["oxygen (Thor, paper)"] == [198.0, 4]
    assert payload["seeds"] == {"first": 400000, "last": 400000, "range": "dev"}
    assert "| rtc | 3 |" in capsys.readouterr().out
    assert (out / "sweep.png").stat().st_size > 0 and (out / "sweep.md").is_file()
