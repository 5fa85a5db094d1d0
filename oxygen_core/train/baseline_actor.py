"""A baseline (oxygen_core.sim.baselines) in the engine's seat of the closed loop.

`rollout.run_episode` drives whatever acts like the engine: `reset`, `act` on an
observation, `language`, the hand-over setting and the delay estimate the timeline feeds.
A baseline answers `act` with its chunk from the observation's joints (and its
instruction, the first frame of an episode), says nothing, and hands over by replacing.
So a baseline's chunks take the policy's path exactly: the timeline, the chunk gate, the
trajectory controller, the success check.
"""

from __future__ import annotations

import numpy as np

from oxygen_core.engine.types import ActionResult, EngineConfig, Handover, LanguageResult
from oxygen_core.model.rtc import DelayEstimator
from oxygen_core.observation import Observation
from oxygen_core.sim.baselines import Baseline, make_baseline


class BaselineActor:
    """`baseline` acting every `execute` control steps with chunks of `horizon` rows."""

    def __init__(self, baseline: Baseline | str, execute: int, horizon: int) -> None:
        if execute < 1 or horizon < execute:
            raise ValueError(f"need 1 <= execute ({execute}) <= horizon ({horizon})")
        self.baseline = make_baseline(baseline) if isinstance(baseline, str) else baseline
        self.execute, self.horizon = execute, horizon
        self.cfg = EngineConfig(streams=())  # replace hand-over, no language
        self.delay = DelayEstimator()
        self.frame = -1

    def reset(self) -> None:
        """A new episode: its first frame resets the baseline with the instruction."""
        self.frame = -1

    def act(
        self, obs: Observation, handover: Handover | None = None, plan_answer: str | None = None
    ) -> ActionResult:
        self.frame += 1
        if self.frame == 0:
            self.baseline.reset(obs.prompt)
        step = self.frame * self.execute
        rows = self.baseline.chunk(np.asarray(obs.state, np.float64), step, self.horizon)
        return ActionResult(self.frame, rows.astype(np.float32), 0.0, 0.0)

    def language(self, time_left_s: float | None = None) -> LanguageResult:
        return LanguageResult(self.frame, (), 0.0, 0, 0, 0, 0, 0, 0, 0, 0)
