"""What `act` does with the chunk the robot is executing: the host side of the hand-over.

A frame may come with a `Handover`: the previous chunk in robot units, how many of its
rows ran before this frame's observation, and the control period. `handover_overlap` checks
it and decides d (fixed by `rtc_delay_steps`, or "auto": recent act latencies rounded up
to control steps) and where the new chunk meets the old one. For "rtc",
`guidance_target` turns the previous chunk into the model's space of THIS frame (the
deltas of a delta-action robot are relative to the new state, then normalised) with the
paper's soft mask as per-position weights; the denoising itself is
`oxygen_core.model.rtc.guided_denoise`. "blend" needs nothing here but the overlap.
"""

from __future__ import annotations

import numpy as np

from oxygen_core.engine.types import EngineConfig, Handover
from oxygen_core.model import rtc
from oxygen_core.policy import Policy


def check_handover_config(cfg: EngineConfig) -> None:
    """One-line errors for chunk hand-over settings no engine can run."""
    if cfg.chunk_handover not in ("replace", "blend", "rtc"):
        raise ValueError(
            f"unknown chunk_handover {cfg.chunk_handover!r}; choose replace, blend or rtc"
        )
    if not cfg.rtc_max_guidance > 0:
        raise ValueError(f"rtc_max_guidance must be > 0, got {cfg.rtc_max_guidance}")
    delay = cfg.rtc_delay_steps
    if delay != "auto" and (isinstance(delay, bool) or not isinstance(delay, int) or delay < 0):
        raise ValueError(f"rtc_delay_steps must be 'auto' or an integer >= 0, got {delay!r}")


def check_handover(handover: Handover, horizon: int, action_dim: int) -> None:
    """One-line errors for a handover `act` cannot use."""
    previous = np.asarray(handover.previous)
    shape_ok = previous.ndim == 2 and 1 <= previous.shape[0] <= horizon
    if not (shape_ok and previous.shape[1] == action_dim and np.all(np.isfinite(previous))):
        raise ValueError(
            f"handover chunk must be finite [1..{horizon}, {action_dim}], got "
            f"{previous.shape} {'with non-finite values' if shape_ok else ''}".rstrip()
        )
    executed = handover.executed
    if isinstance(executed, bool) or not isinstance(executed, int | np.integer) or executed < 0:
        raise ValueError(f"handover executed steps must be an integer >= 0, got {executed!r}")
    if not handover.control_period_s > 0:
        raise ValueError(f"handover control period must be > 0, got {handover.control_period_s}")


def handover_overlap(
    cfg: EngineConfig, delays: rtc.DelayEstimator, policy: Policy, handover: Handover | None
) -> tuple[int, rtc.Overlap | None]:
    """d (0 without a handover) and where the new chunk meets the previous one (None: no
    handover, or none of its rows left). Raises ValueError on a malformed handover."""
    if handover is None:
        return 0, None
    horizon = policy.config.action_horizon
    check_handover(handover, horizon, policy.robot.action_dim)
    delay = cfg.rtc_delay_steps
    if delay == "auto":
        delay = delays.steps(handover.control_period_s)
    return delay, rtc.overlap(handover.previous, handover.executed, delay, horizon)


def guidance_target(
    policy: Policy, meet: rtc.Overlap, state: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Y and W for `rtc.guided_denoise`, float32 [1, H, 32] each: the shifted previous
    chunk in the model's normalised space of this frame's `state`, and the soft mask per
    position; 0 on the model's padding dims past the robot's (no target there)."""
    horizon, dims = policy.config.action_horizon, policy.config.action_dim
    target = policy.model_actions(meet.previous, state)[None]
    mask = rtc.soft_mask(horizon, meet.delay, meet.s)
    used = np.arange(dims) < policy.robot.model_dims
    return target, (mask[:, None] * used[None, :]).astype(np.float32)[None]
