"""Records -> the arrays training reads: images, prompts, normalised chunks, text targets.

Two stages, because the prompt depends on statistics of the data itself:

1. `collect` turns records into `Episodes`, raw arrays with the images already at the
   model's size through `policy.model_images` (the inference preprocessing, so training
   sees exactly what the node feeds the model), plus the strings;
2. `norm_stats` (quantiles over the training episodes, openpi's norm_stats.json content)
   and `train_tokenizer` (SentencePiece on the corpus of instructions, prompts and
   language targets) are fitted, then `tokenize` builds the `Arrays`: prompt ids with the
   state discretised into them by `Policy.prompt_tokens`, action chunks normalised and
   zero-padded to the model's action width as openpi pads them, and one text row per
   stream (its prompt, the target line, EOS) with the target positions marked, then one
   per grounding row (`locate`) built the same way.

Episodes are generated in worker processes, one (family, seed) at a time, and joined in
seed order, so the data is the same whatever the number of workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from oxygen_core import robot_io
from oxygen_core.config import EOS_ID, PAD_ID, ModelConfig, RobotConfig
from oxygen_core.engine.types import DEFAULT_STREAMS, StreamConfig
from oxygen_core.model.normalize import NormStats, Stats
from oxygen_core.model.tokenizer import Tokenizer, prompt_text, train_model
from oxygen_core.policy import Policy, model_images, prompt_state
from oxygen_core.train.records import Dart, Record, expert_episode, scene_records

TOKENIZER_VOCAB = 512
# Which record field each default stream is trained to say.
STREAM_TARGETS = {"narration": "narration", "memory": "memory"}
_STRINGS = ("episode", "instruction", "narration", "memory")
_ARRAYS = ("images", "image_mask", "state", "actions", "grounding")


@dataclasses.dataclass
class Episodes:
    """Raw per-step arrays of many episodes (N steps in all); strings as lists."""

    images: np.ndarray  # uint8 [N, I, S, S, 3] at the model's size
    image_mask: np.ndarray  # bool [N, I]
    state: np.ndarray  # float32 [N, D_state]
    actions: np.ndarray  # float32 [N, H, D_action]
    grounding: np.ndarray  # str [N, R, 2]: (prompt, answer) of R grounding rows per step
    episode: list[str]
    instruction: list[str]
    narration: list[str]
    memory: list[str]

    def __len__(self) -> int:
        return len(self.state)

    def select(self, keep: np.ndarray) -> Episodes:
        """The steps where `keep` (bool [N]) is True."""
        idx = np.flatnonzero(keep)
        arrays = {f: getattr(self, f)[idx] for f in _ARRAYS}
        strings = {f: [getattr(self, f)[i] for i in idx] for f in _STRINGS}
        return Episodes(**arrays, **strings)

    def save(self, path: Path) -> None:
        arrays = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        arrays |= {f: np.asarray(arrays[f], dtype=str) for f in _STRINGS}
        np.savez(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> Episodes:
        with np.load(path) as data:
            fields = {f.name: data[f.name] for f in dataclasses.fields(cls)}
        return cls(**{k: v.tolist() if k in _STRINGS else v for k, v in fields.items()})


def collect(records: Iterable[Record], config: ModelConfig) -> Episodes:
    """Records -> Episodes, images through the inference preprocessing."""
    images, masks, state, actions, grounding = [], [], [], [], []
    strings: dict[str, list[str]] = {f: [] for f in _STRINGS}
    for r in records:
        img, mask = model_images(config, r.obs.images)
        images.append(img)
        masks.append(mask)
        state.append(np.asarray(r.obs.state, np.float32))
        actions.append(np.asarray(r.actions, np.float32))
        grounding.append(r.grounding)
        for f, v in zip(_STRINGS, (r.episode, r.obs.prompt, r.narration, r.memory), strict=True):
            strings[f].append(v)
    if not state:
        raise ValueError("no records: every episode failed or the source is empty")
    rows = np.asarray(grounding, dtype=str).reshape(len(state), -1, 2)
    return Episodes(
        np.stack(images), np.stack(masks), np.stack(state), np.stack(actions), rows, **strings
    )


def concat(parts: Sequence[Episodes]) -> Episodes:
    arrays = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _ARRAYS}
    return Episodes(**arrays, **{f: sum((getattr(p, f) for p in parts), []) for f in _STRINGS})


def _episode_job(args: tuple) -> Episodes | None:
    family, seed, horizon, camera_size, dart, config = args
    records = expert_episode(family, seed, horizon, camera_size, dart=dart)
    return collect(records, config) if records else None


def _scene_job(args: tuple) -> Episodes:
    family, seed, horizon, camera_size, _, config = args
    return collect(scene_records(family, seed, horizon, camera_size), config)


def generate_sim(
    families: Sequence[str],
    seeds: Sequence[int],
    config: ModelConfig,
    camera_size: int,
    dart: Dart | None,
    workers: int = 1,
    progress=None,
    scenes: bool = False,
) -> Episodes:
    """Expert episodes in the sim for families x seeds (failed ones dropped), in seed order;
    with `scenes`, still scenes for the grounding stage instead (`scene_records`).

    progress: optional callable(done, total) after each episode.
    """
    jobs = [
        (f, s, config.action_horizon, camera_size, dart, config) for s in seeds for f in families
    ]
    job = _scene_job if scenes else _episode_job
    parts: list[Episodes] = []
    if workers <= 1:
        results = map(job, jobs)
    else:
        pool = ProcessPoolExecutor(workers)
        results = pool.map(job, jobs, chunksize=16)
    for done, part in enumerate(results, 1):
        if part is not None:
            parts.append(part)
        if progress is not None:
            progress(done, len(jobs))
    if workers > 1:
        pool.shutdown()
    if not parts:
        raise ValueError(f"the expert completed none of {len(jobs)} episodes ({families}, {seeds})")
    return concat(parts)


def _stats(x: np.ndarray) -> Stats:
    x = x.reshape(-1, x.shape[-1]).astype(np.float64)
    return Stats(
        q01=np.quantile(x, 0.01, axis=0).astype(np.float32),
        q99=np.quantile(x, 0.99, axis=0).astype(np.float32),
        mean=x.mean(axis=0).astype(np.float32),
        std=x.std(axis=0).astype(np.float32),
    )


def model_actions(data: Episodes, robot: RobotConfig) -> np.ndarray:
    """Chunk targets in the model's space (offsets from the state in the delta dims)."""
    state = robot_io.state_to_model(robot, data.state)
    return robot_io.actions_to_model(robot, data.actions, state)


def norm_stats(data: Episodes, robot: RobotConfig) -> NormStats:
    """Per-dimension quantile statistics of the state and of every action in every chunk,
    both in the model's space."""
    state = robot_io.state_to_model(robot, data.state)
    return NormStats(state=_stats(state), actions=_stats(model_actions(data, robot)))


def corpus(
    data: Episodes, robot: RobotConfig, norm: NormStats, streams: Sequence[StreamConfig]
) -> list[str]:
    """The tokenizer's training lines: the stream prompts, every distinct instruction,
    language target and grounding line, and the full pi0.5 prompt (with its state bins) of
    every step."""
    text = sorted(
        set(data.instruction)
        | set(data.narration)
        | set(data.memory)
        | set(data.grounding.ravel().tolist())
    )
    prompts = [s.prompt for s in streams]
    full = [
        prompt_text(p, prompt_state(robot, norm, s))
        for p, s in zip(data.instruction, data.state, strict=True)
    ]
    return prompts + text + full


def train_tokenizer(lines: Sequence[str]) -> bytes:
    """The project's SentencePiece model for this corpus (deterministic for the same lines)."""
    return train_model(lines, TOKENIZER_VOCAB, pad_unused=True)


@dataclasses.dataclass
class Arrays:
    """Model-ready training arrays (N steps)."""

    images: np.ndarray  # uint8 [N, I, S, S, 3]
    image_mask: np.ndarray  # bool [N, I]
    tokens: np.ndarray  # int32 [N, L]
    token_mask: np.ndarray  # bool [N, L]
    actions: np.ndarray  # float32 [N, H, A] normalised, zero-padded to the model's A
    text: np.ndarray  # int32 [N, rows, T]: the streams' rows, then the grounding rows
    text_target: np.ndarray  # bool [N, rows, T]
    episode: np.ndarray  # int32 [N] episode index (for splits)

    def __len__(self) -> int:
        return len(self.tokens)

    def take(self, idx: np.ndarray) -> Arrays:
        return Arrays(**{f.name: getattr(self, f.name)[idx] for f in dataclasses.fields(self)})

    def last_rows(self, count: int) -> Arrays:
        """The same steps with only their last `count` text rows (the grounding rows)."""
        text, target = self.text[:, -count:], self.text_target[:, -count:]
        return dataclasses.replace(self, text=text, text_target=target)


def text_row(
    tokenizer: Tokenizer, prompt: str, target: str, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """A stream's training row: prompt ids, target ids, EOS, padding; and the target mask.

    The prompt is encoded on its own, as the engine encodes a stream prompt, and the line
    after it, as the decoder produces it token by token. A row longer than `length` is an
    error: a cut target would teach the model to stop without EOS.
    """
    head = tokenizer.encode(prompt)
    body = tokenizer.encode(target) + [EOS_ID]
    if len(head) + len(body) > length:
        raise ValueError(f"text row {prompt!r} + {target!r} is over {length} tokens")
    ids = np.full(length, PAD_ID, np.int32)
    ids[: len(head) + len(body)] = head + body
    target_mask = np.zeros(length, bool)
    target_mask[len(head) : len(head) + len(body)] = True
    return ids, target_mask


def text_pairs(data: Episodes, streams: Sequence[StreamConfig]) -> list[list[tuple[str, str]]]:
    """Every text row of the data as (prompt, line): per row kind (the streams, then the
    grounding rows), one pair per step."""
    kinds = [[(s.prompt, line) for line in getattr(data, STREAM_TARGETS[s.name])] for s in streams]
    kinds += [
        [tuple(pair) for pair in data.grounding[:, r].tolist()]
        for r in range(data.grounding.shape[1])
    ]
    return kinds


def text_length(tokenizer: Tokenizer, data: Episodes, streams: Sequence[StreamConfig]) -> int:
    """The longest text row in the data."""
    distinct = {pair for kind in text_pairs(data, streams) for pair in kind}
    return max(len(tokenizer.encode(p)) + len(tokenizer.encode(t)) + 1 for p, t in distinct)


def tokenize(
    data: Episodes,
    policy: Policy,
    streams: Sequence[StreamConfig] = DEFAULT_STREAMS,
    text_len: int | None = None,
) -> Arrays:
    """Episodes -> Arrays with the policy's tokenizer, norm stats and model shapes."""
    cfg, tok = policy.config, policy.tokenizer
    prompts = [
        policy.prompt_tokens(p, s) for p, s in zip(data.instruction, data.state, strict=True)
    ]
    width = cfg.action_dim
    normalised = policy.norm.actions.normalize(model_actions(data, policy.robot))
    actions = np.zeros((*normalised.shape[:2], width), np.float32)
    actions[..., : normalised.shape[-1]] = normalised
    text_len = text_len or text_length(tok, data, streams)
    kinds = text_pairs(data, streams)
    rows = {}  # a line's row is the same everywhere: tokenize each once
    text = np.zeros((len(data), len(kinds), text_len), np.int32)
    target = np.zeros_like(text, dtype=bool)
    for j, kind in enumerate(kinds):
        for i, key in enumerate(kind):
            if key not in rows:
                rows[key] = text_row(tok, *key, text_len)
            text[i, j], target[i, j] = rows[key]
    names = {name: k for k, name in enumerate(dict.fromkeys(data.episode))}
    return Arrays(
        images=data.images,
        image_mask=data.image_mask,
        tokens=np.stack([p[0] for p in prompts]),
        token_mask=np.stack([p[1] for p in prompts]),
        actions=actions,
        text=text,
        text_target=target,
        episode=np.asarray([names[e] for e in data.episode], np.int32),
    )
