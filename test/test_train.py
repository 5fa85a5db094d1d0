"""Training: the losses against the inference oracles, data preparation, the loop, export.

The text loss is checked against `pi05.full_logits` (the recomputing reference of the
engine's decoder), so it scores exactly the next-token predictions the engine makes after
a stream prompt; the flow loss against its closed form. Training runs on the tiny preset.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm

from oxygen_core.config import EOS_ID, PAD_ID, model_preset, robot_preset
from oxygen_core.model import pi05
from oxygen_core.model import weights as P
from oxygen_core.model.normalize import read_norm_stats, write_norm_stats
from oxygen_core.model.tokenizer import Tokenizer
from oxygen_core.policy import Policy, load_policy
from oxygen_core.train import dataset as D
from oxygen_core.train import grounding as G
from oxygen_core.train import losses as L
from oxygen_core.train.checkpoints import write_checkpoint
from oxygen_core.train.records import expert_episode
from oxygen_core.train.trainer import TrainConfig, drop_cameras, make_eval, to_batch, train

CFG = model_preset("tiny")
ROBOT = robot_preset("sim")


def test_flow_pair_interpolates_noise_and_actions():
    actions = jnp.asarray([[[1.0, -2.0]], [[0.5, 0.0]]])
    noise = jnp.asarray([[[3.0, 4.0]], [[-1.0, 2.0]]])
    x_t, u = L.flow_pair(actions, noise, jnp.asarray([0.25, 1.0]))
    np.testing.assert_allclose(x_t, [[[1.5, -0.5]], [[-1.0, 2.0]]])
    np.testing.assert_allclose(u, [[[2.0, 6.0]], [[-1.5, 2.0]]])


def test_time_is_beta_1_5_1_scaled_into_0_001_1():
    t = np.asarray(L.sample_time(jax.random.key(0), (200_000,)))
    assert t.min() >= 0.001 and t.max() <= 1.0
    # Beta(1.5, 1): mean 0.6, P(x < 0.5) = 0.5 ** 1.5.
    assert abs(t.mean() - (0.6 * 0.999 + 0.001)) < 0.003
    assert abs(np.mean(t < 0.5 * 0.999 + 0.001) - 0.5**1.5) < 0.003


def test_flow_loss_is_the_velocity_error_at_the_drawn_time_and_noise(params):
    inputs = _inputs(2, seed=1)
    cache = pi05.prefill(params, CFG, inputs)
    actions = jax.random.normal(jax.random.key(2), (2, CFG.action_horizon, CFG.action_dim))
    key = jax.random.key(3)
    noise_key, time_key = jax.random.split(key)
    noise = jax.random.normal(noise_key, actions.shape)
    t = L.sample_time(time_key, (2,))
    x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
    v = pi05.velocity(params, CFG, cache, x_t, t)
    expected = np.mean(np.square(np.asarray(v) - np.asarray(noise - actions)))
    np.testing.assert_allclose(L.flow_loss(params, CFG, cache, actions, key), expected, rtol=1e-5)


def test_several_flow_draws_per_chunk_each_read_that_chunks_own_prefix(params):
    inputs = _inputs(2, seed=1)
    cache = pi05.prefill(params, CFG, inputs)
    actions = jax.random.normal(jax.random.key(2), (2, CFG.action_horizon, CFG.action_dim))
    key, draws = jax.random.key(3), 3
    noise_key, time_key = jax.random.split(key)
    noise = jax.random.normal(noise_key, (2 * draws, *actions.shape[1:]))
    t = L.sample_time(time_key, (2 * draws,))
    errors = []
    for row in range(2 * draws):
        b = row // draws  # rows b * draws .. b * draws + draws - 1 are chunk b's draws
        alone = pi05.prefill(params, CFG, jax.tree.map(lambda a, b=b: a[b : b + 1], inputs))
        x_t = t[row] * noise[row] + (1 - t[row]) * actions[b]
        v = pi05.velocity(params, CFG, alone, x_t[None], t[row : row + 1])
        errors.append(np.square(np.asarray(v[0]) - np.asarray(noise[row] - actions[b])))
    np.testing.assert_allclose(
        L.flow_loss(params, CFG, cache, actions, key, samples=draws), np.mean(errors), rtol=1e-4
    )


def test_text_row_marks_only_the_line_and_its_eos(tokenizer):
    ids, target = D.text_row(tokenizer, "Narrate:", "moving to the red block", 24)
    head = tokenizer.encode("Narrate:")
    body = tokenizer.encode("moving to the red block")
    n = len(head) + len(body) + 1
    assert ids[:n].tolist() == head + body + [EOS_ID]
    assert (ids[n:] == PAD_ID).all()
    assert target.tolist() == [False] * len(head) + [True] * (len(body) + 1) + [False] * (24 - n)
    with pytest.raises(ValueError, match="over 5 tokens"):
        D.text_row(tokenizer, "Narrate:", "moving to the red block", 5)


def test_text_loss_scores_target_tokens_with_the_decoders_logits(params, tokenizer):
    """Cross-entropy = -log p(token) from full_logits after prefix + the tokens before it,
    summed over the line and EOS only (the prompt's own tokens are not predicted)."""
    inputs = _inputs(2, seed=4)
    length = 20
    rows = [
        [D.text_row(tokenizer, "Narrate:", "grasping the red ball", length)],
        [D.text_row(tokenizer, "Narrate:", "lifting the blue block", length)],
    ]
    text = np.asarray([[r[0] for r in b] for b in rows])
    target = np.asarray([[r[1] for r in b] for b in rows])
    cache = pi05.prefill(params, CFG, inputs)
    total, count = L.text_loss(params, CFG, cache, jnp.asarray(text), jnp.asarray(target))
    expected, n = 0.0, 0
    for b in range(2):
        for j in np.flatnonzero(target[b, 0]):
            single = jax.tree.map(lambda a, b=b: a[b : b + 1], inputs)
            logits = pi05.full_logits(
                params, CFG, single, jnp.asarray(text[b, :, :]), jnp.asarray([j]), length
            )
            expected -= float(jax.nn.log_softmax(logits[0])[text[b, 0, j]])
            n += 1
    assert int(count) == n == int(target.sum())
    np.testing.assert_allclose(float(total), expected, rtol=1e-4)


def test_text_loss_ignores_the_prompt_and_padding(params, tokenizer):
    inputs = _inputs(1, seed=5)
    ids, target = D.text_row(tokenizer, "Remember:", "picked up the red block", 24)
    cache = pi05.prefill(params, CFG, inputs)
    base = L.text_loss(
        params, CFG, cache, jnp.asarray(ids)[None, None], jnp.asarray(target)[None, None]
    )
    # A different last padding token changes nothing (it is after EOS and never a target);
    # unmarking the EOS removes exactly one scored token.
    padded = ids.copy()
    padded[-1] = 7
    other = L.text_loss(
        params, CFG, cache, jnp.asarray(padded)[None, None], jnp.asarray(target)[None, None]
    )
    np.testing.assert_allclose(other[0], base[0], rtol=1e-6)
    no_eos = target.copy()
    no_eos[np.flatnonzero(ids == EOS_ID)[0]] = False
    fewer = L.text_loss(
        params, CFG, cache, jnp.asarray(ids)[None, None], jnp.asarray(no_eos)[None, None]
    )
    assert int(fewer[1]) == int(base[1]) - 1 and float(fewer[0]) < float(base[0])


def test_expert_records_hold_the_next_h_commands():
    records = expert_episode("pick", 0, horizon=5, camera_size=32)
    assert len(records) == 58 and all(r.episode == "pick/0" for r in records)
    first = np.stack([r.actions[0] for r in records])
    for t in range(len(records) - 4):
        np.testing.assert_array_equal(records[t].actions, first[t : t + 5])
    np.testing.assert_array_equal(records[-1].actions, np.repeat(first[-1:], 5, axis=0))
    assert records[0].memory == "" and records[-1].memory == "picked up the yellow block"
    assert records[0].narration == "moving to the yellow block"
    assert set(records[0].obs.images) == {"base_0_rgb", "left_wrist_0_rgb"}


def test_norm_stats_are_data_quantiles_and_round_trip(tmp_path):
    data = _episodes(np.linspace(0.0, 100.0, 101))
    stats = D.norm_stats(data, robot_preset("demo"))  # absolute actions: stats of the data
    np.testing.assert_allclose(stats.state.q01, [1.0, -99.0])
    np.testing.assert_allclose(stats.state.q99, [99.0, -1.0])
    np.testing.assert_allclose(stats.state.mean, [50.0, -50.0])
    path = tmp_path / "assets" / "sim" / "norm_stats.json"
    write_norm_stats(path, stats)
    back = read_norm_stats(path)
    for part in ("state", "actions"):
        for field in ("q01", "q99", "mean", "std"):
            np.testing.assert_array_equal(
                getattr(getattr(back, part), field), getattr(getattr(stats, part), field)
            )


def test_chunk_targets_come_back_through_the_policys_output_transform(tokenizer):
    """Training targets (joint offsets from the state, normalised, padded) -> the policy's
    robot_actions -> the expert's absolute commands again."""
    records = expert_episode("put", 3, horizon=CFG.action_horizon, camera_size=32)[::7]
    data = D.collect(records, CFG)
    policy = Policy(CFG, ROBOT, {}, tokenizer, D.norm_stats(data, ROBOT))
    arrays = D.tokenize(data, policy)
    assert arrays.actions.shape == (len(data), CFG.action_horizon, CFG.action_dim)
    assert not arrays.actions[..., 7:].any()
    for i in range(len(data)):
        back = policy.robot_actions(arrays.actions[i], data.state[i])
        np.testing.assert_allclose(back, data.actions[i], atol=2e-5)
    offsets = D.model_actions(data, ROBOT)
    np.testing.assert_allclose(offsets[:, :, :6], data.actions[:, :, :6] - data.state[:, None, :6])
    np.testing.assert_array_equal(offsets[:, :, 6], data.actions[:, :, 6])


@pytest.mark.parametrize("with_state", [True, False])
def test_tokenizer_training_is_deterministic_and_fills_the_embedding(with_state: bool):
    lines = ["Narrate:", "Remember:", "pick up the red block", "moving to the red block"] * 3
    if with_state:
        lines += [f"Task: push the ball left, State: {i} {255 - i};" for i in range(256)]
    first, second = D.train_tokenizer(lines), D.train_tokenizer(lines)
    assert first == second
    tok = Tokenizer(first, "trained")
    # Exactly the model's rows, so the checkpoint loader's vocabulary check passes; a corpus
    # this small (no state bins) supports far fewer pieces: the rest are unused ones.
    assert tok.vocab_size == D.TOKENIZER_VOCAB
    pieces = spm.SentencePieceProcessor(model_proto=first)
    unused = [i for i in range(tok.vocab_size) if pieces.id_to_piece(i).startswith("<unused")]
    assert bool(unused) != with_state
    assert tok.decode(tok.encode("moving to the red block")) == "moving to the red block"


@pytest.mark.slow
def test_training_lowers_the_loss_on_a_fixed_batch(params, tokenizer, tmp_path):
    arrays = _arrays(tokenizer, 4)
    tc = TrainConfig(steps=40, batch_size=4, lr=3e-3, warmup=5, val_every=1000, save_every=1000)
    evaluate = make_eval(CFG, tc)
    key = jax.random.key(9)
    before = evaluate(params, to_batch(arrays), key)
    trained, history = train(CFG, params, arrays, None, tc, tmp_path / "work")
    after = evaluate(trained, to_batch(arrays), key)
    assert len(history.train) == 40
    assert float(after["flow"]) < 0.7 * float(before["flow"])
    assert float(after["text"]) < 0.5 * float(before["text"])


def test_camera_dropout_masks_only_the_wrist_cameras_of_a_share_of_samples(tokenizer):
    one = _arrays(tokenizer, 1)
    arrays = one.take(np.zeros(2000, int))
    # The sim fills tiny's first two slots (base, wrist); the third is a missing camera.
    present = np.array([True, True, False])
    assert (arrays.image_mask == present).all()

    dropped = drop_cameras(arrays, 0.3, np.random.default_rng(5))
    assert dropped.image_mask[:, 0].all()  # the base view stays
    assert 0.27 < 1 - dropped.image_mask[:, 1].mean() < 0.33
    assert not dropped.image_mask[:, 2].any()  # a missing camera stays missing
    assert (arrays.image_mask == present).all()  # the data set itself is not touched
    again = drop_cameras(arrays, 0.3, np.random.default_rng(5))
    np.testing.assert_array_equal(again.image_mask, dropped.image_mask)
    unchanged = drop_cameras(arrays, 0.0, np.random.default_rng(5))
    np.testing.assert_array_equal(unchanged.image_mask, arrays.image_mask)
    with pytest.raises(ValueError, match="camera_dropout 1.5"):
        TrainConfig(camera_dropout=1.5)


@pytest.mark.slow
def test_the_text_only_stage_leaves_the_action_expert_alone(params, tokenizer, tmp_path):
    """flow=False (the grounding stage): the text loss is the same as with the flow loss,
    training lowers it, and no action expert weight moves."""
    arrays = _arrays(tokenizer, 4)
    key = jax.random.key(3)
    tc = TrainConfig(steps=20, batch_size=4, lr=3e-3, warmup=5, flow=False, save_every=1000)
    both, text_only = (
        make_eval(CFG, TrainConfig())(params, to_batch(arrays), key),
        make_eval(CFG, tc)(params, to_batch(arrays), key),
    )
    assert float(text_only["flow"]) == 0.0
    np.testing.assert_allclose(float(text_only["text"]), float(both["text"]), rtol=1e-6)
    trained, _ = train(CFG, params, arrays, None, tc, tmp_path / "work")
    after = make_eval(CFG, tc)(trained, to_batch(arrays), key)
    assert float(after["text"]) < 0.7 * float(text_only["text"])
    moved = {  # beyond AdamW's weight decay, which shrinks every weight by lr * 1e-4 a step
        name
        for name in params
        for a, b in zip(jax.tree.leaves(params[name]), jax.tree.leaves(trained[name]), strict=True)
        if not np.allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-7)
    }
    assert moved == {"PaliGemma"}  # action_in/out_proj and time_mlp_in/out: no gradient


@pytest.mark.slow
def test_resumed_training_equals_uninterrupted_training(params, tokenizer, tmp_path):
    arrays = _arrays(tokenizer, 8)
    tc = TrainConfig(steps=4, batch_size=2, warmup=1, val_every=2, save_every=2, val_batches=1)
    straight, hist = train(CFG, params, arrays, arrays, tc, tmp_path / "a")
    half = dataclasses.replace(tc, steps=2)
    train(CFG, params, arrays, arrays, half, tmp_path / "b")
    resumed, hist_b = train(CFG, params, arrays, arrays, tc, tmp_path / "b")
    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert hist_b.train == hist.train and hist_b.val == hist.val


@pytest.mark.slow
def test_exported_checkpoint_loads_and_acts_like_the_trained_params(params, tokenizer, tmp_path):
    arrays = _arrays(tokenizer, 4)
    tc = TrainConfig(steps=3, batch_size=2, warmup=1, save_every=100)
    trained, _ = train(CFG, params, arrays, None, tc, tmp_path / "work")
    records = expert_episode("pick", 1, horizon=CFG.action_horizon, camera_size=40)
    norm = D.norm_stats(D.collect(records, CFG), ROBOT)
    write_checkpoint(tmp_path / "ckpt", trained, norm, "sim")
    (tmp_path / "ckpt" / "tokenizer.model").write_bytes(tokenizer_bytes())
    policy = load_policy("tiny", "sim", tmp_path / "ckpt", tmp_path / "ckpt" / "tokenizer.model")
    assert policy.norm.state.q99.tolist() == norm.state.q99.tolist()
    inputs = policy.prefix_inputs(records[10].obs)
    noise = policy.noise(5)
    loaded = pi05.denoise(policy.params, CFG, pi05.prefill(policy.params, CFG, inputs), noise, 4)
    memory = pi05.denoise(trained, CFG, pi05.prefill(trained, CFG, inputs), noise, 4)
    np.testing.assert_array_equal(np.asarray(loaded), np.asarray(memory))
    assert not np.array_equal(np.asarray(memory), np.asarray(_denoise(params, inputs, noise)))


def test_swapped_instruction_names_another_graspable_object_of_the_scene():
    # pick/0: yellow block (target), red bowl, blue ball, green ball
    assert G.swapped_instruction("pick/0", "pick up the yellow block") == "pick up the blue ball"
    # put/3: the receiving bowl stays; the next graspable object replaces the target
    put = G.swapped_instruction("put/3", "put the red block in the yellow bowl")
    assert put == "put the green ball in the yellow bowl"
    assert G.swapped_instruction("pick/0", "pick up the red ball") is None  # not its target
    assert G.swap_direction("push the red block to the left") == "push the red block to the right"
    assert G.swap_direction("push the red block to the right") == "push the red block to the left"
    assert G.swap_direction("pick up the red block") == "pick up the red block"


def test_oversampled_reach_steps_are_repeated_and_the_rest_kept_once(tokenizer):
    arrays = _arrays(tokenizer, 4)
    narration = ["moving to the red block", "grasping the red block"] * 2
    more = G.oversample_reach(arrays, narration, 3)
    assert len(more) == 4 + 2 * 2
    np.testing.assert_array_equal(more.actions[4:], arrays.actions[[0, 2, 0, 2]])
    np.testing.assert_array_equal(more.tokens[:4], arrays.tokens)


@pytest.mark.slow
def test_grounding_check_samples_as_inference_does_and_measures_against_holding_still(
    params, tokenizer
):
    records = [r for s in (0, 1) for r in expert_episode("pick", s, CFG.action_horizon, 40)]
    data = D.collect(records, CFG)
    policy = Policy(CFG, ROBOT, params, tokenizer, D.norm_stats(data, ROBOT))
    idx = G.pick_steps(data, 6)
    assert idx.tolist() == np.linspace(0, len(data) - 1, 6).round().astype(int).tolist()
    checked = G.check(policy, data, count=6, denoise_steps=4)
    result, reach = checked["all"], checked["reach"]
    assert result.steps == 6 and set(checked) == {"all", "reach"}  # no push steps here
    hold = np.abs(data.state[idx, None, :6] - data.actions[idx, :, :6])
    np.testing.assert_allclose(result.hold_err, hold.mean(), rtol=1e-6)
    in_reach = [data.narration[i].startswith("moving") for i in idx]
    assert reach.steps == sum(in_reach) > 0
    np.testing.assert_allclose(reach.hold_err, hold[np.asarray(in_reach)].mean(), rtol=1e-6)
    # The sampled chunks are the node's: prefill + denoise of Policy.prefix_inputs, then
    # robot_actions, with Policy.noise rows for the start noise.
    noise = policy.noise(0, len(idx))
    expected = []
    for row, i in enumerate(idx):
        inputs = policy.prefix_inputs(records[i].obs)
        chunk = _denoise(params, inputs, noise[row : row + 1])[0]
        expected.append(policy.robot_actions(np.asarray(chunk), data.state[i]))
    err = np.abs(np.stack(expected)[..., :6] - data.actions[idx, :, :6]).mean()
    np.testing.assert_allclose(result.policy_err, err, rtol=1e-4)
    assert result.swap_change > 0.0  # random weights read the prompt too
    # The sim fills two of the tiny preset's three slots; the third is masked out.
    base, wrist, empty = result.camera_change
    assert base > 0.0 and wrist > 0.0 and empty == 0.0


def test_grounding_check_tells_a_two_stage_policy_the_true_target(params, tokenizer):
    """The "plan" figures: chunks acting on each step's true "Target:" answer (not the
    "Find" one, not the policy's own), moved by another step's answer; absent without a
    plan stage."""
    records = [r for s in (0, 1) for r in expert_episode("pick", s, CFG.action_horizon, 40)]
    data = D.collect(records, CFG)
    planned = dataclasses.replace(ROBOT, plan_prompt="Target:", plan_tokens=16)
    policy = Policy(CFG, planned, params, tokenizer, D.norm_stats(data, planned))
    checked = G.check(policy, data, count=6, denoise_steps=4)
    told = checked["plan"]
    idx = G.pick_steps(data, 6)
    truth = [r.grounding[1][1] for r in (records[i] for i in idx)]
    assert [r.grounding[1][0] for r in (records[i] for i in idx)] == ["Target:"] * 6
    sampled = G.chunk_sampler(policy, denoise_steps=4)(
        data.images[idx],
        data.image_mask[idx],
        [data.instruction[i] for i in idx],
        data.state[idx],
        truth,
    )
    err = np.abs(sampled[..., :6] - data.actions[idx, :, :6]).mean()
    assert told.steps == 6 and told.camera_change == ()
    np.testing.assert_allclose(told.policy_err, err, rtol=1e-5)
    assert told.policy_err != checked["all"].policy_err  # its own answer differs
    assert told.swap_change > 0.0
    plain = Policy(CFG, ROBOT, params, tokenizer, D.norm_stats(data, ROBOT))
    assert "plan" not in G.check(plain, data, count=6, denoise_steps=4)


# ----------------------------------------------------------------------------- helpers


def _denoise(params, inputs, noise):
    return pi05.denoise(params, CFG, pi05.prefill(params, CFG, inputs), noise, 4)


@pytest.fixture(scope="module")
def params():
    return P.to_runtime(P.init_params(CFG, seed=0))


_LINES = ["Narrate:", "Remember:", "moving to the red block", "grasping the red ball"]
_LINES += ["lifting the blue block", "picked up the red block", "pick up the red block"]


def tokenizer_bytes() -> bytes:
    return D.train_tokenizer(_LINES * 4 + [f"State: {i};" for i in range(256)])


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer(tokenizer_bytes(), "test")


def _inputs(batch: int, seed: int) -> pi05.PrefixInputs:
    rng = np.random.default_rng(seed)
    size, n = CFG.vision.image_size, CFG.num_images
    tokens = rng.integers(3, 200, (batch, CFG.max_token_len)).astype(np.int32)
    mask = np.arange(CFG.max_token_len)[None] < np.asarray([20, 13][:batch])[:, None]
    return pi05.PrefixInputs(
        images=jnp.asarray(rng.uniform(-1, 1, (batch, n, size, size, 3)), jnp.float32),
        image_mask=jnp.asarray(np.ones((batch, n), bool)),
        tokens=jnp.asarray(np.where(mask, tokens, 0)),
        token_mask=jnp.asarray(mask),
    )


def _episodes(values: np.ndarray) -> D.Episodes:
    n = len(values)
    state = np.stack([values, -values], axis=1).astype(np.float32)
    return D.Episodes(
        images=np.zeros((n, CFG.num_images, 4, 4, 3), np.uint8),
        image_mask=np.ones((n, CFG.num_images), bool),
        state=state,
        actions=np.repeat(state[:, None], 3, axis=1),
        grounding=np.full((n, 1, 2), ["Target:", "r1 c2"]),
        episode=["e"] * n,
        instruction=["pick up the red block"] * n,
        narration=["moving to the red block"] * n,
        memory=[""] * n,
    )


def _arrays(tokenizer: Tokenizer, n: int) -> D.Arrays:
    """n sim steps of a pick episode, tokenized for the tiny preset."""
    records = expert_episode("pick", 2, horizon=CFG.action_horizon, camera_size=40)[::5][:n]
    data = D.collect(records, CFG)
    policy = Policy(CFG, ROBOT, {}, tokenizer, D.norm_stats(data, ROBOT))
    return D.tokenize(data, policy)
