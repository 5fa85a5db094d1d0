"""JAX's persistent compilation cache, so a restart does not wait for XLA again.

Configure compiles every executable the engine can run (each batch bucket, prefill,
action, decode). Without a cache every start of the node, a replay or an evaluation
worker pays that again; with it, an executable compiled once (same model shapes, same
JAX, same backend and flags: JAX keys the entries on all of them) is read from disk.

Every executable is cached, however fast it compiled (JAX's default keeps only those over
one second): a small model's many sub-second compiles add up to most of its start.
JAX reads the directory when it first compiles in a process and keeps it; naming a
different one later resets the cache so the next compile uses it.
"""

from __future__ import annotations

from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

DEFAULT_DIR = "~/.cache/oxygen/jax"


def use_compile_cache(directory: str) -> Path | None:
    """Cache compiled executables in `directory` (~ expanded; created); "" turns it off.

    Returns the directory in use, or None when off.
    """
    if not directory:
        if jax.config.jax_compilation_cache_dir is not None:
            jax.config.update("jax_compilation_cache_dir", None)
            compilation_cache.reset_cache()
        return None
    path = Path(directory).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    if jax.config.jax_compilation_cache_dir != str(path):
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        compilation_cache.reset_cache()
    return path
