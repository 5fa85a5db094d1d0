"""The OxyGen engine: shared-prefix KV pool, request state, scheduler and baselines."""

from oxygen_core.engine.engine import Engine, make_engine
from oxygen_core.engine.types import EngineConfig, Handover, StreamConfig

__all__ = ["Engine", "EngineConfig", "Handover", "StreamConfig", "make_engine"]
