"""A loaded pi0.5 policy: shapes, weights, tokenizer and normalisation in one value.

`Policy` is the bridge between robot data and the model's pure functions: it validates an
`Observation`, resizes and scales its images, maps the state into the checkpoint's space
and normalises it into the prompt (pi0.5's discrete state tokens), and turns the model's
actions back into robot commands (`oxygen_core.robot_io` holds the per-robot steps).
Engines take a `Policy` and never look at raw robot data themselves.

The prompt is bounded where it is tokenised: `instruction_problem` says, once when an
instruction arrives, whether it fits the model's max_token_len with any state; callers
refuse one that does not rather than let every frame truncate it. The instruction's
tokens are cached by the tokenizer, so a frame only encodes the state part.

Weights and tokenizer must come from the same model: a checkpoint's embedding table has
one row per token id of the tokenizer it was trained with. `load_policy` refuses a pair
whose sizes differ (e.g. PaliGemma weights with the project's small test tokenizer),
which would otherwise run and give every prompt the wrong ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from oxygen_core import robot_io
from oxygen_core.config import (
    EOS_ID,
    IMAGE_SLOTS,
    PAD_ID,
    ModelConfig,
    RobotConfig,
    model_preset,
    robot_preset,
)
from oxygen_core.image import resize_with_pad, scale_images
from oxygen_core.model import plan
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import (
    check_horizon,
    check_image_slots,
    find_norm_stats,
    load_params,
)
from oxygen_core.model.normalize import NormStats, identity_stats
from oxygen_core.model.pi05 import PrefixCache, PrefixInputs
from oxygen_core.model.tokenizer import Tokenizer, load_tokenizer
from oxygen_core.observation import Observation, validate


@dataclasses.dataclass(frozen=True)
class Policy:
    config: ModelConfig
    robot: RobotConfig
    params: P.Tree  # runtime layout (per-layer lists of device arrays)
    tokenizer: Tokenizer
    norm: NormStats

    def prefix_inputs(self, obs: Observation) -> PrefixInputs:
        """Validated batch-1 model inputs for one observation (raises ObservationError)."""
        validate(obs, self.robot.cameras, self.robot.state_dim)
        images, mask = self.model_images(obs.images)
        tokens, token_mask = self.prompt_tokens(obs.prompt, obs.state)
        # Host arrays: the jitted prefill transfers them in one call, with no eager
        # dispatch per field (each one a GIL round trip in a threaded node).
        return PrefixInputs(
            images=scale_images(images)[None],
            image_mask=mask[None],
            tokens=tokens[None],
            token_mask=token_mask[None],
        )

    def model_images(self, images: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """`model_images` for this policy's model."""
        return model_images(self.config, images)

    def prompt_tokens(self, prompt: str, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """pi0.5 prompt ids int32 [L] and mask bool [L] with the normalised state in them."""
        tokens, mask = self.tokenizer.tokenize_prompt(
            prompt, prompt_state(self.robot, self.norm, state), self.config.max_token_len
        )
        return tokens.astype(np.int32), mask

    def instruction_problem(self, prompt: str) -> str | None:
        """Why `prompt` cannot be the instruction (None when it fits the prompt budget)."""
        state_dim = self.robot.state_dim if self.robot.discrete_state else None
        need = self.tokenizer.prompt_len_bound(prompt, state_dim)
        if need <= self.config.max_token_len:
            return None
        with_state = " with the state" if state_dim is not None else ""
        return (
            f"instruction needs up to {need} prompt tokens{with_state}, over the model's "
            f"max_token_len={self.config.max_token_len}"
        )

    def action_cache(
        self, cache: PrefixCache, answers: Sequence[str] | None = None
    ) -> tuple[PrefixCache, jax.Array | None]:
        """What the action expert reads after the prefill: the prefix alone, or for a robot
        with a plan_prompt the prefix followed by the VLM's greedy answer to it
        (`model/plan.py`), with the answer's tokens [B, plan_tokens].

        answers: one plan per row of `cache` to put there instead of the VLM's
        (evaluation with the true answer; the node never passes them), laid out as
        training lays out the plan row."""
        if self.robot.plan_prompt is None:
            if answers is not None:
                raise ValueError(f"robot {self.robot.name!r} has no plan stage to answer")
            return cache, None
        prompt = self.tokenizer.encode(self.robot.plan_prompt)
        if answers is None:
            ids = np.asarray(prompt, np.int32)
            return plan.decode(self.params, self.config, cache, ids, self.robot.plan_tokens)
        return self._forced_plan(cache, prompt, answers)

    def _forced_plan(
        self, cache: PrefixCache, prompt: list[int], answers: Sequence[str]
    ) -> tuple[PrefixCache, jax.Array]:
        """`answers` after the plan prompt in `cache`, with their tokens and EOS
        [B, plan_tokens] as a decode returns them."""
        if len(answers) != cache.mask.shape[0]:
            raise ValueError(f"{len(answers)} plans for {cache.mask.shape[0]} cache rows")
        n = self.robot.plan_tokens
        tokens = np.full((len(answers), n), PAD_ID, np.int32)
        for row, answer in enumerate(answers):
            body = [*self.tokenizer.encode(answer), EOS_ID]
            if len(body) > n:
                raise ValueError(f"plan {answer!r} needs {len(body)} tokens, over plan_tokens={n}")
            tokens[row, : len(body)] = body
        prompts = np.tile(np.asarray(prompt, np.int32), (len(answers), 1))
        rows = jnp.asarray(np.concatenate([prompts, tokens], axis=1))
        return plan.forced(self.params, self.config, cache, rows), jnp.asarray(tokens)

    def robot_actions(self, model_actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Model actions [..., H, 32] -> robot commands [..., H, robot.action_dim].

        state: the frame's robot state (delta actions are relative to it).
        """
        unnormalized = self.norm.actions.unnormalize(
            np.asarray(model_actions)[..., : self.robot.model_dims]
        )
        model_state = robot_io.state_to_model(self.robot, state)
        return robot_io.actions_to_robot(self.robot, unnormalized, model_state)

    def model_actions(self, robot_actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Robot commands [..., H, robot.action_dim] -> normalised model actions [..., H, 32]
        (zeros past the robot's dims): `robot_actions` undone, deltas relative to `state`."""
        model_state = robot_io.state_to_model(self.robot, state)
        unnormalized = robot_io.actions_to_model(self.robot, robot_actions, model_state)
        normalized = self.norm.actions.normalize(unnormalized)
        padded = np.zeros((*normalized.shape[:-1], self.config.action_dim), np.float32)
        padded[..., : normalized.shape[-1]] = normalized
        return padded

    def noise(
        self,
        seed: int | tuple[int, ...],
        batch: int = 1,
        given: np.ndarray | None = None,
        scale: float = 1.0,
    ) -> np.ndarray:
        """Flow-matching start noise float32 [batch, H, A], a pure function of the seed,
        times `scale` (EngineConfig.start_noise_scale); or `given` ([H, A] or [batch, H,
        A]) as it is, checked against those shapes, so a comparison with another runtime
        can feed both the same draw."""
        shape = (batch, self.config.action_horizon, self.config.action_dim)
        if given is None:
            draw = np.random.default_rng(seed).standard_normal(shape, np.float32)
            return draw * np.float32(scale)
        given = np.asarray(given, np.float32)
        if given.shape not in (shape, shape[1:]):
            raise ValueError(f"noise of shape {given.shape}, expected {shape[1:]} or {shape}")
        if not np.isfinite(given).all():
            raise ValueError("noise has non-finite values")
        return given.reshape(shape)


def prompt_state(robot: RobotConfig, norm: NormStats, state: np.ndarray) -> np.ndarray | None:
    """The normalised state that goes into the prompt; None for a robot trained without it."""
    if not robot.discrete_state:
        return None
    # Not clipped: openpi's bins put a state beyond the 1st/99th percentile in bin -1 / 255.
    return norm.state.normalize(robot_io.state_to_model(robot, state))


def model_images(
    config: ModelConfig, images: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Camera images by slot -> uint8 [I, S, S, 3] at the model's size and mask bool [I].

    A slot without a camera is a zero image with mask False, as openpi does. Training
    stores this uint8 form and scales it with `scale_images` per batch, so it sees exactly
    what inference sees.
    """
    size = config.vision.image_size
    out = np.zeros((config.num_images, size, size, 3), np.uint8)
    mask = np.zeros(config.num_images, bool)
    for i, slot in enumerate(IMAGE_SLOTS[: config.num_images]):
        if slot in images:
            out[i] = resize_with_pad(images[slot], size)
            mask[i] = True
    return out, mask


def load_policy(
    preset: str,
    robot: str | RobotConfig,
    checkpoint_dir: str | Path | None = None,
    tokenizer_path: str | Path | None = None,
    seed: int = 0,
    asset_id: str | None = None,
    dtype: str = "float32",
    norm_stats_missing: str = "fail",
) -> Policy:
    """Load a policy; without a checkpoint, random weights (named as such by the caller)
    and identity norm stats.

    asset_id, norm_stats_missing: which of the checkpoint's norm stats apply, and what a
    checkpoint without any gets (`checkpoint.find_norm_stats`).

    dtype: compute and KV-cache dtype; "float32" on CPU (bfloat16 matmuls are very slow
    there), "bfloat16" on a GPU or Jetson (half the memory and bandwidth).

    Raises FileNotFoundError / ValueError naming the path, preset or mismatched shapes.
    """
    robot_cfg = robot if isinstance(robot, RobotConfig) else robot_preset(robot)
    config = robot_cfg.apply(model_preset(preset))
    tokenizer = load_tokenizer(tokenizer_path)
    if checkpoint_dir:
        check_horizon(Path(checkpoint_dir), config, robot_cfg.name)
        check_image_slots(Path(checkpoint_dir), config, robot_cfg.name)
        tree = load_params(Path(checkpoint_dir), config, tokenizer)
        norm = find_norm_stats(Path(checkpoint_dir), asset_id, norm_stats_missing)
    else:
        # Random weights are made for the tokenizer: any id it produces has a row.
        if tokenizer.vocab_size > config.vocab_size:
            raise ValueError(
                f"tokenizer {tokenizer.name} has {tokenizer.vocab_size} tokens, more than "
                f"preset {config.name!r}'s vocabulary of {config.vocab_size}"
            )
        tree, norm = P.init_params(config, seed), None
    if norm is None:
        norm = NormStats(
            state=identity_stats(robot_cfg.state_dim), actions=identity_stats(config.action_dim)
        )
    return Policy(
        config=config,
        robot=robot_cfg,
        params=P.to_runtime(tree, jnp.dtype(dtype)),
        tokenizer=tokenizer,
        norm=norm,
    )
