"""Tests for oxygen_core.model.tokenizer on the bundled model, trained into temporary caches."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st

from oxygen_core.config import BOS_ID, EOS_ID, PAD_ID
from oxygen_core.model import tokenizer as tokenizer_module
from oxygen_core.model.tokenizer import (
    BUNDLED_VOCAB_SIZE,
    Tokenizer,
    bundled_model_path,
    discretize_state,
    load_tokenizer,
)

CORPUS = Path(tokenizer_module.__file__).parent / "assets" / "corpus.txt"
CORPUS_LINES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
OUTSIDE_CORPUS = [
    "Grüße aus Zürich — the robot says «bonjour»",
    "日本語のテキスト and an emoji 🤖",
    "tabs\tand  double  spaces,\nand a new line",
    "ZEBRA QUIZ 1234567890 {}[]<>|~`^",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oxygen_cache")


@pytest.fixture(scope="module")
def bundled(cache_dir: Path) -> Tokenizer:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OXYGEN_CACHE", str(cache_dir))
        return load_tokenizer()


@pytest.fixture
def tok(bundled: Tokenizer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Tokenizer:
    """The bundled model, with $OXYGEN_CACHE pointing at its (temporary) cache."""
    monkeypatch.setenv("OXYGEN_CACHE", str(cache_dir))
    return bundled


def test_training_is_deterministic(tok: Tokenizer, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("OXYGEN_CACHE", str(tmp_path))
    again = load_tokenizer()
    assert Path(again.name).parent == tmp_path
    assert Path(again.name).read_bytes() == Path(tok.name).read_bytes()
    assert [again.encode(s) for s in CORPUS_LINES] == [tok.encode(s) for s in CORPUS_LINES]


def test_cache_is_reused_and_left_clean(tok: Tokenizer, cache_dir: Path):
    path = bundled_model_path()
    before = path.stat().st_mtime_ns
    assert load_tokenizer().name == str(path)
    assert path.stat().st_mtime_ns == before
    assert sorted(p.name for p in cache_dir.iterdir()) == [path.name]


def test_concurrent_first_use_gives_one_complete_model(tok: Tokenizer, tmp_path: Path):
    """Two processes train into one empty cache at once; both load the same model."""
    root = Path(tokenizer_module.__file__).parents[2]
    env = {**os.environ, "OXYGEN_CACHE": str(tmp_path), "PYTHONPATH": str(root)}
    code = (
        "from oxygen_core.model.tokenizer import load_tokenizer; "
        "print(load_tokenizer().encode('pick up the red block'))"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs == [str(tok.encode("pick up the red block"))] * 2
    assert [p.name for p in tmp_path.iterdir()] == [Path(tok.name).name]


def test_special_ids(tok: Tokenizer):
    assert tok.vocab_size == BUNDLED_VOCAB_SIZE == 512
    assert tok.encode("", bos=True, eos=True) == [BOS_ID, EOS_ID]
    assert tok.encode("the cup", bos=True, eos=True) == [BOS_ID, *tok.encode("the cup"), EOS_ID]
    sp = spm.SentencePieceProcessor(model_file=tok.name)
    assert (sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id()) == (PAD_ID, EOS_ID, BOS_ID, 3)
    assert [sp.id_to_piece(i) for i in range(5)] == ["<pad>", "</s>", "<s>", "<unk>", "\n"]


def test_round_trip_on_corpus_lines(tok: Tokenizer):
    for line in CORPUS_LINES:
        ids = tok.encode(line, bos=True, eos=True)
        assert tok.decode(ids) == line
        assert tok.decode([PAD_ID, *ids, PAD_ID, EOS_ID]) == line


@pytest.mark.parametrize("text", OUTSIDE_CORPUS)
def test_round_trip_outside_corpus_uses_byte_fallback(tok: Tokenizer, text: str):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert 3 not in ids  # byte fallback: never <unk>


def test_byte_fallback_spends_one_id_per_utf8_byte(tok: Tokenizer):
    assert len(tok.encode("🤖")) == len("🤖".encode()) == 4
    assert tok.encode("\n") == [4]


def test_corpus_makes_prompts_and_state_strings_short(tok: Tokenizer):
    assert len(tok.encode("pick up the red block")) == 7
    assert max(len(tok.encode(f" {n}")) for n in range(256)) == 2


def test_decode_grows_by_appending_on_corpus_lines(tok: Tokenizer):
    """The streaming rule in Tokenizer.decode: text of a prefix is a prefix of the text."""
    for line in CORPUS_LINES:
        ids = tok.encode(line)
        texts = [tok.decode(ids[:n]) for n in range(len(ids) + 1)]
        assert all(b.startswith(a) for a, b in pairwise(texts))
        assert texts[-1] == line
        # A leading space in a piece stays in the delta (no dummy prefix is stripped).
        deltas = [b[len(a) :] for a, b in pairwise(texts)]
        assert "".join(deltas) == line


def test_decode_of_a_split_byte_character_ends_in_replacement_chars(tok: Tokenizer):
    ids = tok.encode("cup 日")
    assert len(ids) - len(tok.encode("cup ")) == 3
    assert tok.decode(ids[:-2]) == "cup \ufffd"
    assert tok.decode(ids[:-1]) == "cup \ufffd\ufffd"
    assert "cup 日".startswith(tok.decode(ids[:-1]).rstrip("\ufffd"))


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(3, BUNDLED_VOCAB_SIZE - 1), max_size=12))
def test_streaming_rule_holds_for_any_ids(bundled: Tokenizer, ids: list[int]):
    """Even random ids (random weights emit stray bytes) keep the rule in Tokenizer.decode."""
    full = bundled.decode(ids)
    for n in range(len(ids)):
        assert full.startswith(bundled.decode(ids[:n]).rstrip("\ufffd"))


def test_decode_rejects_ids_outside_the_vocabulary(tok: Tokenizer):
    with pytest.raises(ValueError, match=r"\[512\].*\[0, 512\)"):
        tok.decode([10, 512])


def test_discretize_state_bin_edges():
    step = 1 / 128
    state = [-1, -1 + step - 1e-9, -1 + step, -1e-9, 0, step, 1 - step - 1e-9, 1 - step, 1]
    assert discretize_state(np.array(state)).tolist() == [0, 0, 1, 127, 128, 129, 254, 255, 255]
    # As openpi: below -1 (under the 1st percentile) is bin -1, above 1 stays 255.
    assert discretize_state(np.array([-5.0, 7.0, 0.5, -0.5])).tolist() == [-1, 255, 192, 64]
    assert discretize_state(np.array([0.5], np.float32)).tolist() == [192]


@pytest.mark.parametrize("state", [np.zeros((2, 3)), np.array([0.1, np.nan])])
def test_discretize_state_rejects_bad_shapes_and_values(state: np.ndarray):
    with pytest.raises(ValueError, match="state must"):
        discretize_state(state)


def test_pi05_prompt_with_state(tok: Tokenizer):
    state = np.array([-1.0, 0.0, 1.0, -0.5, 2.0, -3.0, 0.25])
    tokens, mask = tok.tokenize_prompt("  pick_up the\nred block ", state, max_len=64)
    text = "Task: pick up the red block, State: 0 128 255 64 255 -1 160;\nAction: "
    n = len(tok.encode(text)) + 1
    assert tokens[:n].tolist() == [BOS_ID, *tok.encode(text)]
    assert tok.decode(tokens) == text
    assert mask.tolist() == [True] * n + [False] * (64 - n)
    assert tokens[n:].tolist() == [PAD_ID] * (64 - n)
    assert (tokens.dtype, mask.dtype, tokens.shape, mask.shape) == (
        np.int32,
        np.bool_,
        (64,),
        (64,),
    )


def test_pi05_prompt_without_state(tok: Tokenizer):
    tokens, mask = tok.tokenize_prompt("pick up the red block\n", None, max_len=16)
    expected = [BOS_ID, *tok.encode("pick up the red block"), *tok.encode("\n")]
    assert tokens.tolist() == expected + [PAD_ID] * (16 - len(expected))
    assert int(mask.sum()) == len(expected) == 9
    assert tok.decode(tokens) == "pick up the red block\n"


def test_long_prompt_is_truncated_with_a_warning(tok: Tokenizer, caplog):
    prompt = "put the red block in the bowl"
    full, _ = tok.tokenize_prompt(prompt, np.zeros(7), max_len=64)
    with caplog.at_level(logging.WARNING, logger=tokenizer_module.__name__):
        tokens, mask = tok.tokenize_prompt(prompt, np.zeros(7), max_len=5)
    assert tokens.tolist() == full[:5].tolist()
    assert mask.all()
    assert "truncated to max_len=5" in caplog.text


def test_truncation_is_logged_once_per_instruction_and_bounded(tok: Tokenizer, caplog):
    huge = "stack the cups " * 10_000
    with caplog.at_level(logging.WARNING, logger=tokenizer_module.__name__):
        for value in np.linspace(-1, 1, 5):
            tok.tokenize_prompt(huge, np.full(7, value), max_len=48)
        tok.tokenize_prompt("put the red block in the bowl", np.zeros(7), max_len=5)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"prompt is {len(tok.prompt_ids(huge, np.full(7, -1.0)))} tokens, truncated to max_len=48",
        "prompt is 30 tokens, truncated to max_len=5",
    ]
    assert max(len(r.getMessage()) for r in caplog.records) < 200
    assert f"({len(huge)} chars)" in caplog.records[0].getMessage()


SEAM_STATES = st.lists(st.floats(-1.5, 1.5), min_size=1, max_size=14).map(np.array)


@settings(max_examples=150, deadline=None)
@given(prompt=st.text(max_size=40), state=SEAM_STATES)
def test_cached_instruction_ids_equal_encoding_the_whole_prompt(
    bundled: Tokenizer, prompt: str, state: np.ndarray
):
    """Joining the cached instruction part and the state part is exactly one encode."""
    bins = " ".join(map(str, discretize_state(state)))
    cleaned = prompt.strip().replace("_", " ").replace("\n", " ")
    whole = bundled.encode(f"Task: {cleaned}, State: {bins};\nAction: ", bos=True)
    assert bundled.prompt_ids(prompt, state) == whole


def test_an_instruction_is_encoded_once_across_frames(tok: Tokenizer):
    prompt = "wipe the table with the green sponge"
    misses = tok._head_ids.cache_info().misses
    for value in np.linspace(-1, 1, 50):  # a moving robot: the state changes every frame
        tok.tokenize_prompt(prompt, np.full(7, value), max_len=64)
    assert tok._head_ids.cache_info().misses == misses + 1


def seam_crossing_model(tmp_path: Path) -> Tokenizer:
    """A model with a piece spanning ":" and the following space (SentencePiece's U+2581),
    where a split encode would differ from the whole."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS_LINES),
        model_writer=out,
        minloglevel=2,
        **{**tokenizer_module._TRAINER_SETTINGS, "user_defined_symbols": ["\n", ":\u25811"]},
    )
    path = tmp_path / "seam.model"
    path.write_bytes(out.getvalue())
    return load_tokenizer(path)


def test_a_vocabulary_crossing_the_seam_encodes_whole_prompts(tmp_path: Path):
    tok = seam_crossing_model(tmp_path)
    state = np.full(7, 0.0)  # bin 128: " 128 ..." starts with the ":▁1" piece
    whole = tok.encode("Task: pick up the cup, State: 128 128 128 128 128 128 128;\nAction: ")
    split = tok.encode("Task: pick up the cup, State:") + tok.encode(
        " 128 128 128 128 128 128 128;\nAction: "
    )
    assert whole != split  # the seam matters for this vocabulary ...
    assert tok.prompt_ids("pick up the cup", state) == [BOS_ID, *whole]  # ... and is avoided
    assert tok.prompt_len_bound("pick up the cup", 7) >= len(whole) + 1


@settings(max_examples=60, deadline=None)
@given(prompt=st.text(max_size=30), state=st.lists(st.floats(-1.5, 1.5), min_size=7, max_size=7))
def test_prompt_len_bound_covers_every_state(bundled: Tokenizer, prompt: str, state: list):
    bound = bundled.prompt_len_bound(prompt, 7)
    assert len(bundled.prompt_ids(prompt, np.array(state))) <= bound
    assert bundled.prompt_len_bound(prompt, None) == len(bundled.prompt_ids(prompt, None))


def test_max_len_must_be_positive(tok: Tokenizer):
    with pytest.raises(ValueError, match="max_len must be at least 1, got 0"):
        tok.tokenize_prompt("pick up the cup", None, max_len=0)


def test_load_by_path_gives_the_same_ids(tok: Tokenizer):
    by_path = load_tokenizer(Path(tok.name))
    assert by_path.vocab_size == tok.vocab_size
    assert [by_path.encode(line) for line in CORPUS_LINES[:50]] == [
        tok.encode(line) for line in CORPUS_LINES[:50]
    ]


def test_missing_or_unreadable_path_names_the_path(tmp_path: Path):
    missing = tmp_path / "paligemma_tokenizer.model"
    with pytest.raises(FileNotFoundError, match=re.escape(f"tokenizer model {missing}")):
        load_tokenizer(missing)
    with pytest.raises(IsADirectoryError, match=re.escape(str(tmp_path))):
        load_tokenizer(tmp_path)
    missing.write_bytes(b"not a model")
    with pytest.raises(ValueError, match=re.escape(f"{missing} is not a SentencePiece model")):
        load_tokenizer(missing)


def test_model_with_other_special_ids_is_rejected(tmp_path: Path):
    """A Llama-style model (unk 0, bos 1, eos 2) would feed pi0.5 the wrong BOS."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS_LINES), model_writer=out, vocab_size=100, minloglevel=2
    )
    path = tmp_path / "llama.model"
    path.write_bytes(out.getvalue())
    with pytest.raises(ValueError, match=r"pad/eos/bos ids \(-1, 2, 1\); pi0.5 needs \(0, 1, 2\)"):
        load_tokenizer(path)
