"""The policy's chunks in a replay, as the engine returned them.

What the node publishes is the chunk after the hand-over (rows from d on) and the chunk
gate (clamped, slowed or rejected); a policy's open-loop error is a property of the chunk
before both. `ChunkTap` stands in for the engine in the replay's frame loop
(oxygen_ros.frame.FrameLoop, unchanged): every call goes to the engine, and each chunk
`act` returns is kept with the tick it was computed at and its first executed row, for
oxygen_core.offline_score.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from oxygen_core.engine import Engine
from oxygen_core.engine.types import ActionResult, Handover
from oxygen_core.observation import Observation
from oxygen_core.offline_score import Chunk


class ChunkTap:
    """An engine that keeps every chunk it returns (`chunks`); otherwise the engine itself."""

    def __init__(self, engine: Engine, tick_ns: Callable[[], int]) -> None:
        """tick_ns: the bag time of the frame being run (the chunk's row 0)."""
        self._engine = engine
        self._tick_ns = tick_ns
        self.chunks: list[Chunk] = []

    def act(
        self, obs: Observation, handover: Handover | None = None, plan_answer: str | None = None
    ) -> ActionResult:
        result = self._engine.act(obs, handover, plan_answer)
        actions = np.array(result.actions, np.float32)
        first = min(result.delay_steps, len(actions) - 1)
        self.chunks.append(Chunk(self._tick_ns(), actions, first))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)
