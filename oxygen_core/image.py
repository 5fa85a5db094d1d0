"""Camera images to the model's square input, the way pi0.5 was trained to see them.

openpi feeds every camera through a resize-with-pad: scale so the longer side fits,
keep the aspect ratio, and centre the result on a black square. Stretching instead
would show the model shapes it never saw in training, so the robot side must do the
same thing with the same filter (Pillow bilinear) and the same rounding (sizes and
offsets truncated towards zero). Camera drivers deliver mono and RGBA too; `to_rgb`
makes every array the 3-channel uint8 layout the model takes.

Shapes: H, W = camera height and width; C = channels (1, 3 or 4); S = model input size.
"""

from __future__ import annotations

import numpy as np
from PIL import Image


def to_rgb(image: np.ndarray) -> np.ndarray:
    """uint8 [H, W] or [H, W, C] -> uint8 [H, W, 3].

    Mono is replicated into three channels (a grey picture, not a red one); a fourth
    (alpha) channel is dropped. A 3-channel array is returned as is, without a copy.
    """
    if image.dtype != np.uint8:
        raise ValueError(f"image must be uint8, got {image.dtype}")
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] not in (1, 3, 4):
        raise ValueError(
            f"image must be [H, W] or [H, W, C] with C in (1, 3, 4), got {image.shape}"
        )
    channels = image.shape[2]
    if channels == 1:
        return np.repeat(image, 3, axis=2)
    return image if channels == 3 else image[:, :, :3]


def _fitted_size(height: int, width: int, size: int) -> tuple[int, int]:
    """(height, width) of an image scaled so its longer side is `size`, aspect kept.

    The ratio and truncation follow openpi's client so both sides agree to the pixel; a
    sliver that would truncate to nothing keeps one row or column.
    """
    ratio = max(height / size, width / size)
    return max(1, int(height / ratio)), max(1, int(width / ratio))


def resize_with_pad(image: np.ndarray, size: int) -> np.ndarray:
    """uint8 [H, W, C] -> uint8 [S, S, 3]: bilinear fit of the longer side, zeros around.

    An image that already has the model's size comes back unchanged (no copy), which is
    the common case for cameras configured at the model resolution.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    rgb = to_rgb(image)
    height, width = rgb.shape[:2]
    if height == size and width == size:
        return rgb
    new_height, new_width = _fitted_size(height, width, size)
    resized = Image.fromarray(rgb).resize(
        (new_width, new_height), resample=Image.Resampling.BILINEAR
    )
    top, left = (size - new_height) // 2, (size - new_width) // 2
    out = np.zeros((size, size, 3), dtype=np.uint8)
    out[top : top + new_height, left : left + new_width] = np.asarray(resized)
    return out


def scale_images(images: np.ndarray) -> np.ndarray:
    """uint8 model-size images [..., S, S, 3] -> float32 in [-1, 1], as pi0.5 takes them."""
    return (images / 127.5 - 1.0).astype(np.float32)
