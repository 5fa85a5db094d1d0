"""Real-time chunking's parts against numbers worked out by hand.

The mask schedule and the guidance weight are checked value by value against the paper's
formulas written out here; the guided Euler integration runs on a linear velocity field,
where the predicted clean chunk is affine in the noisy one and its vector-Jacobian
product has a closed form, so a float64 numpy loop computes the exact answer. The shift,
the overlap, the cross-fade and the delay estimate are small enough to spell out.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from oxygen_core.model import rtc

E = math.e


def paper_mask(c: float) -> float:
    return c * (math.exp(c) - 1) / (E - 1)


@pytest.mark.parametrize(
    ("horizon", "delay", "s", "expected"),
    [
        pytest.param(4, 1, 2, [1.0, paper_mask(1 / 2), 0.0, 0.0], id="H4-d1-s2"),
        pytest.param(
            10,
            2,
            3,
            [1.0, 1.0, *(paper_mask(k / 6) for k in (5, 4, 3, 2, 1)), 0.0, 0.0, 0.0],
            id="H10-d2-s3",
        ),
        pytest.param(4, 0, 0, [paper_mask(k / 5) for k in (4, 3, 2, 1)], id="H4-d0-s0"),
        pytest.param(4, 2, 2, [1.0, 1.0, 0.0, 0.0], id="H4-d2-s2-no-decay-left"),
        pytest.param(3, 0, 3, [0.0, 0.0, 0.0], id="H3-s3-nothing-left"),
    ],
)
def test_soft_mask_is_the_papers_schedule(horizon, delay, s, expected):
    np.testing.assert_allclose(rtc.soft_mask(horizon, delay, s), expected, rtol=1e-14, atol=0)


def test_soft_mask_literal_values():
    """Independent of the helper above: c = 1/2 and c = 5/6 by a calculator."""
    mask = rtc.soft_mask(10, 2, 3)
    assert mask[2] == pytest.approx(0.6309481, rel=1e-6)  # 5/6 (e^(5/6) - 1) / (e - 1)
    assert rtc.soft_mask(4, 1, 2)[1] == pytest.approx(0.1887703, rel=1e-6)
    assert np.all(np.diff(mask) <= 0)  # never rises along the horizon


def test_linear_ramp_is_the_cross_fade_weight():
    np.testing.assert_allclose(
        rtc.linear_ramp(10, 2, 3), [1, 1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0, 0, 0]
    )


@pytest.mark.parametrize(
    ("horizon", "delay", "s", "message"),
    [(4, 3, 2, r"delay 3 outside \[0, 2\]"), (4, 0, 5, r"s 5 outside"), (4, -1, 0, "delay -1")],
)
def test_mask_rejects_a_delay_past_the_overlap(horizon, delay, s, message):
    with pytest.raises(ValueError, match=message):
        rtc.soft_mask(horizon, delay, s)


PREVIOUS = np.arange(10, dtype=np.float32).reshape(5, 2)  # rows [0,1], [2,3], ..., [8,9]


@pytest.mark.parametrize(
    ("executed", "horizon", "rows"),
    [
        (0, 5, [0, 1, 2, 3, 4]),
        (2, 5, [2, 3, 4, 4, 4]),
        (4, 5, [4, 4, 4, 4, 4]),
        (9, 5, [4, 4, 4, 4, 4]),
        (1, 3, [1, 2, 3]),
        (3, 7, [3, 4, 4, 4, 4, 4, 4]),
    ],
)
def test_shift_drops_executed_rows_and_repeats_the_last(executed, horizon, rows):
    np.testing.assert_array_equal(rtc.shift_chunk(PREVIOUS, executed, horizon), PREVIOUS[rows])


def test_shift_rejects_negative_steps_and_empty_chunks():
    with pytest.raises(ValueError, match="executed steps must be >= 0"):
        rtc.shift_chunk(PREVIOUS, -1, 5)
    with pytest.raises(ValueError, match="rows >= 1"):
        rtc.shift_chunk(PREVIOUS[:0], 0, 5)


@pytest.mark.parametrize(
    ("rows", "executed", "delay", "horizon", "s", "d"),
    [
        (5, 2, 1, 5, 2, 1),  # the paper's steady state: s = executed
        (5, 2, 4, 5, 2, 3),  # d clipped to the 3 rows left
        (3, 1, 1, 5, 3, 1),  # a short chunk: positions 2.. have no previous row
        (5, 0, 0, 5, 0, 0),
    ],
)
def test_overlap_places_s_and_clips_d(rows, executed, delay, horizon, s, d):
    meet = rtc.overlap(PREVIOUS[:rows], executed, delay, horizon)
    assert (meet.s, meet.delay) == (s, d)
    np.testing.assert_array_equal(
        meet.previous, rtc.shift_chunk(PREVIOUS[:rows], executed, horizon)
    )


def test_no_overlap_when_every_row_ran():
    assert rtc.overlap(PREVIOUS, 5, 1, 5) is None
    assert rtc.overlap(PREVIOUS[:3], 4, 0, 5) is None


def test_blend_cross_fades_linearly_over_the_overlap():
    meet = rtc.overlap(PREVIOUS, 1, 1, 5)  # previous rows 1..4 (+4), s = 1, d = 1
    new = np.full((5, 2), 100.0, np.float32)
    out = rtc.blend(new, meet)
    ramp = np.array([1, 3 / 4, 2 / 4, 1 / 4, 0])[:, None]
    np.testing.assert_allclose(out, ramp * PREVIOUS[[1, 2, 3, 4, 4]] + (1 - ramp) * 100, rtol=1e-6)
    np.testing.assert_array_equal(out[0], PREVIOUS[1])  # the frozen row is the old one
    np.testing.assert_array_equal(out[4], new[4])


# ------------------------------------------------------------------- guidance weight


def paper_weight(tau: float, beta: float) -> float:
    if tau == 0.0:
        return beta
    r2 = (1 - tau) ** 2 / (tau**2 + (1 - tau) ** 2)
    return min(beta, (1 - tau) / (tau * r2))


@pytest.mark.parametrize("t", [1.0, 0.9, 0.75, 0.5, 0.3, 0.1])
@pytest.mark.parametrize("beta", [5.0, 100.0])
def test_guidance_weight_is_the_papers_in_openpi_time(t, beta):
    got = float(rtc.guidance_weight(jnp.float32(t), jnp.float32(beta)))
    assert got == pytest.approx(paper_weight(1.0 - t, beta), rel=1e-5)


def test_guidance_weight_values():
    assert float(rtc.guidance_weight(jnp.float32(0.5), 5.0)) == pytest.approx(2.0)
    assert float(rtc.guidance_weight(jnp.float32(0.9), 100.0)) == pytest.approx(
        0.82 / 0.09, rel=1e-5
    )
    assert float(rtc.guidance_weight(jnp.float32(1.0), 5.0)) == 5.0  # tau = 0: clipped


# ------------------------------------------------------- guided Euler on a linear field

B, H, A = 2, 5, 3


def linear_field(seed: int = 0):
    """v(x, t) = x M^T + t b: A1_hat = x - t v is affine in x, so the vjp of a cotangent
    e is e - t e M, in closed form."""
    rng = np.random.default_rng(seed)
    m = rng.normal(0, 0.5, (A, A))
    b = rng.normal(0, 1.0, (A,))
    return m, b


def reference(noise, target, weights, m, b, beta, steps):
    """The guided Euler loop by hand in float64, with the paper's weight in tau."""
    x, dt = noise.astype(np.float64), -1.0 / steps
    for i in range(steps):
        t = 1.0 + i * dt
        v = x @ m.T + t * b
        a1 = x - t * v
        e = (target - a1) * weights
        g = e - t * e @ m
        x = x + dt * (v - paper_weight(1.0 - t, beta) * g)
    return x


@pytest.mark.parametrize("steps", [1, 4, 10])
@pytest.mark.parametrize("beta", [5.0, 1.5])
def test_guided_euler_on_a_linear_field_matches_the_closed_form(steps, beta):
    m, b = linear_field()
    rng = np.random.default_rng(1)
    noise = rng.standard_normal((B, H, A)).astype(np.float32)
    target = rng.standard_normal((B, H, A)).astype(np.float32)
    weights = np.broadcast_to(rtc.soft_mask(H, 2, 1)[None, :, None], (B, H, A)).astype(np.float32)

    def velocity(x, t):
        return x @ jnp.asarray(m, jnp.float32).T + t[:, None, None] * jnp.asarray(b, jnp.float32)

    run = jax.jit(rtc.guided_euler, static_argnums=(0, 5))
    got = np.asarray(run(velocity, noise, target, weights, jnp.float32(beta), steps))
    want = reference(noise, target, weights, m, b, beta, steps)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    plain = reference(noise, target, 0 * weights, m, b, beta, steps)
    # The guidance moved the weighted positions toward the target, and no others (M mixes
    # dims, not positions; one step at beta overshoots: closeness is what the integrated
    # result promises).
    assert np.abs(got - plain)[:, -1].max() < 1e-5
    if steps == 1:
        return
    near = np.abs(got - target)[:, :2].mean()
    assert near < 0.5 * np.abs(plain - target)[:, :2].mean()


# ------------------------------------------------------------------------ delay estimate


def test_delay_is_the_largest_recent_latency_rounded_up_to_control_steps():
    est = rtc.DelayEstimator(window=3)
    assert est.steps(0.02) == 0  # nothing measured yet
    est.observe(0.031)
    assert est.steps(0.02) == 2
    est.observe(0.1)
    assert est.steps(0.02) == 5  # an exact multiple does not round up to 6
    assert est.steps(0.03) == 4
    est.observe(float("nan"))  # ignored
    est.observe(0.001)
    est.observe(0.002)
    assert est.steps(0.02) == 5  # 0.1 is still among the last three
    est.observe(0.003)
    assert est.steps(0.02) == 1  # ...and now it is not
    est.clear()
    assert est.steps(0.02) == 0
    with pytest.raises(ValueError, match="control period must be > 0"):
        est.steps(0.0)


def test_a_short_previous_chunk_is_padded_with_its_last_action_never_zeros():
    """lerobot#4454: a zero-padded prefix decodes to the dataset mean inside the guided
    region; here the prefix past the previous chunk's rows holds its last row."""
    previous = np.array([[5.0, -5.0], [6.0, -6.0], [7.0, -7.0]])  # 3 rows, horizon 6
    meet = rtc.overlap(previous, executed=1, delay=4, horizon=6)
    np.testing.assert_array_equal(meet.previous[:, 0], [6, 7, 7, 7, 7, 7])
    np.testing.assert_array_equal(meet.previous[:, 1], [-6, -7, -7, -7, -7, -7])
    assert (meet.s, meet.delay) == (4, 2)  # d clipped to the 2 rows left to meet
