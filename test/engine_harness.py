"""Shared setup for the KV pool and engine tests: one tiny model that says something.

A randomly initialised tiny model is nearly a copy machine: its residual stream is
dominated by the embedding of the token it was just fed, and the LM head is tied to that
embedding, so greedy decoding repeats the prompt's last token forever. Equality tests on
such output prove little. `lively` scales the VLM's attention and MLP outputs so the
next token depends on the image, the state, the prompt and the text so far, and
`alias_eos` makes EOS the greedy choice wherever a chosen token would be, so requests
stop at different steps.

Every engine here shares one pool geometry (ROWS rows, MAX_NEW new tokens, the two
stream prompts): jitted functions are compiled once per shape, and sharing shapes keeps
the whole engine suite within a few dozen compilations.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

from oxygen_core.config import EOS_ID
from oxygen_core.engine.types import EngineConfig, StreamConfig
from oxygen_core.policy import Policy, load_policy

PRESET, ROBOT = "tiny", "demo"
ROWS = 4  # KV pool rows of every engine and pool under test
MAX_NEW = 12  # the memory stream's budget; fixes the pool's cache capacity
NARRATE, REMEMBER = "Narrate:", "Remember:"


def lively(params: dict, attn: float = 3.0, mlp: float = 10.0) -> dict:
    """A copy of the runtime tree with the VLM's residual branches scaled up."""
    llm = params["PaliGemma"]["llm"]
    layers = []
    for vlm, *experts in llm["layers"]:
        vlm = {**vlm, "out": vlm["out"] * attn, "linear": vlm["linear"] * mlp}
        layers.append([vlm, *experts])
    return _with_llm(params, {**llm, "layers": layers})


def alias_eos(params: dict, token: int, scale: float = 1.01) -> dict:
    """EOS's embedding row becomes `scale` x `token`'s: with the tied LM head, EOS then
    out-scores `token` wherever `token` would be chosen (its logit being positive)."""
    llm = params["PaliGemma"]["llm"]
    table = llm["embedder"]["input_embedding"]
    table = table.at[EOS_ID].set(scale * table[token])
    return _with_llm(params, {**llm, "embedder": {"input_embedding": table}})


def _with_llm(params: dict, llm: dict) -> dict:
    return {**params, "PaliGemma": {**params["PaliGemma"], "llm": llm}}


def alias_candidates(sequences: Sequence[Sequence[int]]) -> list[int]:
    """Tokens ordered by how unevenly an EOS alias of them would end `sequences`: first
    occurrences (at step >= 1) on the most distinct steps first, then the most frequent."""
    firsts: dict[int, set[int]] = {}
    for seq in sequences:
        seen: set[int] = set()
        for step, tok in enumerate(seq):
            if tok not in seen and step >= 1:
                firsts.setdefault(tok, set()).add(step)
            seen.add(tok)
    counts = Counter(t for seq in sequences for t in seq)
    return sorted(firsts, key=lambda t: (-len(firsts[t]), -counts[t], t))


def spread_eos(
    params: dict,
    sequences: Sequence[Sequence[int]],
    eos_lengths: Callable[[dict], list[int]],
    tries: int = 8,
) -> dict:
    """Params with EOS aliased so that requests stop at two or more different lengths.

    sequences: greedy outputs of `params`; eos_lengths(params) -> the lengths of the
    outputs that ended at EOS. The alias is a prediction from `sequences` (aliasing also
    moves the later tokens), so the first few candidates are tried for real.
    """
    for token in alias_candidates(sequences)[:tries]:
        aliased = alias_eos(params, token)
        if len(set(eos_lengths(aliased))) >= 2:
            return aliased
    raise AssertionError(f"no EOS alias among {tries} candidates spreads the stops: {sequences}")


def tiny_policy(seed: int = 0) -> Policy:
    """The tiny random policy with lively weights (identity normalisation)."""
    policy = load_policy(PRESET, ROBOT, seed=seed)
    return dataclasses.replace(policy, params=lively(policy.params))


def streams(
    n: int = 5,
    memory_n: int = MAX_NEW,
    temperature: float = 0.0,
    narration: str = "every",
    memory: str = "instruction_change",
) -> tuple[StreamConfig, ...]:
    """Narration (N tokens) and memory (up to MAX_NEW tokens, pinning the capacity)."""
    return (
        StreamConfig(
            "narration", NARRATE, max_tokens=n, temperature=temperature, trigger=narration
        ),
        StreamConfig("memory", REMEMBER, max_tokens=memory_n, trigger=memory),
    )


def engine_config(**changes) -> EngineConfig:
    """A 4-row oxygen config with one decode bucket, every request admitted apart;
    `changes` override any field."""
    # No budget margin: the auto-k tests choose time_left_s for exact arithmetic. Every
    # new request admitted apart: the schedule tests count its 1 + k tokens in the first
    # frame; the tests of admit_in_step (on by default) set it.
    base = EngineConfig(
        admit_in_step=False,
        max_active_requests=ROWS,
        batch_buckets=(ROWS,),
        streams=streams(),
        max_decode_tokens=3,
        budget_margin_s=0.0,
    )
    return dataclasses.replace(base, **changes)
