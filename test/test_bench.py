"""oxygen-bench engine: workload schedules, floor arithmetic, and a smoke run of the CLI on `tiny`.

The smoke run checks the JSON's shape and the numbers that do not depend on speed:
every row sees the same arrivals, produces N tokens per frame in steady state, compiles
nothing after warm-up, its action Hz and tok/s follow from its own frame times, and its
requests' latencies from the frames that delivered them. The `--paper-gpu` run (what
`make bench-gpu` runs) goes through the same path on the CPU with the tiny preset.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
from pathlib import Path

import pytest

from oxygen_core.bench import cli, phases, profile, runner
from oxygen_core.bench.floors import Floors, Machine, ModelCosts
from oxygen_core.bench.metrics import (
    Comparison,
    Latency,
    RowResult,
    action_hz,
    lang_tps,
    lang_tps_frame_mean,
)
from oxygen_core.bench.requests import RequestTracker
from oxygen_core.bench.runner import BenchConfig
from oxygen_core.bench.workloads import SWEEPS, parse
from oxygen_core.config import model_preset
from oxygen_core.engine.types import LanguageResult, TokenEvent


def counts(spec: str, frames: int = 6, n: int = 30) -> list[int]:
    return [len(f) for f in parse(spec).schedule(frames, n, seed=0)]


def test_uniform_rate_is_frames_per_request_and_fractions_are_several_per_frame():
    assert counts("uniform:1") == [1] * 6
    assert counts("uniform:3") == [1, 0, 0, 1, 0, 0]
    assert counts("uniform:0.5") == [2] * 6
    assert counts("uniform:1.5") == [1, 1, 0, 1, 1, 0]
    assert parse("uniform:2").schedule(2, 7, seed=0) == [(7,), ()]


def test_poisson_mean_and_random_lengths_follow_their_parameters():
    poisson = counts("poisson:2", frames=4000)
    assert sum(poisson) / len(poisson) == pytest.approx(2.0, rel=0.05)
    lengths = [f[0] for f in parse("random:5,20,0.25").schedule(4000, 30, seed=1)]
    assert set(lengths) == {5, 20}
    assert lengths.count(20) / len(lengths) == pytest.approx(0.25, abs=0.03)
    assert parse("random:5,20,0.25").max_tokens(30) == 20
    assert parse("poisson:2").schedule(50, 30, seed=3) == parse("poisson:2").schedule(
        50, 30, seed=3
    )


@pytest.mark.parametrize(
    "spec", ["zipf:2", "uniform:0", "uniform:-1", "poisson:x", "random:20,5,0.5", "random:5,20,2"]
)
def test_bad_workloads_are_rejected_by_name(spec):
    with pytest.raises(ValueError, match="workload"):
        parse(spec)


def test_every_sweep_parses():
    assert all(parse(s) for specs in SWEEPS.values() for s in specs)


def test_buckets_are_powers_of_two_covering_the_pool():
    assert BenchConfig(modes=("oxygen",), ks=(1,), max_active=32).buckets() == (1, 2, 4, 8, 16, 32)
    assert BenchConfig(modes=("oxygen",), ks=(1,), max_active=5).buckets() == (1, 2, 4, 5)


def test_decode_floor_counts_the_vlm_weights_lm_head_and_kv_rows():
    costs = ModelCosts.of(model_preset("tiny"), value_bytes=4)
    # Per layer: q 4*64*16, kv 2*64*16, out 4*16*64, GeGLU 2*64*128 + 128*64, two norms.
    assert costs.vlm_layers == 2 * (4096 + 2048 + 4096 + 24576 + 128) + 64
    assert costs.embed == 512 * 64
    nbytes, flops = costs.decode_step(bucket=4, capacity=100)
    kv_per_token = 2 * 2 * 16 * 4  # layers x (K, V) x head_dim x float32
    assert nbytes == (costs.vlm_layers + costs.embed) * 4 + 4 * 100 * kv_per_token
    assert flops == 2 * (costs.vlm_layers + costs.embed) * 4 + 4 * 4 * 100 * 4 * 16 * 2
    floors = Floors(Machine("cpu", "float32", matmul_gflops=1.0, matvec_gbps=1.0), costs)
    assert floors.decode_step_s(4, 100) == pytest.approx(max(nbytes, flops) / 1e9)


def test_measured_arrivals_do_not_depend_on_the_warm_up_or_drain_length():
    """Runs with different k (so different warm-ups and drains) measure the same arrivals."""
    cfg = runner.BenchConfig(modes=("oxygen",), ks=(1,), frames=20)
    poisson = parse("poisson:1")
    short, long = runner.arrivals(poisson, cfg, 6), runner.arrivals(poisson, cfg, 30, drain=30)
    assert (len(short), len(long)) == (26, 80) and short[6:] == long[30:50]
    assert sum(len(f) for f in long[50:]) > 0  # arrivals go on while the rows drain


def _language(admitted: int, rejected: int, *events: tuple[int, tuple[int, ...], bool]):
    """A LanguageResult with token events (request id, new tokens, finished)."""
    token_events = tuple(
        TokenEvent(rid, "narration", 0, ids, "", "", done, "max_tokens" if done else None)
        for rid, ids, done in events
    )
    return LanguageResult(0, token_events, 0.0, 1, 1, 1, admitted, rejected, 0, 1, 1)


def test_request_latencies_follow_admission_order_on_the_rows_own_clock():
    """A and B asked in frame 0, one row: A decodes over two frames; B is trimmed from the
    queue in frame 1, where C is asked and one more request is refused; C runs in frame 2."""
    tracker = RequestTracker()
    tracker.submit(measured=True), tracker.submit(measured=True)  # A, B
    tracker.deliver(_language(1, 0, (0, (7, 8), False)), refused=0, frame_s=0.1)
    tracker.submit(measured=True)  # C
    tracker.deliver(_language(0, 2, (0, (9,), True)), refused=1, frame_s=0.2)
    tracker.deliver(_language(1, 0, (1, (5,), True)), refused=0, frame_s=0.3)
    a, b, c = tracker.timings
    assert a.completed and a.first_token() == (1, pytest.approx(0.1))
    assert a.completion() == (2, pytest.approx(0.3))
    assert b.dropped and not b.completed and b.first_frame is None
    assert c.first_token() == c.completion() == (2, pytest.approx(0.5))
    with pytest.raises(RuntimeError, match="never admitted"):
        tracker.deliver(_language(0, 0, (7, (1,), False)), refused=0, frame_s=0.1)


def test_latency_percentiles_and_ratios():
    latency = Latency.of([(1, 0.1), (3, 0.5)])
    assert (latency.frames_p50, latency.s_p50) == (2.0, pytest.approx(0.3))
    assert latency.frames_p99 == pytest.approx(1 + 2 * 0.99)
    ratio = latency.over(Latency(1.0, 2.0, 0.0, 0.1))
    assert (ratio.frames_p50, ratio.frames_p99) == (2.0, pytest.approx(2.98 / 2))
    assert ratio.s_p99 == pytest.approx(0.496 / 0.1)
    assert math.isnan(ratio.s_p50) and all(map(math.isnan, dataclasses.astuple(Latency.of([]))))


def test_a_repeated_k_is_one_row():
    assert runner.BenchConfig(modes=("oxygen",), ks=(2, 5, 2)).ks == (2, 5)


def test_rows_behind_their_arrivals_are_flagged(capsys):
    """Four requests a frame into a 2-row pool at k=1: OxyGen queues and refuses."""
    argv = ["--preset", "tiny", "--modes", "oxygen", "--k", "1", "--N", "4"]
    argv += ["--S", "1", "--frames", "4", "--workload", "uniform:0.25", "--max-active", "2"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Rows behind their arrivals" in out
    assert "- uniform:0.25 oxygen k=1: served" in out


def test_bad_flags_fail_before_any_work(capsys):
    assert cli.main(["--workload", "zipf:2"]) == 2
    assert cli.main(["--modes", "oxygen-auto"]) == 2  # k=auto needs a frame budget
    assert cli.main(["--modes", "turbo"]) == 2
    assert "oxygen-bench engine:" in capsys.readouterr().err


N, FRAMES = 3, 3


def test_smoke_run_writes_json_tables_and_plots(tmp_path, capsys):
    out, plots = tmp_path / "bench.json", tmp_path / "plots"
    modes = "isolated,shared,oxygen,oxygen-apart,oxygen-auto"
    argv = ["--preset", "tiny", "--modes", modes, "--k", "2"]
    argv += ["--N", str(N), "--S", "2", "--frames", str(FRAMES), "--budget", "5"]
    argv += ["--max-active", "3", "--json", str(out), "--plot", str(plots)]
    assert cli.main(argv) == 0

    doc = json.loads(out.read_text())
    assert set(doc) == {"preset", "config", "machine", "decode_probe", "groups", "rows",
                        "comparisons", "peak_memory_bytes"}  # fmt: skip
    assert doc["peak_memory_bytes"] >= max(r["memory_bytes"] for r in doc["rows"]) > 0
    assert doc["groups"] == {"main": ["uniform:1"]}
    assert set(doc["decode_probe"]) == {"1", "2", "3"}
    for probe in doc["decode_probe"].values():
        assert set(probe) == {"step_s", "call_overhead_s", "floor_s"}
        assert probe["step_s"] >= 0 and probe["call_overhead_s"] > 0 and probe["floor_s"] > 0
    assert doc["machine"]["matmul_gflops"] > 0 and doc["machine"]["matvec_gbps"] > 0
    rows = {r["label"]: r for r in doc["rows"]}
    assert list(rows) == ["isolated", "shared", "oxygen k=2", "oxygen-apart k=2", "oxygen-auto"]
    horizon = model_preset("tiny").action_horizon
    for r in rows.values():
        assert set(r) == {f.name for f in dataclasses.fields(RowResult)}
        assert (r["frames"], r["n"], r["steps"], r["workload"]) == (FRAMES, N, 2, "uniform:1")
        assert r["requests_per_frame"] == 1.0 and r["tokens_per_frame"] == N
        assert (r["arrived_tokens_per_frame"], r["rejected"], r["queued_end"]) == (N, 0, 0)
        assert r["new_compiles"] == 0
        assert r["deadline_misses"] == 0
        assert r["action_hz"] == pytest.approx(horizon * FRAMES / sum(r["frame_s"]))
        assert r["lang_tps"] == pytest.approx(N * FRAMES / sum(r["frame_s"]))
        assert r["lang_tps_frame_mean"] == pytest.approx(sum(N / s for s in r["frame_s"]) / FRAMES)
        assert r["frame_max_s"] == max(r["frame_s"]) and r["prefill_s"] > 0
        assert (r["requests_completed"], r["requests_unfinished"]) == (FRAMES, 0)
        # The first token leaves with the frame that asks: its latency is that frame's time.
        first = r["first_token"]
        assert first["frames_p50"] == first["frames_p99"] == 1
        assert (first["s_p50"], first["s_p99"]) == pytest.approx(
            (r["frame_p50_s"], r["frame_p99_s"])
        )
    # N=3. The baselines finish in the frame that asks. A request admitted apart gets its
    # first token from its admission and k = 2 more in that frame; one riding in the first
    # step (the default) gets k = 2 there and its last in the next frame, so every frame
    # decodes it next to the new one. Auto decodes k_min = 1 while the pool keeps up: one
    # token a frame, the first from the step it rides in.
    completion = {label: r["completion"]["frames_p99"] for label, r in rows.items()}
    assert completion == {
        "isolated": 1, "shared": 1, "oxygen k=2": 2, "oxygen-apart k=2": 1, "oxygen-auto": 3
    }  # fmt: skip
    assert rows["isolated"]["completion"] == rows["isolated"]["first_token"]
    assert rows["oxygen k=2"]["avg_k"] == 2 and rows["oxygen k=2"]["avg_batch"] == 2
    assert rows["oxygen-apart k=2"]["avg_k"] == 2 and rows["oxygen-apart k=2"]["avg_batch"] == 1
    assert rows["oxygen-auto"]["avg_k"] == 1  # the pool keeps up: auto decodes k_min
    labels = ["oxygen k=2", "oxygen-apart k=2", "oxygen-auto"]
    assert [c["label"] for c in doc["comparisons"]] == labels
    assert all(set(c) == {f.name for f in dataclasses.fields(Comparison)}
               for c in doc["comparisons"])  # fmt: skip
    assert [c["completion_ratio"]["frames_p50"] for c in doc["comparisons"]] == [2, 1, 3]

    stdout = capsys.readouterr().out
    assert "| uniform:1 | oxygen k=2 |" in stdout and "OxyGen over isolated" in stdout
    assert "| tok/s, mean of frame rates |" in stdout and "| completion ratio ms |" in stdout
    assert sorted(p.name for p in plots.iterdir()) == ["timeline.png", "vs_k.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in plots.iterdir())


def test_phase_costs_report_every_phase_next_to_its_floor(capsys):
    assert phases.main(["--preset", "tiny", "--floors-only", "pi05", "--runs", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    expected = {"prefill_s", "denoise_step_s", "decode_step_b1_s", "decode_step_b32_s", "admit_s"}
    assert set(doc["presets"]) == {"tiny", "pi05"}
    assert set(doc["presets"]["pi05"]) == {"floor"}  # far too slow to time on a CPU
    assert set(doc["presets"]["pi05"]["floor"]) == expected
    measured = doc["presets"]["tiny"]["measured"]
    assert expected <= set(measured) and all(v >= 0 for v in measured.values())
    assert (
        measured["prefill_s"] > 0 and measured["decode_call_b1_s"] > 0 and measured["admit_s"] > 0
    )


def test_the_paper_metrics_leave_out_frames_without_a_measured_time():
    """One copy of the formulas for benchmark rows and replay reports (tools.report)."""
    frame_s = [0.5, 0.25, 0.0, -1.0, 0.25]
    assert action_hz(10, frame_s) == 10 * 3 / 1.0
    assert lang_tps([5, 5, 99, 99, 0], frame_s) == pytest.approx(10 / 1.0)
    assert lang_tps_frame_mean([5, 5, 99, 99, 0], frame_s) == pytest.approx((10 + 20 + 0) / 3)
    assert action_hz(10, []) == lang_tps([], []) == lang_tps_frame_mean([], []) == 0.0
    assert action_hz(10, [0.0]) == lang_tps([3], [0.0]) == lang_tps_frame_mean([3], [0.0]) == 0.0
    for formula in (lang_tps, lang_tps_frame_mean):
        with pytest.raises(ValueError):
            formula([1, 2], [0.5])


def _make_bench_gpu_argv() -> list[str]:
    """The flags `make bench-gpu` passes to oxygen-bench engine (its recipe in the Makefile)."""
    makefile = (Path(__file__).parents[1] / "Makefile").read_text().replace("\\\n", " ")
    recipe = next(line for line in makefile.splitlines() if "/oxygen-bench engine " in line)
    words = shlex.split(recipe)
    start = next(i for i, w in enumerate(words) if w.endswith("/oxygen-bench")) + 2  # "engine"
    assert words[start - 1] == "engine"
    return [w for w in words[start:] if not w.startswith("$(")]


def test_paper_gpu_run_is_the_paper_settings_and_runs_end_to_end_on_the_cpu(tmp_path, capsys):
    """`make bench-gpu`'s command: pi05 in bfloat16 at the paper's settings, refused at once
    without a GPU; with tiny/float32/cpu (small sizes, OxyGen at two of its ks: the
    smoke run covers the modes) the same path writes its folder."""
    argv = _make_bench_gpu_argv()
    assert argv == ["--paper-gpu", "--out", "out/bench-gpu"]
    args = cli.parse_args(argv)
    paper = (args.preset, args.dtype, args.backend, args.modes, args.k, args.n, args.steps)
    assert paper == ("pi05", "bfloat16", "gpu", "isolated,shared,oxygen", (1, 5, 10), 30, 10)
    assert cli._groups(args) == {"main": [parse("uniform:1")]}
    assert (args.json, args.plot) == (Path("out/bench-gpu/bench.json"), Path("out/bench-gpu"))
    assert cli.main(argv) == 2  # the tests run JAX on the CPU
    assert "no GPU backend: JAX runs on cpu" in capsys.readouterr().err

    out = tmp_path / "bench-gpu"
    small = ["--N", "3", "--S", "2", "--frames", "2", "--max-active", "3"]  # test_smoke's shapes
    small += ["--modes", "oxygen", "--k", "1,5"]
    tiny = ["--paper-gpu", "--out", str(out), "--preset", "tiny", "--dtype", "float32"]
    assert cli.main([*tiny, "--backend", "cpu", *small]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "bench.json", "tables.md", "timeline.png", "vs_k.png"
    ]  # fmt: skip
    doc = json.loads((out / "bench.json").read_text())
    assert doc["preset"] == "tiny" and doc["config"]["ks"] == [1, 5]
    assert [r["label"] for r in doc["rows"]] == ["oxygen k=1", "oxygen k=5"]
    # N=3 at k=1: one token a frame, the first from the step the request rides in.
    k1 = doc["rows"][0]
    assert k1["completion"]["frames_p50"] == 3 and k1["requests_completed"] == 2
    tables = (out / "tables.md").read_text()
    assert tables == capsys.readouterr().out
    assert tables.count("| uniform:1 | oxygen k=") == 4  # rows, language (no baseline to compare)


def test_profile_names_a_decode_steps_operations_by_their_source():
    model = phases.PhaseModel.build("tiny")
    result = profile.profile(model, "decode", calls=3, bucket=2, k=2)
    by_source = {o.source: o for o in result.ops}
    # The decode step's dots, named by the einsums in gemma.py that they came from: the
    # MLP's gate/up, the key-major attention logits of a one-token query.
    assert "BTD,DCF->BTCF" in by_source and "XSH,XQH->XSQ" in by_source
    gate = by_source["BTD,DCF->BTCF"]
    layers = model.cfg.vlm.depth
    assert gate.shape.endswith(f"[2,{2 * model.cfg.vlm.mlp_dim}]")  # 2 rows, gate and up
    assert gate.count_per_call == 2 * layers  # once per layer and step, k = 2 steps
    assert result.wall_ms > 0 and result.op_ms > 0
    assert [o.ms_per_call for o in result.ops] == sorted(
        (o.ms_per_call for o in result.ops), reverse=True
    )
    text = profile.table(result, per=2, rows=len(result.ops))
    assert "ms per step" in text and "| BTD,DCF->BTCF | f32[2," in text


def test_profile_sources_parse_xla_instruction_lines():
    hlo = """\
%fused_computation.7 (param_0: f32[80,868], param_1: f32[868,64]) -> f32[80,64] {
  %param_0 = f32[80,868]{1,0} parameter(0)
  ROOT %dot.2 = f32[80,64]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}
}

ENTRY %main.9 (p: f32[8]) -> f32[8] {
  %ynn_fusion.3 = f32[32,4096]{1,0} fusion(%a, %b), kind=kCustom, calls=%f, \
metadata={op_name="jit(decode)/while/body/BTD,DCF->BTCF/dot_general" stack_frame_id=1}
  %ynn_fusion.7 = f32[80,64]{1,0} fusion(%c, %d), kind=kCustom, calls=%fused_computation.7
  %reduce.2 = f32[8]{0} reduce(%c, %d), metadata={op_name="jit(f)/reduce_max"}
  ROOT %tuple.1 = (f32[2], s32[]) tuple(%x, %y), metadata={op_name="jit(decode)/x"}
}
"""
    named = profile.sources(hlo)
    assert named["ynn_fusion.3"] == ("BTD,DCF->BTCF", "f32[32,4096]")  # its own source op
    assert named["ynn_fusion.7"] == ("dot", "f32[80,64]")  # its computation's root
    assert named["reduce.2"] == ("reduce_max", "f32[8]")
    assert "tuple.1" not in named  # a tuple has no one shape to report
