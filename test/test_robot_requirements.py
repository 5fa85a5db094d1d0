"""scripts/robot_requirements.py: the robot's pip lines, pinned from requirements.txt, and
`make bench-gpu CUDA=12|13` resolving JAX through it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "robot_requirements.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def _pins() -> dict[str, str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    pairs = [line.split("==") for line in lines if "==" in line and not line.startswith("#")]
    return {name.split("[")[0].lower(): version.strip() for name, version in pairs}


@pytest.mark.parametrize("accelerator", ["cpu", "cuda12", "cuda13"])
def test_every_line_is_pinned_at_the_development_version(accelerator):
    result = _run(accelerator)
    assert result.returncode == 0, result.stderr
    jax, *rest = result.stdout.split()
    pins = _pins()
    assert jax == f"jax[{accelerator}]=={pins['jax']}"
    assert rest and all(
        line == f"{line.split('==')[0]}=={pins[line.split('==')[0]]}" for line in rest
    )
    assert _run("--jax", accelerator).stdout.split() == [jax]


def test_an_unknown_accelerator_is_refused_in_one_line():
    result = _run("rocm")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "robot_requirements.py: accelerator 'rocm' is not one of cpu, cuda12, cuda13"
    )


@pytest.mark.parametrize("cuda", ["12", "13"])
def test_make_bench_gpu_installs_the_pinned_plugin_of_its_cuda(cuda):
    dry = subprocess.run(
        ["make", "-n", "-B", "bench-gpu", f"CUDA={cuda}"], cwd=ROOT, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    assert f"scripts/robot_requirements.py --jax cuda{cuda}" in dry.stdout
    assert f"cuda{cuda}-{_pins()['jax']}" in dry.stdout  # the stamp names what it installed
