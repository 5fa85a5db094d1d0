"""The persistent compilation cache: a second process reads what the first compiled.

Each process is fresh (JAX sets its cache up at the first compile of a process), and
counts the cache hits JAX reports through jax.monitoring.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oxygen_ros.tools.configure_time import configure_in_fresh_process

_COMPILE = """
import sys, jax, jax.numpy as jnp
from jax import monitoring
from oxygen_core.engine.compile_cache import use_compile_cache
hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None
)
print(use_compile_cache(sys.argv[1]))
jax.jit(lambda x: jnp.sin(x) * 3 + 1).lower(jnp.ones(8)).compile()
print(len(hits))
"""


def _compile_in_a_fresh_process(directory: str) -> list[str]:
    ran = subprocess.run(
        [sys.executable, "-c", _COMPILE, directory], capture_output=True, text=True, check=True
    )
    return ran.stdout.split()


def test_a_second_process_hits_what_the_first_compiled(tmp_path: Path):
    cache = tmp_path / "cache"
    assert _compile_in_a_fresh_process(str(cache)) == [str(cache), "0"]
    assert any(cache.iterdir())  # a sub-second compile is written too
    used, hits = _compile_in_a_fresh_process(str(cache))
    assert used == str(cache) and int(hits) >= 1  # jnp.ones compiles too


def test_an_empty_directory_turns_the_cache_off(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # where the default folder would be
    assert _compile_in_a_fresh_process("") == ["None", "0"]
    assert not (tmp_path / ".cache").exists()


@pytest.mark.slow
def test_the_node_configure_writes_its_executables_to_the_named_folder(tmp_path: Path):
    tiny = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
    cache = tmp_path / "cache"
    assert configure_in_fresh_process(tiny, str(cache)) > 0
    assert len(list(cache.iterdir())) >= 3  # prefill, action and decode at least
