"""Open-loop grounding check: are the predicted chunks the expert's, and do they follow the
instruction?

A closed-loop episode costs seconds and says only "failed"; this check costs a few
seconds for hundreds of held-out steps and says why. On expert steps of episodes training
never saw it compares, in radians over the six arm joints and every chunk row:

- `policy_err`: the sampled chunk against the expert's chunk;
- `hold_err`: holding still (every row = the current joints) against the expert's chunk.
  A policy that has learned anything about the motion is clearly below it;
- `swap_change`: how much the sampled chunk moves when the instruction names another
  graspable object of the same scene (same images, state and start noise). A policy that
  reads the target out of the images through the instruction changes its chunk a lot
  (of the order of `hold_err` in the reach phase); one that ignores the instruction does
  not change it at all;
- for push steps, the change when the instruction's "left" and "right" trade places: a
  word the action expert can follow without finding anything in the images, so it tells a
  language path that works (large) from a missing visual binding of the target's name;
- `camera_change`, per camera: how much the sampled chunk moves when that camera's image
  comes from another held-out scene (the rest unchanged). Near zero: the policy does not
  look at that camera;
- for a two-stage policy (`model/plan.py`), "plan": the chunk when it is told the true
  "Target:" answer instead of its own, and how much it moves when told another scene's:
  whether its action expert reads the plan at all.

Each figure is given over all the steps and over the reach phase alone (the steps whose
expert narration is "moving to ..." or "moving behind ..."), where the target decides the
whole motion and an ungrounded policy can only guess: there grounding shows first and most.
`oversample_reach` draws those steps more often in training (the experiment harness
scripts/experiments/train_variants.py, --reach-repeat).

Sampling is the node's: one prefill, `denoise_steps` Euler steps from fixed noise per
step (`Policy.noise`), the robot's output transform. Steps are taken evenly over the
held-out episodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import numpy as np

from oxygen_core.image import scale_images
from oxygen_core.model import pi05
from oxygen_core.offline_score import ChunkScore, score_chunks
from oxygen_core.policy import Policy
from oxygen_core.sim.arm import ARM_DOF, JOINT_NAMES
from oxygen_core.sim.scene import GRASPABLE
from oxygen_core.sim.tasks import make_task
from oxygen_core.train import locate, losses
from oxygen_core.train.dataset import Arrays, Episodes, text_row


@dataclasses.dataclass(frozen=True)
class Grounding:
    steps: int
    policy_err: float  # rad, mean |sampled - expert| over arm joints and chunk rows
    hold_err: float  # rad, mean |current joints - expert|
    swap_change: float  # rad, mean |sampled(instruction) - sampled(other target)|
    camera_change: tuple[float, ...]  # rad, per image slot: that camera from another scene

    def row(self) -> dict:
        r = lambda v: round(v, 5)  # noqa: E731
        return {
            k: r(v) if isinstance(v, float) else [r(x) for x in v] if isinstance(v, tuple) else v
            for k, v in vars(self).items()
        }


def swapped_instruction(episode: str, instruction: str) -> str | None:
    """The instruction with its target replaced by another graspable object of the same
    scene ("<family>/<seed>" names the scene); None when the scene has no other one."""
    family, seed = episode.split("/")
    task = make_task(family, int(seed))
    target = task.objects[task.target].name
    others = [
        o.name
        for k, o in enumerate(task.objects)
        if k not in (task.target, task.bowl) and o.shape in GRASPABLE
    ]
    return instruction.replace(target, others[0]) if others and target in instruction else None


def pick_steps(data: Episodes, count: int) -> np.ndarray:
    """`count` step indices spread evenly over `data` (every episode phase represented)."""
    return np.unique(np.linspace(0, len(data) - 1, min(count, len(data))).round().astype(int))


def chunk_sampler(policy: Policy, noise_seed: int = 0, denoise_steps: int = 10) -> Callable:
    """(images uint8 [N, I, S, S, 3], image_mask, prompts, states[, plans][, noise]) ->
    robot-space chunks [N, H, A], sampled as the node samples them, step n from row n of
    `noise` (default `Policy.noise(noise_seed, N)`); a two-stage policy acts on `plans`
    when given, else on its own."""
    params, cfg = policy.params, policy.config

    def chunks(images, image_mask, prompts: list[str], states: np.ndarray, plans=None, noise=None):
        inputs = prefix_inputs(policy, images, image_mask, prompts, states)
        cache, _ = policy.action_cache(pi05.prefill(params, cfg, inputs), plans)
        noise = policy.noise(noise_seed, len(states)) if noise is None else noise
        actions = np.asarray(pi05.denoise(params, cfg, cache, noise, denoise_steps))
        return np.stack([policy.robot_actions(a, s) for a, s in zip(actions, states, strict=True)])

    return chunks


def prefix_inputs(policy: Policy, images, image_mask, prompts, states) -> pi05.PrefixInputs:
    """A batch of prefixes as the node builds them (prompt with the discretised state)."""
    tokens = [policy.prompt_tokens(p, s) for p, s in zip(prompts, states, strict=True)]
    return pi05.PrefixInputs(
        images=scale_images(images),
        image_mask=image_mask,
        tokens=np.stack([t for t, _ in tokens]),
        token_mask=np.stack([m for _, m in tokens]),
    )


def answers(policy: Policy, data: Episodes, count: int = 256, batch: int = 64) -> dict:
    """Share of `count` held-out steps whose grounding rows (`locate`) the model answers
    exactly: every answer token and the EOS the argmax given the right tokens before it,
    which is what greedy decoding says. Per row kind, {"find": ..., "target": ...}; {}
    when the data has no grounding rows."""
    if data.grounding.shape[1] == 0:
        return {}
    idx = pick_steps(data, count)
    tok, cfg = policy.tokenizer, policy.config
    pairs = {tuple(p) for i in idx for p in data.grounding[i].tolist()}
    length = max(len(tok.encode(q)) + len(tok.encode(a)) + 1 for q, a in pairs)
    logits = jax.jit(
        lambda params, inputs, text: losses.text_logits(
            params, cfg, pi05.prefill(params, cfg, inputs), text
        )
    )
    right = []
    for part in np.array_split(idx, max(1, -(-len(idx) // batch))):
        rows = [[text_row(tok, q, a, length) for q, a in data.grounding[i].tolist()] for i in part]
        text = np.asarray([[r[0] for r in step] for step in rows])
        scored = np.asarray([[r[1] for r in step] for step in rows])[..., 1:]
        prompts = [data.instruction[i] for i in part]
        inputs = prefix_inputs(
            policy, data.images[part], data.image_mask[part], prompts, data.state[part]
        )
        said = np.asarray(logits(policy.params, inputs, text)).argmax(-1)
        right.append(np.all((said == text[..., 1:]) | ~scored, axis=-1))
    right = np.concatenate(right)
    return {kind: round(float(right[:, k].mean()), 4) for k, kind in enumerate(locate.KINDS)}


REACH_NARRATION = "moving"  # "moving to the ..." (pick, put), "moving behind the ..." (push)


def oversample_reach(arrays: Arrays, narration: list[str], times: int) -> Arrays:
    """`arrays` with its reach-phase steps (narration "moving ...") `times` over, so that
    uniform batches draw them `times` as often."""
    reach = np.flatnonzero([n.startswith(REACH_NARRATION) for n in narration])
    return arrays.take(np.concatenate([np.arange(len(arrays)), np.tile(reach, times - 1)]))


def check(
    policy: Policy, data: Episodes, count: int = 256, noise_seed: int = 0, denoise_steps: int = 10
) -> dict[str, Grounding]:
    """The figures on `count` held-out steps of `data` (see the module docstring):
    {"all": every step, "reach": the reach-phase steps among them, "push_direction": the
    push steps, with `swap_change` the change when "left" and "right" trade places, and
    for a two-stage policy "plan": told the true and another scene's "Target:" answer}."""
    idx = pick_steps(data, count)
    swaps = [swapped_instruction(data.episode[i], data.instruction[i]) for i in idx]
    idx = np.asarray([i for i, s in zip(idx, swaps, strict=True) if s is not None])
    swaps = [s for s in swaps if s is not None]
    images, mask, states = data.images[idx], data.image_mask[idx], data.state[idx]
    expert = data.actions[idx]

    sample = chunk_sampler(policy, noise_seed, denoise_steps)
    prompts = [data.instruction[i] for i in idx]
    pred = sample(images, mask, prompts, states)
    swapped = sample(images, mask, swaps, states)
    other = len(idx) // 2  # steps half the set away: another episode's scene
    other_camera = []
    for k in range(images.shape[1]):
        moved = images.copy()
        moved[:, k] = np.roll(images[:, k], other, axis=0)
        other_camera.append(sample(moved, mask, prompts, states))
    hold = np.broadcast_to(states[:, None, :], expert.shape)
    reach = np.asarray([data.narration[i].startswith(REACH_NARRATION) for i in idx])

    push = np.asarray([data.episode[i].startswith("push/") for i in idx])
    turned = sample(images, mask, [swap_direction(p) for p in prompts], states)

    def figures(rows: np.ndarray, other_prompt: np.ndarray) -> Grounding:
        err = lambda a, b: _arm_err(a[rows], b[rows])  # noqa: E731
        camera = tuple(err(pred, c) for c in other_camera)
        return Grounding(
            int(rows.sum()), err(pred, expert), err(hold, expert), err(pred, other_prompt), camera
        )

    everything = np.ones(len(idx), bool)
    result = {"all": figures(everything, swapped), "reach": figures(reach, swapped)}
    if push.any():
        result["push_direction"] = figures(push, turned)
    if policy.robot.plan_prompt is not None and data.grounding.shape[1]:
        truth = [_target_answer(data.grounding[i]) for i in idx]
        scene = (images, mask, prompts, states)
        result["plan"] = _plan_figures(sample, scene, truth, expert, hold)
    return result


def _plan_figures(sample: Callable, scene: tuple, truth: list[str], expert, hold) -> Grounding:
    """A two-stage policy told the true "Target:" answers `truth` of the steps in `scene`
    (images, mask, prompts, states): `policy_err` of that chunk, and as `swap_change` how
    much it moves when told the answer of a step half the set away (another scene's
    cells). Near zero: the action expert does not read its plan."""
    told = sample(*scene, truth)
    misled = sample(*scene, list(np.roll(truth, len(truth) // 2)))
    return Grounding(
        len(truth), _arm_err(told, expert), _arm_err(hold, expert), _arm_err(told, misled), ()
    )


def _target_answer(rows: np.ndarray) -> str:
    """The "Target:" answer among a step's grounding rows [R, 2] (prompt, answer)."""
    return dict(map(tuple, rows.tolist()))[locate.TARGET_PROMPT]


def open_loop(
    policy: Policy,
    data: Episodes,
    idx: Sequence[int],
    noise_seeds: Sequence[int | tuple[int, ...]],
    denoise_steps: int = 10,
) -> ChunkScore:
    """The open-loop score (oxygen_core.offline_score: per joint and horizon step, in the
    robot's joint space) of the chunks sampled on steps `idx` of `data` against the
    expert's chunks, step idx[n] from `Policy.noise(noise_seeds[n])`. Each step is sampled
    alone, as the node samples a frame (the node's frame f draws the seeds (seed, f)), so
    the figure is the one a scored replay of the same episodes reports."""
    sample = chunk_sampler(policy, denoise_steps=denoise_steps)
    pred = np.concatenate(
        [
            sample(
                data.images[[i]],
                data.image_mask[[i]],
                [data.instruction[i]],
                data.state[[i]],
                noise=policy.noise(seed),
            )
            for i, seed in zip(idx, noise_seeds, strict=True)
        ]
    )
    expert = data.actions[np.asarray(idx)]
    return score_chunks(pred, expert, np.ones(expert.shape[:2], bool), JOINT_NAMES)


def _arm_err(a: np.ndarray, b: np.ndarray) -> float:
    """Mean |a - b| over the arm joints (robot units whatever space the policy acts in)
    and every chunk row: offline_score's MAE, the figure a scored replay reports."""
    score = score_chunks(a, b, np.ones(a.shape[:2], bool), JOINT_NAMES[: a.shape[-1]])
    return score.mean(score.mae, range(ARM_DOF))


def swap_direction(instruction: str) -> str:
    """ "... to the left" <-> "... to the right" (other instructions unchanged)."""
    for a, b in (("to the left", "to the right"), ("to the right", "to the left")):
        if instruction.endswith(a):
            return instruction[: -len(a)] + b
    return instruction
