"""MuJoCo's offscreen renderer as the project's MuJoCo worlds (Meta-World, ALOHA) use it:
headless through EGL, with shadows and multisampling off.

MuJoCo picks its GL backend once, when it is first imported, from MUJOCO_GL. This module
sets it to egl (where the environment does not say otherwise) before importing mujoco, so
a world's package imports it before anything that imports mujoco or a simulator built on
it; a process that imported mujoco earlier must set MUJOCO_GL=egl in its environment.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import mujoco.gl_context  # noqa: E402


def offscreen_renderer(model: mujoco.MjModel, height: int, width: int) -> mujoco.Renderer:
    """A renderer of `model` at height x width. Turns the model's shadows and multisampling
    off first: the scenes ask for 4096 px shadows and 4 samples, which cost most of a
    frame on a CPU renderer (a 128 px ALOHA frame 72 ms against 7 ms, a Meta-World one
    210 against 40 ms). Widens the model's offscreen buffer to fit."""
    _check_gl()
    model.vis.quality.shadowsize = 0
    model.vis.quality.offsamples = 0
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, height)
    return mujoco.Renderer(model, height, width)


def _check_gl() -> None:
    """A clear error where MuJoCo picked GLFW (no display here) instead of EGL."""
    backend = mujoco.gl_context.GLContext.__module__
    if backend == "mujoco.glfw" and not os.environ.get("DISPLAY"):
        raise RuntimeError(
            "MuJoCo was imported before MUJOCO_GL=egl was set and has no display to render "
            "to: set MUJOCO_GL=egl in the environment"
        )
