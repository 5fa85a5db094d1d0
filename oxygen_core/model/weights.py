"""pi0.5 parameter tree: shapes in openpi's checkpoint layout, random init, runtime layout.

The checkpoint layout is openpi's: nested dicts named `PaliGemma/llm/layers/attn/q_einsum/w`
and so on, with the layers of each transformer stacked on a leading depth axis. The
runtime layout is the same tree with those stacked subtrees split into a list of per-layer
trees (faster on CPU, see docs/DESIGN.md section 5). `param_shapes` is the single source of
truth for both `oxygen-info` (no allocation) and `init_params`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oxygen_core.config import GemmaConfig, ModelConfig, SiglipConfig

Tree = dict[str, Any]
VISION_PREFIX = "PaliGemma/img"
LLM_PREFIX = "PaliGemma/llm"
# Subtrees whose leaves carry a leading layer axis in openpi checkpoints.
STACKED = (f"{VISION_PREFIX}/Transformer/encoderblock", f"{LLM_PREFIX}/layers")


def _siglip_shapes(c: SiglipConfig, out_width: int) -> dict[str, tuple[int, ...]]:
    d, f, n, h, L = c.width, c.mlp_dim, c.num_heads, c.width // c.num_heads, c.depth
    blk = f"{VISION_PREFIX}/Transformer/encoderblock"
    mha = f"{blk}/MultiHeadDotProductAttention_0"
    shapes = {
        f"{VISION_PREFIX}/embedding/kernel": (c.patch_size, c.patch_size, 3, d),
        f"{VISION_PREFIX}/embedding/bias": (d,),
        f"{VISION_PREFIX}/pos_embedding": (1, c.num_tokens, d),
        f"{VISION_PREFIX}/Transformer/encoder_norm/scale": (d,),
        f"{VISION_PREFIX}/Transformer/encoder_norm/bias": (d,),
        f"{VISION_PREFIX}/head/kernel": (d, out_width),
        f"{VISION_PREFIX}/head/bias": (out_width,),
        f"{blk}/MlpBlock_0/Dense_0/kernel": (L, d, f),
        f"{blk}/MlpBlock_0/Dense_0/bias": (L, f),
        f"{blk}/MlpBlock_0/Dense_1/kernel": (L, f, d),
        f"{blk}/MlpBlock_0/Dense_1/bias": (L, d),
        f"{mha}/out/kernel": (L, n, h, d),
        f"{mha}/out/bias": (L, d),
    }
    for ln in ("LayerNorm_0", "LayerNorm_1"):
        shapes[f"{blk}/{ln}/scale"] = (L, d)
        shapes[f"{blk}/{ln}/bias"] = (L, d)
    for proj in ("query", "key", "value"):
        shapes[f"{mha}/{proj}/kernel"] = (L, d, n, h)
        shapes[f"{mha}/{proj}/bias"] = (L, n, h)
    return shapes


def _expert_shapes(c: GemmaConfig, sfx: str, cond_width: int | None) -> dict[str, tuple[int, ...]]:
    """One Gemma expert's layer and final-norm weights; adaptive norms when cond_width."""
    L, d = c.depth, c.width
    lay = f"{LLM_PREFIX}/layers"
    shapes = {
        f"{lay}/attn/q_einsum{sfx}/w": (L, c.num_heads, d, c.head_dim),
        f"{lay}/attn/kv_einsum{sfx}/w": (L, 2, c.num_kv_heads, d, c.head_dim),
        f"{lay}/attn/attn_vec_einsum{sfx}/w": (L, c.num_heads, c.head_dim, d),
        f"{lay}/mlp{sfx}/gating_einsum": (L, 2, d, c.mlp_dim),
        f"{lay}/mlp{sfx}/linear": (L, c.mlp_dim, d),
    }
    norms = {f"{lay}/pre_attention_norm{sfx}": (L,), f"{lay}/pre_ffw_norm{sfx}": (L,)}
    norms[f"{LLM_PREFIX}/final_norm{sfx}"] = ()
    for name, lead in norms.items():
        if cond_width is None:
            shapes[f"{name}/scale"] = (*lead, d)
        else:
            shapes[f"{name}/Dense_0/kernel"] = (*lead, cond_width, 3 * d)
            shapes[f"{name}/Dense_0/bias"] = (*lead, 3 * d)
    return shapes


def _dense(name: str, n_in: int, n_out: int) -> dict[str, tuple[int, ...]]:
    return {f"{name}/kernel": (n_in, n_out), f"{name}/bias": (n_out,)}


def param_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Flat `path -> shape` of every pi0.5 parameter, in openpi's checkpoint layout."""
    vlm, ex = config.vlm, config.expert
    shapes = _siglip_shapes(config.vision, vlm.width)
    shapes[f"{LLM_PREFIX}/embedder/input_embedding"] = (config.vocab_size, vlm.width)
    shapes |= _expert_shapes(vlm, "", None)
    shapes |= _expert_shapes(ex, "_1", ex.width)
    shapes |= _dense("action_in_proj", config.action_dim, ex.width)
    shapes |= _dense("action_out_proj", ex.width, config.action_dim)
    shapes |= _dense("time_mlp_in", ex.width, ex.width)
    shapes |= _dense("time_mlp_out", ex.width, ex.width)
    return shapes


def component_of(path: str) -> str:
    """Which part of pi0.5 a parameter belongs to (for `oxygen-info`)."""
    if path.startswith(VISION_PREFIX):
        return "vision"
    if path.startswith(LLM_PREFIX):
        expert = any(part.endswith("_1") for part in path.split("/"))
        return "action_expert" if expert else "vlm"
    return "projections"


def _init_value(path: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random weights with unit-variance activations; norm scales small, biases zero.

    openpi zero-initialises the adaRMS Dense; random tests need it non-zero, otherwise
    the action expert's layers would be skipped by a zero gate.
    """
    if path.endswith("/bias") and "Dense_0" not in path:
        return np.zeros(shape, np.float32)
    if path.endswith("/scale"):
        return 0.1 * rng.standard_normal(shape, np.float32)
    return rng.standard_normal(shape, np.float32) / np.float32(math.sqrt(_fan_in(path, shape)))


def _fan_in(path: str, shape: tuple[int, ...]) -> int:
    stacked = any(path.startswith(p) for p in STACKED)
    core = shape[1:] if stacked else shape
    if path.endswith("input_embedding"):
        return core[1]
    if "attn_vec_einsum" in path or path.endswith("out/kernel"):
        return core[0] * core[1]  # heads x head_dim
    if "q_einsum" in path or "kv_einsum" in path or "gating_einsum" in path:
        return core[-2]
    if path.endswith("embedding/kernel"):
        return core[0] * core[1] * core[2]
    return core[0] if len(core) > 1 else 1


def unflatten(flat: dict[str, Any]) -> Tree:
    tree: Tree = {}
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def flatten(tree: Tree, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in tree.items():
        path = f"{prefix}/{name}" if prefix else name
        if isinstance(value, dict):
            flat |= flatten(value, path)
        else:
            flat[path] = value
    return flat


def init_params(config: ModelConfig, seed: int = 0) -> Tree:
    """Random float32 parameters in checkpoint layout (nested, layers stacked).

    For tests and benchmarks: every path of the model is live. A training run starts from
    `oxygen_core.train.init.training_params`, which resets norms, gates and positions.
    Drawn with numpy on the host: eager JAX random ops compile once per shape, which made
    even the tiny preset take half a minute to initialise.
    """
    rng = np.random.default_rng(seed)
    return unflatten({p: _init_value(p, s, rng) for p, s in sorted(param_shapes(config).items())})


def to_runtime(tree: Tree, dtype: jnp.dtype = jnp.float32) -> Tree:
    """Checkpoint layout -> runtime layout, as device arrays of `dtype`.

    Vision encoder blocks are split into a list. Each LLM layer becomes a list with one
    dict per expert (VLM, action expert) under short names, every matrix with its
    contracted axis first: q [D, N, H], kv [D, 2, K, H], out [N, H, D], gating [D, 2, F],
    linear [F, D]. Final norms become a list per expert. Names outside the LLM are kept.
    """
    pg = tree["PaliGemma"]
    blocks = pg["img"]["Transformer"]["encoderblock"]
    img = {
        **pg["img"],
        "Transformer": {**pg["img"]["Transformer"], "encoderblock": _unstack(blocks)},
    }
    llm = pg["llm"]
    layers = _unstack(llm["layers"])
    runtime_llm = {
        "embedder": llm["embedder"],
        "layers": [[_expert(layer, i) for i in range(NUM_EXPERTS)] for layer in layers],
        "final_norm": [llm[_sfx("final_norm", i)] for i in range(NUM_EXPERTS)],
    }
    rest = {k: v for k, v in tree.items() if k != "PaliGemma"}
    runtime = {**rest, "PaliGemma": {"img": img, "llm": runtime_llm}}
    return jax.tree.map(lambda a: jnp.asarray(a, dtype), runtime)


NUM_EXPERTS = 2  # pi0.5: the VLM stream and the action expert


def _sfx(name: str, expert: int) -> str:
    """openpi's naming of a second expert's modules: `name_1`."""
    return name if expert == 0 else f"{name}_{expert}"


def _unstack(stacked: Tree) -> list[Tree]:
    depth = {np.shape(v)[0] for v in flatten(stacked).values()}.pop()
    return [jax.tree.map(lambda a, i=i: np.asarray(a)[i], stacked) for i in range(depth)]


def _expert(layer: Tree, i: int) -> Tree:
    """One expert's weights of one layer, from openpi names to the runtime layout."""
    attn, mlp = layer["attn"], layer[_sfx("mlp", i)]
    return {
        "attn_norm": layer[_sfx("pre_attention_norm", i)],
        "q": np.transpose(attn[_sfx("q_einsum", i)]["w"], (1, 0, 2)),
        "kv": np.transpose(attn[_sfx("kv_einsum", i)]["w"], (2, 0, 1, 3)),
        "out": attn[_sfx("attn_vec_einsum", i)]["w"],
        "ffw_norm": layer[_sfx("pre_ffw_norm", i)],
        "gating": np.transpose(mlp["gating_einsum"], (1, 0, 2)),
        "linear": mlp["linear"],
    }


def to_checkpoint(runtime: Tree) -> Tree:
    """Runtime layout -> checkpoint layout as host numpy arrays: `to_runtime` inverted.

    Training updates the runtime layout (the fast one) and writes checkpoints through this,
    so what it saves is what openpi's loader and `to_runtime` expect.
    """
    host = jax.tree.map(np.asarray, runtime)
    pg = host["PaliGemma"]
    blocks = pg["img"]["Transformer"]["encoderblock"]
    img = {**pg["img"], "Transformer": {**pg["img"]["Transformer"], "encoderblock": _stack(blocks)}}
    llm = pg["llm"]
    per_layer = [_openpi_layer(experts) for experts in llm["layers"]]
    ckpt_llm = {"embedder": llm["embedder"], "layers": _stack(per_layer)}
    for i, norm in enumerate(llm["final_norm"]):
        ckpt_llm[_sfx("final_norm", i)] = norm
    rest = {k: v for k, v in host.items() if k != "PaliGemma"}
    return {**rest, "PaliGemma": {"img": img, "llm": ckpt_llm}}


def _stack(layers: list[Tree]) -> Tree:
    return jax.tree.map(lambda *a: np.stack(a), *layers)


def _openpi_layer(experts: list[Tree]) -> Tree:
    """One layer's runtime experts -> openpi's names and axis orders (`_expert` inverted)."""
    layer: Tree = {"attn": {}}
    for i, e in enumerate(experts):
        layer["attn"][_sfx("q_einsum", i)] = {"w": np.transpose(e["q"], (1, 0, 2))}
        layer["attn"][_sfx("kv_einsum", i)] = {"w": np.transpose(e["kv"], (1, 2, 0, 3))}
        layer["attn"][_sfx("attn_vec_einsum", i)] = {"w": e["out"]}
        layer[_sfx("pre_attention_norm", i)] = e["attn_norm"]
        layer[_sfx("pre_ffw_norm", i)] = e["ffw_norm"]
        layer[_sfx("mlp", i)] = {
            "gating_einsum": np.transpose(e["gating"], (1, 0, 2)),
            "linear": e["linear"],
        }
    return layer


def check_shapes(tree: Tree, config: ModelConfig) -> None:
    """Raise ValueError naming every missing, extra or mis-shaped parameter."""
    expected = param_shapes(config)
    got = {p: tuple(np.shape(v)) for p, v in flatten(tree).items()}
    problems = [f"missing {p} {s}" for p, s in expected.items() if p not in got]
    problems += [f"unexpected {p} {s}" for p, s in got.items() if p not in expected]
    problems += [
        f"{p}: expected {expected[p]}, got {s}"
        for p, s in got.items()
        if p in expected and expected[p] != s
    ]
    if problems:
        shown = "; ".join(problems[:8])
        more = f" (+{len(problems) - 8} more)" if len(problems) > 8 else ""
        raise ValueError(f"parameters do not match preset {config.name!r}: {shown}{more}")
