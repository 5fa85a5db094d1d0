"""SigLIP ViT image encoder (So400m/14 in pi0.5) with PaliGemma's projection head.

Pre-LayerNorm transformer over 14x14 patches with a learned position embedding and no
pooling: every patch is one image token, projected by `head` to the VLM width. Parameter
names follow openpi/big_vision (`Transformer/encoderblock/MultiHeadDotProductAttention_0`,
...) with the layer axis unstacked into a list.

Axis legend (einsum letters):
  B batch   P patches (tokens)   D width   F mlp hidden   N heads   H head dim   E out width
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from oxygen_core.config import SiglipConfig

Params = dict[str, Any]


def layer_norm(x: jax.Array, p: Params) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-6) * p["scale"] + p["bias"]


def patchify(images: jax.Array, patch: int) -> jax.Array:
    """[B, S, S, C] -> [B, P, patch*patch*C] in (row, col, channel) order of a conv kernel."""
    b, s, _, c = images.shape
    g = s // patch
    x = images.reshape(b, g, patch, g, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, g * g, patch * patch * c)


def self_attention(x: jax.Array, p: Params) -> jax.Array:
    q = jnp.einsum("BPD,DNH->BPNH", x, p["query"]["kernel"]) + p["query"]["bias"]
    k = jnp.einsum("BPD,DNH->BPNH", x, p["key"]["kernel"]) + p["key"]["bias"]
    v = jnp.einsum("BPD,DNH->BPNH", x, p["value"]["kernel"]) + p["value"]["bias"]
    logits = jnp.einsum("BPNH,BQNH->BNPQ", q * q.shape[-1] ** -0.5, k)
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(x.dtype)
    out = jnp.einsum("BNPQ,BQNH->BPNH", probs, v)
    return jnp.einsum("BPNH,NHD->BPD", out, p["out"]["kernel"]) + p["out"]["bias"]


def encoder_block(x: jax.Array, p: Params) -> jax.Array:
    x = x + self_attention(layer_norm(x, p["LayerNorm_0"]), p["MultiHeadDotProductAttention_0"])
    mlp = p["MlpBlock_0"]
    y = layer_norm(x, p["LayerNorm_1"])
    y = jax.nn.gelu(y @ mlp["Dense_0"]["kernel"] + mlp["Dense_0"]["bias"])
    return x + y @ mlp["Dense_1"]["kernel"] + mlp["Dense_1"]["bias"]


def encode(img: Params, images: jax.Array, config: SiglipConfig) -> jax.Array:
    """Images [B, S, S, 3] in [-1, 1] -> image tokens [B, P, E] (E = VLM width)."""
    if images.shape[1:] != (config.image_size, config.image_size, 3):
        raise ValueError(
            f"images must be [B, {config.image_size}, {config.image_size}, 3], got {images.shape}"
        )
    kernel = img["embedding"]["kernel"]
    x = patchify(images, config.patch_size) @ kernel.reshape(-1, kernel.shape[-1])
    x = x + img["embedding"]["bias"] + img["pos_embedding"]
    for block in img["Transformer"]["encoderblock"]:
        x = encoder_block(x, block)
    x = layer_norm(x, img["Transformer"]["encoder_norm"])
    return x @ img["head"]["kernel"] + img["head"]["bias"]
