"""The base camera of a closed-loop run as an animated GIF, with the words drawn on it.

Users would rather watch an episode than read it: each frame is the base camera image,
scaled up, above a caption band holding the episode (family, seed, sim time), its
instruction, the narration current at that frame (the node's stream, or the expert's
lines) and, on the episode's last frames, whether it succeeded. Frames belong to the
episode whose sim-time window holds their stamp; frames outside every window are left out.
Pillow writes the GIF (no video codec needed).
"""

from __future__ import annotations

import bisect
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim.outcome import Outcome

WIDTH = 336  # pixels of the scaled-up camera image and the caption
CAPTION_LINES = 5
_LINE_PX = 14
_CHARS = 50  # per caption line at 12 px


def caption_at(time_ns: int, track: Sequence[tuple[int, str]]) -> str:
    """The latest text of `track` ((sim time, text), in time order) at time_ns, or ""."""
    times = [t for t, _ in track]
    k = bisect.bisect_right(times, time_ns) - 1
    return track[k][1] if k >= 0 else ""


def frame_image(
    pixels: np.ndarray, outcome: Outcome, time_ns: int, narration: str, last: bool
) -> Image.Image:
    """One GIF frame: the camera image above its caption."""
    camera = Image.fromarray(pixels).resize((WIDTH, WIDTH), Image.Resampling.NEAREST)
    canvas = Image.new("RGB", (WIDTH, WIDTH + CAPTION_LINES * _LINE_PX + 6), "white")
    canvas.paste(camera, (0, 0))
    seconds = (time_ns - outcome.start_ns) / NS_PER_S
    lines = [f"{outcome.family} seed {outcome.seed}  t = {seconds:4.1f} s"]
    lines += textwrap.wrap(f"task: {outcome.instruction}", _CHARS)[:1]
    lines += textwrap.wrap(f"narration: {narration}", _CHARS)[:2]
    if last:
        lines.append("SUCCESS" if outcome.success else "FAILED (time limit)")
    draw, font = ImageDraw.Draw(canvas), ImageFont.load_default(size=12)
    for i, line in enumerate(lines[:CAPTION_LINES]):
        draw.text((4, WIDTH + 3 + i * _LINE_PX), line, fill="black", font=font)
    return canvas


def write_gif(
    path: Path,
    frames: Sequence[tuple[int, np.ndarray]],
    outcomes: Sequence[Outcome],
    narration: Sequence[tuple[int, str]],
    fps: float = 5.0,
) -> bool:
    """The frames inside some episode, captioned; False when there is none to write."""
    images = []
    for k, (time_ns, pixels) in enumerate(frames):
        outcome = next((o for o in outcomes if o.start_ns <= time_ns <= o.end_ns), None)
        if outcome is None:
            continue
        following = frames[k + 1][0] if k + 1 < len(frames) else None
        last = following is None or following > outcome.end_ns
        text = caption_at(time_ns, narration)
        images.append(frame_image(pixels, outcome, time_ns, text, last))
    if not images:
        return False
    durations = [round(1000 / fps)] * len(images)
    images[0].save(
        path, save_all=True, append_images=images[1:], duration=durations, loop=0, optimize=True
    )
    return True
