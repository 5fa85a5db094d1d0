"""SentencePiece tokenizer and pi0.5 prompt formatting.

One class serves two SentencePiece models:

- on the robot, the PaliGemma model (vocab 257 152), passed by path because it ships with
  neither the checkpoint nor this package;
- in tests, the demo and the CPU benchmark, a 512-piece model that the project trains itself
  from `assets/corpus.txt` (plain English narration, tasks, memory notes and state strings).
  A readable corpus in git beats an opaque binary, and training takes a fraction of a second,
  once per machine: the model is cached under `$OXYGEN_CACHE` (default `~/.cache/oxygen`) in a
  file named by a hash of the corpus and the training settings.

The bundled model copies Gemma's text handling (text is not normalised, no dummy prefix, runs
of spaces kept, "\\n" is one piece, unknown characters fall back to bytes), so the code paths
that format prompts and stream text behave as they will with the real model. It does not
split digits, unlike Gemma: that keeps pi0.5 state strings short enough for the tiny
presets' 48-token prompts.

pi0.5 puts the robot state into the prompt as 256-bin integers. `tokenize_prompt` follows
openpi's `PaligemmaTokenizer` so that checkpoints see the prompt they were trained on.

The prompt is tokenised every frame, but only its state part changes between frames: the
instruction part ("Task: <instruction>, State:") is encoded once and cached, and each frame
encodes the short rest (" <bins>;\nAction: "). Joining the two encodings gives exactly the
ids of encoding the whole prompt when no piece of the vocabulary spans the seam (":" then a
space): BPE then never merges across it, and both sides merge in the same order as they
would together. `Tokenizer` checks that once per model and encodes whole prompts (still
cached by text and state) for a vocabulary that has such a piece.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from oxygen_core.config import BOS_ID, EOS_ID, PAD_ID
from oxygen_core.text import excerpt

logger = logging.getLogger(__name__)

BUNDLED_VOCAB_SIZE = 512
STATE_BINS = 256
# Left edges of the state bins over [-1, 1]; fixed by pi0.5 training, kept for compatibility.
_STATE_BIN_EDGES = np.linspace(-1.0, 1.0, STATE_BINS + 1)[:-1]
_CORPUS = Path(__file__).parent / "assets" / "corpus.txt"
# Where a pi0.5 prompt with state is split: the cached instruction part ends in ":", the
# per-frame state part starts with a space (SentencePiece's "\u2581").
_SEAM = ":\u2581"
_PROMPT_CACHE = 8  # instructions (and, without a clean seam, prompts) kept encoded

# Every option that shapes the model; all of it goes into the cache key.
_TRAINER_SETTINGS: dict[str, object] = {
    "vocab_size": BUNDLED_VOCAB_SIZE,
    "model_type": "bpe",
    "pad_id": PAD_ID,
    "eos_id": EOS_ID,
    "bos_id": BOS_ID,
    "unk_id": 3,
    "byte_fallback": True,
    "character_coverage": 1.0,
    # Gemma's normaliser: text as given, so prompts and streamed text keep their spaces.
    "normalization_rule_name": "identity",
    "add_dummy_prefix": False,
    "remove_extra_whitespaces": False,
    "user_defined_symbols": ["\n"],
    # One thread, corpus order, every sentence: the same corpus always gives the same ids.
    "num_threads": 1,
    "shuffle_input_sentence": False,
    "input_sentence_size": 0,
}


class Tokenizer:
    """A SentencePiece model whose pad, EOS and BOS ids are the ones pi0.5 expects."""

    def __init__(self, model_proto: bytes, name: str) -> None:
        """Parse a serialized SentencePiece model; `name` (its path) goes into errors."""
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.load_from_serialized_proto(model_proto)
        except (RuntimeError, OSError) as err:
            raise ValueError(f"{name} is not a SentencePiece model: {err}") from None
        found = (self._sp.pad_id(), self._sp.eos_id(), self._sp.bos_id())
        if found != (PAD_ID, EOS_ID, BOS_ID):
            raise ValueError(
                f"{name} has pad/eos/bos ids {found}; pi0.5 needs {(PAD_ID, EOS_ID, BOS_ID)}"
            )
        self.name = name
        pieces = (self._sp.id_to_piece(i) for i in range(self._sp.vocab_size()))
        self._clean_seam = not any(_SEAM in piece for piece in pieces)
        # Keyed by the prompt as given: a frame passes the same string object each time,
        # so a hit costs neither cleaning nor hashing the text again (str caches its hash).
        self._head_ids = functools.lru_cache(maxsize=_PROMPT_CACHE)(self._encode_head)
        self._whole_ids = functools.lru_cache(maxsize=_PROMPT_CACHE)(self._encode_whole)
        self._truncated_warned = ""  # the last prompt whose truncation was logged

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model (what a tokenizer file holds)."""
        return self._sp.serialized_model_proto()

    @property
    def vocab_size(self) -> int:
        return self._sp.vocab_size()

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        return self._sp.encode(text, add_bos=bos, add_eos=eos)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, skipping pad, BOS and EOS wherever they are (nothing stops early).

        Streaming: the text of a growing id list only grows at its end, so a caller gets
        each step's new text as `decode(all)[len(decode(previous)):]`. One exception: a
        character that falls back to UTF-8 bytes decodes to one U+FFFD per byte until its
        last byte arrives. So slice `decode(ids).rstrip("\\ufffd")` instead (always a prefix
        of what later ids decode to) and emit the rest of `decode(ids)` when the request ends.
        """
        ids = [i for i in map(int, ids) if i not in (PAD_ID, BOS_ID, EOS_ID)]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad} are outside the vocabulary [0, {self.vocab_size})")
        return self._sp.decode(ids)

    def tokenize_prompt(
        self, prompt: str, state: np.ndarray | None, max_len: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """pi0.5 prompt ids int32 [max_len] and their mask bool [max_len].

        Padded with PAD_ID (mask False). A prompt longer than max_len is cut to max_len
        with a warning, logged once per instruction: callers refuse instructions that
        cannot fit beforehand (`prompt_len_bound`), so this is a last resort.
        """
        if max_len < 1:
            raise ValueError(f"max_len must be at least 1, got {max_len}")
        head, tail = self._prompt_parts(prompt, state)
        length = len(head) + len(tail)
        if length > max_len:
            if prompt != self._truncated_warned:
                self._truncated_warned = prompt
                logger.warning(
                    "prompt is %d tokens, truncated to max_len=%d: %s",
                    length,
                    max_len,
                    excerpt(prompt),
                )
        # Cut the cached part before joining: a long instruction costs nothing per frame.
        ids = [*head[:max_len], *tail][:max_len]
        tokens = np.full(max_len, PAD_ID, dtype=np.int32)
        tokens[: len(ids)] = ids
        return tokens, np.arange(max_len) < len(ids)

    def prompt_ids(self, prompt: str, state: np.ndarray | None) -> list[int]:
        """The ids of the pi0.5 prompt, untruncated."""
        head, tail = self._prompt_parts(prompt, state)
        return [*head, *tail]

    def _prompt_parts(
        self, prompt: str, state: np.ndarray | None
    ) -> tuple[tuple[int, ...], list[int]]:
        """(cached ids of the instruction part, ids encoded for this frame's state)."""
        if state is None:
            # "\n" encoded on its own marks the start of the answer, as in PaliGemma.
            return self._head_ids(prompt, False), self.encode("\n")
        bins = " ".join(map(str, discretize_state(state)))
        if self._clean_seam:
            return self._head_ids(prompt, True), self.encode(_state_tail(bins))
        return self._whole_ids(prompt, bins), []

    def prompt_len_bound(self, prompt: str, state_dim: int | None) -> int:
        """Prompt tokens of `prompt` with the longest-encoding state of state_dim values
        (None: no state in the prompt). Each bin is a number between spaces; a state of one
        bin repeated takes as many tokens as the longest mixed state when, as in the models
        pi0.5 uses, no piece joins two numbers."""
        if state_dim is None:
            return len(self.prompt_ids(prompt, None))
        states = [" ".join([str(b)] * state_dim) for b in range(-1, STATE_BINS)]
        if self._clean_seam:
            tail = max(len(self.encode(_state_tail(bins))) for bins in states)
            return len(self._head_ids(prompt, True)) + tail
        return max(len(self._encode_whole(prompt, bins)) for bins in states)

    def _encode_head(self, prompt: str, with_state: bool) -> tuple[int, ...]:
        """The cached part: BOS and the instruction (with "Task: ... State:" around it)."""
        cleaned = _clean(prompt)
        return tuple(self.encode(_task_head(cleaned) if with_state else cleaned, bos=True))

    def _encode_whole(self, prompt: str, bins: str) -> tuple[int, ...]:
        """A whole prompt with state, for a vocabulary whose pieces cross the seam."""
        return tuple(self.encode(_task_head(_clean(prompt)) + _state_tail(bins), bos=True))


def _clean(prompt: str) -> str:
    """The instruction as pi0.5 was trained on it: one line, underscores as spaces."""
    return prompt.strip().replace("_", " ").replace("\n", " ")


def _task_head(cleaned: str) -> str:
    """The instruction part of a prompt with state, encoded once per instruction."""
    return f"Task: {cleaned}, State:"


def _state_tail(bins: str) -> str:
    """The per-frame part of a prompt with state, after the cached instruction part."""
    return f" {bins};\nAction: "


def prompt_text(prompt: str, state: np.ndarray | None) -> str:
    """The text of a pi0.5 prompt (before the "\n" that ends a stateless one), as the
    tokenizer sees it: the corpus a tokenizer for this prompt format is trained on."""
    cleaned = _clean(prompt)
    if state is None:
        return cleaned
    return _task_head(cleaned) + _state_tail(" ".join(map(str, discretize_state(state))))


def discretize_state(state: np.ndarray) -> np.ndarray:
    """Normalised state [D] -> int bins [D], as openpi: bin b covers
    [-1 + b/128, -1 + (b+1)/128); 1.0 and above fall in bin 255, below -1 in bin -1 (a
    state beyond the 1st percentile, which the checkpoints saw in training).
    """
    state = np.asarray(state, dtype=np.float64)
    if state.ndim != 1:
        raise ValueError(f"state must have shape [D], got {state.shape}")
    if not np.all(np.isfinite(state)):
        raise ValueError(f"state must be finite, got {state}")
    return np.digitize(state, _STATE_BIN_EDGES) - 1


def load_tokenizer(path: str | os.PathLike | None = None) -> Tokenizer:
    """The SentencePiece model at `path`, or the bundled project model when path is None."""
    if path is None:
        return _load_bundled()
    path = Path(path)
    try:
        proto = path.read_bytes()
    except OSError as err:
        # Same exception type, so callers can still catch FileNotFoundError.
        raise type(err)(f"cannot read tokenizer model {path}: {err.strerror or err}") from None
    return Tokenizer(proto, name=str(path))


def bundled_model_path() -> Path:
    """Where the bundled model for the current corpus and settings is (or will be) cached."""
    key = hashlib.sha256(_CORPUS.read_bytes())
    key.update(json.dumps(_TRAINER_SETTINGS, sort_keys=True).encode())
    key.update(spm.__version__.encode())
    cache = Path(os.environ.get("OXYGEN_CACHE") or Path.home() / ".cache" / "oxygen")
    return cache / f"tokenizer-{key.hexdigest()[:16]}.model"


def _load_bundled() -> Tokenizer:
    path = bundled_model_path()
    if not path.exists():
        logger.info("training the bundled tokenizer into %s", path)
        _write_atomic(path, _train(_CORPUS.read_text(encoding="utf-8")))
    return Tokenizer(path.read_bytes(), name=str(path))


def _train(corpus: str) -> bytes:
    return train_model(corpus.splitlines(), BUNDLED_VOCAB_SIZE)


def train_model(lines: Sequence[str], vocab_size: int, pad_unused: bool = False) -> bytes:
    """A serialized SentencePiece model with exactly `vocab_size` pieces trained on `lines`,
    with the bundled model's text handling and ids; the same lines in the same order always
    give the same bytes.

    Blank lines are skipped. pad_unused: a small corpus (a sim's few dozen words) supports
    fewer pieces than the model's embedding has rows; it gets as many as it has and the
    rest are "<unusedN>" pieces, as Gemma's vocabulary has, so the tokenizer still matches
    the embedding row for row (the checkpoint loader checks that) instead of failing.
    """
    lines = [line for line in lines if line.strip()]
    if not pad_unused:
        return _train_pieces(lines, vocab_size)
    natural = spm.SentencePieceProcessor(
        model_proto=_train_pieces(lines, vocab_size, hard_limit=False)
    ).vocab_size()
    unused = [f"<unused{i}>" for i in range(vocab_size - natural)]
    return _train_pieces(lines, vocab_size, unused=unused)


def _train_pieces(
    lines: Sequence[str], vocab_size: int, hard_limit: bool = True, unused: Sequence[str] = ()
) -> bytes:
    out = io.BytesIO()
    settings = {**_TRAINER_SETTINGS, "vocab_size": vocab_size, "hard_vocab_limit": hard_limit}
    settings["user_defined_symbols"] = [*_TRAINER_SETTINGS["user_defined_symbols"], *unused]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, minloglevel=2, **settings
    )
    return out.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so a concurrent reader never sees half a file.

    Two processes that train at once both rename a complete, identical model; either wins.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
