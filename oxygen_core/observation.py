"""The observation a robot hands the engine, checked once at the boundary.

An `Observation` holds raw robot data (uint8 camera images of any size, the joint state
in the robot's units, the instruction). `validate` turns bad data into a clear
`ObservationError` naming the field, the value and the limit, so the node can skip a
frame with a diagnostic instead of feeding NaNs or wrong shapes to the model.
"""

from __future__ import annotations

import dataclasses

import numpy as np


class ObservationError(ValueError):
    """An observation the model cannot use; the message names the field and the limit."""


@dataclasses.dataclass(frozen=True)
class Observation:
    """One frame of robot input.

    images: camera slot name -> uint8 array [height, width, 3] (RGB). Slots the robot
        does not fill are absent and become zero images with mask False.
    state: float32 [state_dim], joint positions in the model's joint order, unnormalised.
    prompt: the task instruction in plain text.
    """

    images: dict[str, np.ndarray]
    state: np.ndarray
    prompt: str


def validate(obs: Observation, slots: tuple[str, ...], state_dim: int) -> None:
    """Raise ObservationError if `obs` cannot be fed to a model with these slots."""
    for name, image in obs.images.items():
        if name not in slots:
            raise ObservationError(f"image slot {name!r} is not one of the model's slots {slots}")
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ObservationError(
                f"image {name!r} must be uint8 [H, W, 3], got {image.dtype} {image.shape}"
            )
        if image.shape[0] < 1 or image.shape[1] < 1:
            raise ObservationError(f"image {name!r} is empty: {image.shape}")
    state = np.asarray(obs.state)
    if state.shape != (state_dim,):
        raise ObservationError(f"state must have shape ({state_dim},), got {state.shape}")
    if not np.all(np.isfinite(state)):
        bad = np.flatnonzero(~np.isfinite(state)).tolist()
        raise ObservationError(f"state has non-finite values at indices {bad}")
    if not obs.prompt.strip():
        raise ObservationError("prompt is empty")
