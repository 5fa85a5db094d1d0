"""Real-time chunking: a new action chunk that continues the one the robot is executing.

A chunk is computed while the robot still executes the previous one. By the time the new
chunk arrives, d more control steps of the old one have run, and a chunk sampled without
knowing them jumps at the hand-over. Real-time chunking (Black, Galliker and Levine 2025)
fixes this at inference time: the previous chunk, shifted by the steps already executed,
becomes a target for the new chunk's first positions, and every denoising step is
guided toward it through the model's own Jacobian.

The pieces, in this project's time convention (openpi's: noise at t = 1, data at t = 0,
x_{t+dt} = x_t + dt v_t with dt = -1/n and v_t ~ noise - actions; the paper runs
tau = 1 - t the other way and its velocity is -v_t):

- `shift_chunk` / `overlap`: the previous chunk's rows not yet executed, padded at the
  end by repeating its last row (a robot that runs out of chunk holds its last command),
  and how many positions of the new chunk it covers.
- `linear_ramp` / `soft_mask`: per-position weight of the previous chunk. 1 on the first
  d positions (they execute before the new chunk arrives: frozen), 0 from H - s on (the
  shifted previous chunk has no data there; s = its rows executed when this frame's
  observation was taken), and in between the ramp c_i = (H - s - i) / (H - s - d + 1).
  `soft_mask` is the paper's exponential schedule c_i (e^c_i - 1) / (e - 1) of that ramp;
  `blend` uses the ramp itself for a plain cross-fade, the cheap baseline.
- `guidance_weight`: the paper's pseudo-inverse guidance weight, clipped at beta.
- `guided_euler`: Euler integration where each step adds the guidance
  g = [(Y - A1_hat) * W]^T dA1_hat/dx_t, one vector-Jacobian product of the predicted
  clean chunk A1_hat = x_t - t v_t, to the velocity. It takes the velocity as a function,
  so a linear toy field checks it against a closed form; `guided_denoise` runs it on
  pi0.5's action expert (`pi05.velocity`, the same function the plain `pi05.denoise`
  uses). The prefix KV cache is closed over, so it is a constant of the vjp: the
  guidance touches only the action expert's pass, and OxyGen's shared prefix is only read.
- `DelayEstimator`: d from recent latencies, rounded up to control steps.

Shapes are static and d, the target and the weights are traced values, so a running
engine compiles `guided_denoise` once, whatever the delay.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from oxygen_core.config import ModelConfig
from oxygen_core.model import pi05

Velocity = Callable[[jax.Array, jax.Array], jax.Array]  # (x_t [B, H, A], t [B]) -> v_t


# ----------------------------------------------------------------- host side (numpy)


def shift_chunk(previous: np.ndarray, executed: int, horizon: int) -> np.ndarray:
    """previous [P, D] with `executed` rows already run -> [horizon, D]: the rows still to
    run, then the last row repeated. With nothing left, every row is the last one."""
    previous = np.asarray(previous)
    if previous.ndim != 2 or previous.shape[0] < 1:
        raise ValueError(f"previous chunk must be [rows >= 1, dims], got {previous.shape}")
    if executed < 0:
        raise ValueError(f"executed steps must be >= 0, got {executed}")
    rest = previous[executed : horizon + executed]
    pad = np.repeat(previous[-1:], horizon - rest.shape[0], axis=0)
    return np.concatenate([rest, pad], axis=0)


def linear_ramp(horizon: int, delay: int, s: int) -> np.ndarray:
    """float64 [horizon]: 1 for i < d, c_i = (H - s - i) / (H - s - d + 1) for
    d <= i < H - s, 0 for i >= H - s. Needs 0 <= s <= H and 0 <= d <= H - s."""
    end = horizon - s
    if not 0 <= s <= horizon:
        raise ValueError(f"s {s} outside [0, {horizon}]")
    if not 0 <= delay <= end:
        raise ValueError(f"delay {delay} outside [0, {end}] (horizon {horizon} - s {s})")
    i = np.arange(horizon)
    ramp = (end - i) / (end - delay + 1)
    return np.where(i < delay, 1.0, np.where(i < end, ramp, 0.0))


def soft_mask(horizon: int, delay: int, s: int) -> np.ndarray:
    """The paper's guidance weights W [horizon] (float64): c (e^c - 1) / (e - 1) of the
    ramp, which keeps its 1s and 0s and decays exponentially in between."""
    c = linear_ramp(horizon, delay, s)
    return c * np.expm1(c) / np.expm1(1.0)


@dataclasses.dataclass(frozen=True)
class Overlap:
    """Where a new chunk of `horizon` positions meets the previous chunk.

    previous: [horizon, D] the previous chunk shifted by its executed rows, padded.
    s: positions from horizon - s on have no previous row (the paper's s: the executed
        rows, plus any the previous chunk was short of a full horizon).
    delay: d, clipped to the positions the previous chunk still covers.
    """

    previous: np.ndarray
    s: int
    delay: int


def overlap(previous: np.ndarray, executed: int, delay: int, horizon: int) -> Overlap | None:
    """The overlap of a new chunk with `previous` [rows, D] after `executed` of its rows,
    when d more run before the new one arrives; None when no row is left to meet."""
    if delay < 0:
        raise ValueError(f"delay must be >= 0, got {delay}")
    shifted = shift_chunk(previous, executed, horizon)
    rows_left = min(np.shape(previous)[0] - executed, horizon)
    if rows_left <= 0:
        return None
    return Overlap(shifted, horizon - rows_left, min(delay, rows_left))


def blend(new: np.ndarray, meet: Overlap) -> np.ndarray:
    """The cross-fade baseline, in robot units: the shifted previous chunk weighted by the
    linear ramp, the new chunk [H, D] by 1 - ramp."""
    ramp = linear_ramp(new.shape[0], meet.delay, meet.s)[:, None]
    return (ramp * meet.previous + (1.0 - ramp) * new).astype(np.float32)


def control_steps(seconds: float, control_period_s: float) -> int:
    """`seconds` in control steps, rounded up (a chunk that arrives within a step runs
    from the next one); the tolerance keeps an exact multiple (0.1 s at 20 ms) from
    rounding up to 6."""
    return max(0, math.ceil(seconds / control_period_s - 1e-9))


class DelayEstimator:
    """d: control steps between an observation and its chunk's arrival, from recent latencies.

    The largest of the last `window` latencies, divided by the control period and rounded
    up: an underestimate lets the robot run new-chunk rows the guidance did not freeze (a
    seam), an overestimate only freezes a row more, so the estimate errs high.
    """

    def __init__(self, window: int = 10) -> None:
        self._recent: collections.deque[float] = collections.deque(maxlen=window)

    def observe(self, seconds: float) -> None:
        if math.isfinite(seconds) and seconds >= 0:
            self._recent.append(seconds)

    def steps(self, control_period_s: float) -> int:
        """0 before any latency is known."""
        if control_period_s <= 0:
            raise ValueError(f"control period must be > 0, got {control_period_s}")
        if not self._recent:
            return 0
        return control_steps(max(self._recent), control_period_s)

    def clear(self) -> None:
        self._recent.clear()


# ----------------------------------------------------------------- device side (JAX)


def guidance_weight(t: jax.Array, beta: jax.Array) -> jax.Array:
    """min(beta, (1 - tau) / (tau r2)) with tau = 1 - t, r2 = (1 - tau)^2 / (tau^2 +
    (1 - tau)^2); simplified to (tau^2 + (1 - tau)^2) / (tau (1 - tau)). Infinite at the
    ends (tau = 0 is the first step), so clipped to beta there."""
    tau = 1.0 - t
    denom = tau * (1.0 - tau)
    safe = jnp.where(denom > 0, denom, 1.0)
    return jnp.where(denom > 0, jnp.minimum(beta, (tau**2 + (1.0 - tau) ** 2) / safe), beta)


def guided_euler(
    velocity: Velocity,
    noise: jax.Array,
    target: jax.Array,
    weights: jax.Array,
    beta: jax.Array,
    steps: int,
) -> jax.Array:
    """Euler from noise (t=1) to actions (t=0), each step guided toward `target`.

    noise, target, weights: [B, H, A] (weights 0 where the target says nothing).
    Step: A1_hat = x_t - t v_t; g = vjp of x -> A1_hat at ((Y - A1_hat) * W);
    x <- x_t + dt (v_t - w(t) g), i.e. the paper's v + w g with its velocity -v_t.
    """
    dt = -1.0 / steps

    def step(i: jax.Array, x_t: jax.Array) -> jax.Array:
        t = 1.0 + i * dt
        t_batch = jnp.full((x_t.shape[0],), t, jnp.float32)

        def clean(x: jax.Array) -> tuple[jax.Array, jax.Array]:
            v = velocity(x, t_batch)
            return x - t * v, v

        a1_hat, pullback, v_t = jax.vjp(clean, x_t, has_aux=True)
        (g,) = pullback((target - a1_hat) * weights)
        return x_t + dt * (v_t - guidance_weight(t, beta) * g)

    return jax.lax.fori_loop(0, steps, step, noise)


@functools.partial(jax.jit, static_argnames=("cfg", "steps"))
def guided_denoise(
    params: pi05.Params,
    cfg: ModelConfig,
    cache: pi05.PrefixCache,
    noise: jax.Array,
    target: jax.Array,
    weights: jax.Array,
    beta: jax.Array,
    steps: int,
) -> jax.Array:
    """`pi05.denoise` with real-time chunking guidance; target and weights [B, Ha, A] in
    the model's normalised action space, beta the weight clip. The cache is only read."""

    def velocity(x_t: jax.Array, t: jax.Array) -> jax.Array:
        return pi05.velocity(params, cfg, cache, x_t, t)

    return guided_euler(velocity, noise, target, weights, beta, steps)
