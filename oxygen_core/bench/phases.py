"""What one forward of each phase costs per preset, next to its floor on this machine.

`oxygen-bench phases --preset tiny,small` times, with random weights and
`block_until_ready`, the median of several runs after compiling: a prefill (batch 1), one
denoise step, one decode step of the KV pool at buckets 1 and 32 (the step is the k=4 call
minus the k=0 call, over 4, so the call's fixed cost is reported apart) and the admission
of one request into the pool (its stream prompt through the VLM, the row written). Presets
listed in --floors-only (default pi05, far too slow for a CPU) get their floors alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable

import jax
import numpy as np

from oxygen_core.bench.floors import Floors, MachineMeter, ModelCosts
from oxygen_core.config import ModelConfig, model_preset
from oxygen_core.engine import kv_pool
from oxygen_core.model import pi05
from oxygen_core.policy import load_policy

DECODE_K = 4
BUCKETS = (1, 32)
PHASES = ("prefill", "denoise", "decode", "admit")
PROMPT = "Narrate:"  # the benchmark's stream prompt (`runner.py`)


def median_s(fn: Callable[[], object], runs: int) -> float:
    jax.block_until_ready(fn())  # compile
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclasses.dataclass
class PhaseModel:
    """One preset's model (random weights) with a frame's prefix cache, a busy 32-row pool
    and a greedy request: each phase's jitted program and its arguments, so the timings
    here and the op profile (`bench/profile.py`) run the very same calls."""

    params: dict
    cfg: ModelConfig
    inputs: pi05.PrefixInputs
    cache: pi05.PrefixCache
    noise: jax.Array
    pool: kv_pool.PoolState
    request: kv_pool.RowRequest

    @classmethod
    def build(cls, preset: str) -> PhaseModel:
        policy = load_policy(preset, "demo")
        cfg, params = policy.config, policy.params
        size = cfg.vision.image_size
        rng = np.random.default_rng(0)
        inputs = pi05.PrefixInputs(
            images=rng.uniform(-1, 1, (1, cfg.num_images, size, size, 3)).astype(np.float32),
            image_mask=np.ones((1, cfg.num_images), bool),
            tokens=rng.integers(3, policy.tokenizer.vocab_size, (1, cfg.max_token_len), np.int32),
            token_mask=np.ones((1, cfg.max_token_len), bool),
        )
        capacity = cfg.prefix_len + 40
        return cls(
            params=params,
            cfg=cfg,
            inputs=inputs,
            cache=pi05.prefill(params, cfg, inputs),
            noise=policy.noise(0),
            pool=kv_pool.busy(kv_pool.init_pool(cfg, max(BUCKETS), capacity)),
            request=admission_request(policy.tokenizer.encode(PROMPT)),
        )

    def program(
        self, phase: str, bucket: int = 1, k: int = DECODE_K, steps: int = 1
    ) -> tuple[Callable, tuple]:
        """The jitted function of `phase` (one of PHASES) and its arguments."""
        p, c = self.params, self.cfg
        programs = {
            "prefill": (pi05.prefill, (p, c, self.inputs)),
            "denoise": (pi05.denoise, (p, c, self.cache, self.noise, steps)),
            "decode": (kv_pool.decode, (p, c, self.pool, np.int32(k), bucket, DECODE_K)),
            "admit": (kv_pool.admit_row, (p, c, self.pool, np.int32(0), self.cache, self.request)),
        }
        if phase not in programs:
            raise ValueError(f"unknown phase {phase!r}; choose one of {', '.join(PHASES)}")
        return programs[phase]

    def run(self, phase: str, **shape: int) -> object:
        """One call of `phase`; the pool it updates in place becomes the model's pool."""
        fn, args = self.program(phase, **shape)
        out = fn(*args)
        if phase == "decode":
            self.pool, out = out
        elif phase == "admit":
            self.pool = out
        return out


def measure(preset: str, runs: int) -> dict[str, float]:
    """Seconds of each phase of `preset` (random weights, every camera, full prompt)."""
    model = PhaseModel.build(preset)
    out = {
        "prefill_s": median_s(lambda: model.run("prefill"), runs),
        "denoise_step_s": median_s(lambda: model.run("denoise"), runs),
    }
    for bucket in BUCKETS:
        call = median_s(lambda b=bucket: model.run("decode", bucket=b, k=0), runs)
        full = median_s(lambda b=bucket: model.run("decode", bucket=b, k=DECODE_K), runs)
        out[f"decode_step_b{bucket}_s"] = max(full - call, 0.0) / DECODE_K
        out[f"decode_call_b{bucket}_s"] = call
    out["admit_s"] = median_s(lambda: model.run("admit"), runs)
    return out


def admission_request(prompt: list[int]) -> kv_pool.RowRequest:
    """A greedy request of `prompt`, as the engine admits one (`Engine._row_request`)."""
    return kv_pool.RowRequest(
        prompt=np.asarray(prompt, np.int32),
        n_prompt=np.int32(len(prompt)),
        max_tokens=np.int32(DECODE_K),
        stop_eos=np.bool_(False),
        temperature=np.float32(0.0),
        key=np.zeros(2, np.uint32),
    )


def floors(preset: str, floors_of: Callable[[str], Floors]) -> dict[str, float]:
    f, cfg = floors_of(preset), model_preset(preset)
    capacity = cfg.prefix_len + 40
    out = {"prefill_s": f.prefill_s(), "denoise_step_s": f.denoise_s(1)}
    out |= {f"decode_step_b{b}_s": f.decode_step_s(b, capacity) for b in BUCKETS}
    # Admission's stream prompt reads every VLM weight once, as a batch-1 decode step does:
    # that step is its floor (and the engine's target for it).
    out["admit_s"] = f.decode_step_s(1, capacity)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="oxygen-bench phases", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--preset", default="tiny,small", help="presets to time")
    parser.add_argument("--floors-only", default="pi05", help="presets given floors only")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = parser.parse_args(argv)
    meter = MachineMeter(np.float32)
    machine = meter.best()

    def floors_of(name: str) -> Floors:
        return Floors(machine, ModelCosts.of(model_preset(name)))

    timed = [p for p in args.preset.split(",") if p]
    result = {"machine": vars(machine), "presets": {}}
    for name in timed + [p for p in args.floors_only.split(",") if p]:
        entry = {"floor": floors(name, floors_of)}
        if name in timed:
            entry["measured"] = measure(name, args.runs)
        result["presets"][name] = entry
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


def table(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"machine: {m['backend']} {m['dtype']}, matmul {m['matmul_gflops']:.0f} GFLOP/s, "
        f"matrix-vector {m['matvec_gbps']:.1f} GB/s",
        "",
        "| preset | phase | measured ms | floor ms |",
        "|---|---|---|---|",
    ]
    for name, entry in result["presets"].items():
        measured = entry.get("measured", {})
        for phase, floor_s in entry["floor"].items():
            got = f"{measured[phase] * 1e3:.2f}" if phase in measured else "-"
            label = phase.removesuffix("_s").replace("_b", " at batch ")
            lines.append(f"| {name} | {label} | {got} | {floor_s * 1e3:.2f} |")
        for phase in (p for p in measured if p.startswith("decode_call")):
            label = phase.removesuffix("_s").replace("_b", " at batch ")
            lines.append(f"| {name} | {label} (k=0) | {measured[phase] * 1e3:.2f} | - |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
