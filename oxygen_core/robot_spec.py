"""Robots as data: the schema a robot is declared with, in a params YAML or any mapping.

A robot is a `RobotConfig`, and the presets (`ROBOT_PRESETS`) are named robots of this
same schema. A declaration maps field names to values; the node reads one from its
parameters `robots.<robot>.<field>` (oxygen_ros.params), which a params YAML writes as

    robot: my_arm
    robots:
      my_arm:
        base: demo          # optional: start from this preset, change the fields given
        cameras: [base_0_rgb, left_wrist_0_rgb]
        action_horizon: 8

Without `base`, cameras, action_dim and state_dim must be given and every other field takes
RobotConfig's default; with it, a field left out keeps the preset's value. A declaration
cannot write None: leave action_horizon, max_token_len or plan_prompt out (of a robot
without base, or whose base leaves them unset) to keep the model preset's horizon, its
prompt budget, or a single stage.

`FIELDS` describes every field once: its meaning, range and choices become the node's
parameter descriptors, and `declared_robot` checks the same ones, so `ros2 param describe`
shows what is enforced. A new RobotConfig field (per-joint limits, say) is the dataclass
field plus its FIELDS entry; test_presets fails when the two disagree.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from oxygen_core.config import (
    ACTION_SPACES,
    CAMERA_ROTATIONS,
    IMAGE_SLOTS,
    ROBOT_PRESETS,
    SPACES,
    RobotConfig,
)

BASE = "base"  # the declaration's preset to start from; not a RobotConfig field
REQUIRED = ("cameras", "action_dim", "state_dim")  # what a declaration without base must give


@dataclasses.dataclass(frozen=True)
class FieldDoc:
    """What one field of a declaration means and which values it takes."""

    doc: str
    span: tuple[int, int] | None = None  # inclusive range of an integer field
    choices: tuple[str, ...] = ()


FIELDS: dict[str, FieldDoc] = {
    BASE: FieldDoc(
        "Robot preset this robot starts from: the fields given replace the preset's.",
        choices=tuple(ROBOT_PRESETS),
    ),
    "cameras": FieldDoc(
        f"Image slots the robot fills, in slot order: some of {', '.join(IMAGE_SLOTS)}."
    ),
    "action_dim": FieldDoc("Action columns the robot takes, in its own units.", (1, 1024)),
    "state_dim": FieldDoc("State values the robot reports (joint_names, in order).", (1, 1024)),
    "action_horizon": FieldDoc(
        "Actions per chunk the checkpoint was trained with; left out: the model preset's.",
        (1, 1024),
    ),
    "max_token_len": FieldDoc("Prompt budget in tokens; left out: the model preset's.", (1, 4096)),
    "discrete_state": FieldDoc(
        "Whether the state goes into the prompt as 256-bin tokens (pi05_libero: false)."
    ),
    "delta_actions": FieldDoc(
        "Action dimensions predicted as offsets from the state (in the model's space)."
    ),
    "space": FieldDoc(
        "Space the checkpoint was trained in: robot (the robot's units), aloha (openpi's "
        "ALOHA joint space, 14 dims), grip (the tabletop arm's grip point, 7 joints).",
        choices=tuple(SPACES),
    ),
    "plan_prompt": FieldDoc(
        "Two-stage inference: the prompt the VLM answers before the actions, which read "
        "the answer; left out: one stage."
    ),
    "plan_tokens": FieldDoc("Longest answer to plan_prompt, in tokens.", (1, 1024)),
    "action_space": FieldDoc(
        "What the robot's commands are: "
        + "; ".join(f"{k} ({v})" for k, v in ACTION_SPACES.items())
        + ". Only position goes on ~/joint_trajectory and through the chunk gate.",
        choices=tuple(ACTION_SPACES),
    ),
    "gripper_dims": FieldDoc("State and action dimensions that are grippers."),
    "gripper_state_range": FieldDoc(
        "The measured gripper joint's values at the runtime's gripper 0 and 1 (two floats, "
        "e.g. ALOHA's finger position in m, closed then open); left out: as measured."
    ),
    "gripper_command_range": FieldDoc(
        "The gripper command's values at the runtime's gripper 0 and 1 (two floats, in the "
        "gripper controller's unit); left out: the runtime's 0..1."
    ),
    "gripper_threshold": FieldDoc(
        "Gripper actions become 1 above it, else 0 (DROID's client: 0.5); 0: off."
    ),
    "action_clip": FieldDoc("Actions clipped to [-clip, clip] after the threshold; 0: off."),
    "velocity_scale": FieldDoc(
        "action_space velocity: rad/s per unit of the non-gripper actions (DROID: 0.2 rad "
        "per 15 Hz step = 3.0)."
    ),
    "camera_rotations": FieldDoc(
        f"Per camera, degrees the image is turned before resizing: {CAMERA_ROTATIONS} "
        "(LIBERO: 180 for both)."
    ),
}


def _field_types() -> dict[str, Any]:
    """Field -> the type of its value: str, int, bool, tuple[str, ...] or tuple[int, ...]
    (RobotConfig's type without None)."""
    hints = typing.get_type_hints(RobotConfig)
    found: dict[str, Any] = {}
    for name in FIELDS:
        hint = str if name == BASE else hints[name]
        if isinstance(hint, types.UnionType):  # `int | None`
            (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
        found[name] = hint
    return found


FIELD_TYPES = _field_types()


def declared_robot(name: str, values: Mapping[str, Any], where: str) -> RobotConfig:
    """The robot `name` of a declaration: `values` holds the fields given, nothing else.

    where: what names the declaration in an error (the node passes "robots.<name>"); every
    error is one ValueError line that starts with it.
    """
    if name in ROBOT_PRESETS:
        raise ValueError(
            f"{where}: {name!r} is a robot preset; declare the robot under another name "
            f"(with {BASE}: {name} to start from the preset)"
        )
    given = {key: _checked(key, value, where) for key, value in values.items()}
    base = given.pop(BASE, None)
    missing = [key for key in REQUIRED if key not in given]
    if base is None and missing:
        raise ValueError(
            f"{where}: {', '.join(missing)} missing (a robot without {BASE} needs "
            f"{', '.join(REQUIRED)})"
        )
    try:
        if base is None:
            return RobotConfig(name, **given)
        return dataclasses.replace(ROBOT_PRESETS[base], name=name, **given)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def declaration(robot: RobotConfig) -> dict[str, Any]:
    """`robot` as a declaration `declared_robot` reads back to an equal RobotConfig: every
    field but the name, without base, None fields left out and tuples as lists. A
    checkpoint of a robot that is not a preset records it so (train_config.json), so the
    checkpoint loads without the params file that declared the robot."""
    fields = dataclasses.asdict(robot)
    fields.pop("name")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if v is not None}


def _checked(key: str, value: Any, where: str) -> Any:
    """One field's value as RobotConfig holds it (lists become tuples), or a ValueError
    naming `where.key`."""
    expected = FIELD_TYPES.get(key)
    if expected is None:
        raise ValueError(f"{where}.{key} is not a robot field; fields: {', '.join(FIELDS)}")
    element = typing.get_args(expected)[0] if typing.get_origin(expected) is tuple else None
    if element is not None and isinstance(value, (list, tuple)):
        value = tuple(value)
        ok = all(_is(v, element) for v in value)
    else:
        ok = element is None and _is(value, expected)
    if not ok:
        kind = f"a list of {element.__name__}" if element else expected.__name__
        raise ValueError(f"{where}.{key}={value!r} is not {kind}")
    if float in (element, expected):
        value = tuple(map(float, value)) if element else float(value)
    field = FIELDS[key]
    if field.span is not None and not field.span[0] <= value <= field.span[1]:
        raise ValueError(f"{where}.{key}={value!r} is outside [{field.span[0]}, {field.span[1]}]")
    if field.choices and value not in field.choices:
        raise ValueError(f"{where}.{key}={value!r} is not one of {list(field.choices)}")
    return value


def _is(value: Any, kind: type) -> bool:
    """isinstance, except that a bool is no number (True would pass for action_dim 1) and
    an int is a float (YAML writes 1.0 as 1 when a person types 1)."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)
