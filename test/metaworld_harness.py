"""Shared setup for the Meta-World tests: skip where MuJoCo cannot render.

Meta-World renders the corner2 camera headless through EGL (MUJOCO_GL=egl), and MuJoCo
binds its GL backend when it is first imported: a machine without the EGL libraries
(`apt-get install libegl1 libegl-mesa0`) fails at that import. Importing this module sets
MUJOCO_GL and finds out once; a test module that imports oxygen_core.metaworld.env, or a
tool that does, calls `require_metaworld()` before those imports, so it is skipped with the
reason instead of failing to collect, and a test elsewhere that loads them is marked
`needs_metaworld`.
"""

from __future__ import annotations

import os

import pytest


def _unavailable() -> str | None:
    """Why Meta-World cannot run here (None: it can)."""
    os.environ.setdefault("MUJOCO_GL", "egl")  # before anything imports mujoco
    try:
        import metaworld  # noqa: F401
        from mujoco.egl import GLContext

        GLContext(16, 16).free()
    except ImportError as error:
        return f"metaworld cannot be imported (requirements.txt; EGL libraries): {error}"
    except Exception as error:  # no device, no display: every kind means no rendering
        return f"MuJoCo's EGL rendering is unavailable: {type(error).__name__}: {error}"
    return None


REASON = _unavailable()
needs_metaworld = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def require_metaworld() -> None:
    """Skip the calling module unless metaworld is installed and MuJoCo renders with EGL."""
    if REASON is not None:
        pytest.skip(REASON, allow_module_level=True)
