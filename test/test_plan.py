"""Two-stage inference (`model/plan.py`): the plan the VLM decodes and the actions read it.

The cached plan path must compute what the recomputing oracles compute: its greedy
tokens are `generate_text`'s, and the actions denoised over prefix + plan are
`sample_actions` with the plan's tokens between prefix and actions. Training's
teacher-forced cache must be the decoded one when the true answer is the decoded answer,
so a policy acts at inference on what it was trained on.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_harness import alias_candidates, alias_eos, tiny_policy

from oxygen_core.config import EOS_ID, PAD_ID
from oxygen_core.engine.engine import make_engine
from oxygen_core.engine.types import EngineConfig
from oxygen_core.model import pi05, plan
from oxygen_core.observation import Observation
from oxygen_core.sim.render import Renderer
from oxygen_core.train import rollout
from oxygen_core.train.losses import Batch, losses

PROMPT = (7, 8, 9)
N_MAX = 6
STEPS = 3


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=3)


@pytest.fixture(scope="module")
def inputs(policy):
    """Two observations (different images, instructions and states)."""
    rng = np.random.default_rng(5)
    rows = [policy.prefix_inputs(observation(policy, rng, i)) for i in range(2)]
    return jax.tree.map(lambda *a: jnp.concatenate(a), *rows)


def observation(policy, rng: np.random.Generator, i: int) -> Observation:
    size = policy.config.vision.image_size
    images = {c: rng.integers(0, 256, (size, size, 3), np.uint8) for c in policy.robot.cameras}
    state = rng.uniform(-1, 1, policy.robot.state_dim).astype(np.float32)
    return Observation(images, state, ("pick up the red block", "push the ball left")[i])


def answers(params, policy, inputs) -> list[list[int]]:
    """Greedy answers per row by the recomputing oracle (ending at EOS, or N_MAX long)."""
    return [
        pi05.generate_text(
            params, policy.config, _row(inputs, i), list(PROMPT), N_MAX, eos_id=EOS_ID
        )
        for i in range(2)
    ]


def _row(inputs, i: int) -> pi05.PrefixInputs:
    return jax.tree.map(lambda a: a[i : i + 1], inputs)


@pytest.fixture(scope="module")
def params(policy, inputs):
    """The policy's weights with EOS aliased so that one row's answer ends at EOS early."""
    plain = answers(policy.params, policy, inputs)
    for token in alias_candidates(plain):
        aliased = alias_eos(policy.params, token)
        ends = [a[-1] == EOS_ID for a in answers(aliased, policy, inputs)]
        if any(ends) and not all(ends):
            return aliased
    raise AssertionError(f"no EOS alias ends one answer early: {plain}")


def decoded(params, policy, inputs):
    cache = pi05.prefill(params, policy.config, inputs)
    return cache, *plan.decode(params, policy.config, cache, jnp.asarray(PROMPT), N_MAX)


def test_plan_tokens_are_the_greedy_recomputation(params, policy, inputs):
    _, _, tokens = decoded(params, policy, inputs)
    for got, ref in zip(np.asarray(tokens), answers(params, policy, inputs), strict=True):
        assert got[: len(ref)].tolist() == ref
        assert (got[len(ref) :] == PAD_ID).all()


def in_cache(answer: list[int]) -> list[int]:
    """The tokens a decode leaves in the cache: the prompt and the answer without its EOS
    (a cut answer without its last token)."""
    kept = answer[:-1] if answer[-1] == EOS_ID or len(answer) == N_MAX else answer
    return [*PROMPT, *kept]


def test_actions_read_the_plan_as_full_recomputation_does(params, policy, inputs):
    cfg = policy.config
    prefix_cache, act_cache, _ = decoded(params, policy, inputs)
    noise = policy.noise(4, batch=2)
    got = pi05.denoise(params, cfg, act_cache, noise, STEPS)
    rows = [in_cache(a) for a in answers(params, policy, inputs)]
    width = len(PROMPT) + N_MAX
    plan_tokens = jnp.asarray([r + [PAD_ID] * (width - len(r)) for r in rows], jnp.int32)
    n_plan = jnp.asarray([len(r) for r in rows], jnp.int32)
    ref = pi05.sample_actions(params, cfg, inputs, noise, STEPS, plan_tokens, n_plan)
    np.testing.assert_allclose(got, ref, atol=2e-5)
    without = pi05.denoise(params, cfg, prefix_cache, noise, STEPS)
    assert float(jnp.max(jnp.abs(got - without))) > 1e-3  # the plan rows are read


def test_teacher_forced_cache_is_the_decoded_one(params, policy, inputs):
    """A training row holding the decoded answer (then EOS and padding) gives the actions
    the decoded cache gives, however much padding the row has."""
    cfg = policy.config
    prefix_cache, act_cache, _ = decoded(params, policy, inputs)
    noise = policy.noise(6, batch=2)
    want = pi05.denoise(params, cfg, act_cache, noise, STEPS)
    for width in (len(PROMPT) + N_MAX + 1, len(PROMPT) + N_MAX + 5):
        rows = [in_cache(a) + [EOS_ID] for a in answers(params, policy, inputs)]
        row = jnp.asarray([r + [PAD_ID] * (width - len(r)) for r in rows], jnp.int32)
        forced = plan.teacher_forced(params, cfg, prefix_cache, row)
        np.testing.assert_allclose(pi05.denoise(params, cfg, forced, noise, STEPS), want, atol=2e-5)


def test_a_given_answer_is_read_as_full_recomputation_reads_it(policy, inputs):
    """Policy.action_cache with an answer (evaluation with the true plan): the actions
    are the recomputing oracle's with the plan prompt and that answer after the prefix,
    another answer gives other actions, and a robot without a plan stage refuses one."""
    planned = dataclasses.replace(
        policy, robot=dataclasses.replace(policy.robot, plan_prompt="Target:", plan_tokens=12)
    )
    cfg, tok = policy.config, policy.tokenizer
    cache = pi05.prefill(policy.params, cfg, inputs)
    noise = policy.noise(7, batch=2)
    got = []
    for answers in (["r2 c5", "r4 c1 to r1 c3"], ["r4 c1 to r1 c3", "r2 c5"]):
        forced, tokens = planned.action_cache(cache, answers)
        bodies = [[*tok.encode(a), EOS_ID] for a in answers]
        assert np.asarray(tokens).tolist() == [b + [PAD_ID] * (12 - len(b)) for b in bodies]
        got.append(pi05.denoise(policy.params, cfg, forced, noise, STEPS))
        rows = [[*tok.encode("Target:"), *tok.encode(a)] for a in answers]
        width = max(len(r) for r in rows)
        plan_tokens = jnp.asarray([r + [PAD_ID] * (width - len(r)) for r in rows], jnp.int32)
        n_plan = jnp.asarray([len(r) for r in rows], jnp.int32)
        ref = pi05.sample_actions(policy.params, cfg, inputs, noise, STEPS, plan_tokens, n_plan)
        np.testing.assert_allclose(got[-1], ref, atol=2e-5)
    assert float(jnp.max(jnp.abs(got[0] - got[1]))) > 1e-3
    with pytest.raises(ValueError, match="over plan_tokens=12"):
        planned.action_cache(cache, ["r2 c5", "r1 c1 to r2 c2 to r3 c3 to r4 c4 to r1 c6"])
    with pytest.raises(ValueError, match="2 cache rows"):
        planned.action_cache(cache, ["r2 c5"])
    with pytest.raises(ValueError, match="no plan stage"):
        policy.action_cache(cache, ["r2 c5", "r2 c5"])


def test_flow_loss_reads_the_plan_row_only_with_plan_row(params, policy, inputs):
    """plan_row=True: the last text row's answer changes the flow loss, its padding does
    not; plan_row=False: the text rows never reach the action expert."""
    cfg = policy.config
    horizon = (2, cfg.action_horizon, cfg.action_dim)
    actions = jnp.asarray(np.random.default_rng(1).normal(size=horizon), jnp.float32)

    def batch(answer: int, pad: int) -> Batch:
        row = [*PROMPT, answer, EOS_ID] + [PAD_ID] * pad
        text = jnp.asarray([[row], [row]], jnp.int32)
        target = jnp.zeros(text.shape, bool).at[:, :, len(PROMPT) : len(PROMPT) + 2].set(True)
        return Batch(prefix=inputs, actions=actions, text=text, text_target=target)

    def flow(b: Batch, plan_row: bool) -> float:
        return float(losses(params, cfg, b, jax.random.key(0), plan_row=plan_row)["flow"])

    base = flow(batch(20, 2), True)
    assert flow(batch(20, 6), True) == pytest.approx(base, abs=1e-6)
    assert abs(flow(batch(21, 2), True) - base) > 1e-5
    assert flow(batch(20, 2), False) == pytest.approx(flow(batch(21, 2), False), abs=1e-7)


def test_engine_acts_on_its_plan_and_narrates_from_the_prefix(policy):
    """A plan robot: the same actions and plan in oxygen and isolated mode, a plan in every
    result; the language streams read the prefix alone (the same narration as without)."""
    planned = dataclasses.replace(
        policy, robot=dataclasses.replace(policy.robot, plan_prompt="Narrate:", plan_tokens=4)
    )
    obs = observation(policy, np.random.default_rng(2), 0)
    results = {}
    for name, pol, mode in (
        ("oxygen", planned, "oxygen"),
        ("isolated", planned, "isolated"),
        ("no plan", policy, "oxygen"),
    ):
        engine = make_engine(pol, EngineConfig(engine_mode=mode))
        act = engine.act(obs)
        texts = [e.text for e in engine.language().events if e.finished or e.text]
        results[name] = (act, texts)
    (oxy, oxy_text), (iso, _), (plain, plain_text) = (
        results[k] for k in ("oxygen", "isolated", "no plan")
    )
    np.testing.assert_allclose(oxy.actions, iso.actions, atol=1e-5)
    assert oxy.plan == iso.plan and isinstance(oxy.plan, str) and oxy.plan_s > 0
    assert plain.plan is None and plain.plan_s == 0.0
    assert not np.allclose(oxy.actions, plain.actions, atol=1e-4)
    assert oxy_text and oxy_text == plain_text


def test_closed_loop_scores_each_frames_plan_against_the_target(policy):
    """The in-process loop checks every frame's plan against the target's cell now; the
    summary reports the plan figures only for a two-stage policy, splitting success by
    whether an episode's first plan was right."""
    planned = dataclasses.replace(
        policy, robot=dataclasses.replace(policy.robot, plan_prompt="Target:", plan_tokens=3)
    )
    renderer = Renderer(32, 32)
    runs = {}
    for name, pol in (("planned", planned), ("plain", policy)):
        engine = make_engine(pol, EngineConfig())
        runs[name] = rollout.run_episode(engine, "put", 100_000, 2, renderer, max_steps=6)
    assert len(runs["planned"].plans) == 3 and runs["plain"].plans == ()
    roomy = dataclasses.replace(planned, robot=dataclasses.replace(planned.robot, plan_tokens=12))
    engine = make_engine(roomy, EngineConfig())
    told = rollout.run_episode(engine, "put", 100_000, 2, renderer, max_steps=6, true_plan=True)
    assert told.plans == (True, True, True)  # each frame acted on the target's cells now
    assert "plan_right" not in rollout.summarise([runs["plain"]])["put"]
    out = runs["planned"]
    episodes = [
        dataclasses.replace(out, plans=(True, False, False), success=True),
        dataclasses.replace(out, plans=(True, True, True), success=False),
        dataclasses.replace(out, plans=(False, True, True), success=True),
    ]
    summary = rollout.summarise(episodes)["put"]
    assert summary["plan_right"] == pytest.approx(6 / 9)
    assert summary["first_plan_right"] == pytest.approx(2 / 3)
    assert summary["success_first_plan_right"] == 0.5
    assert summary["success_first_plan_wrong"] == 1.0
