"""A robot's joint limits: its URDF first, then a `joint_limits` block on top.

A URDF states a position range and a velocity bound per movable joint (`<limit lower upper
velocity>`), never an acceleration; ros2_control keeps acceleration, and any override, in a
joint_limits YAML (`min_position`, `max_position`, `max_velocity`, `max_acceleration`, with
`has_*_limits` flags). Both are read, in that order, the block winning per key, so a robot
that already has a joint_limits file for ros2_control can hand it over as it is. One key is
this project's own: `max_jump`, the furthest a chunk's first point may lie from the
measured joint state. A chunk that does not start near the robot was computed for another
pose, and no re-timing makes it safe.

Every commanded joint must end with all four bounds (position, velocity, acceleration,
jump). A bound is switched off only by saying so (`has_position_limits: false`, a
continuous joint in the URDF): a forgotten one is a configure error naming the joint and
the source, never an unbounded joint.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# The joint_limits keys read from a block, and the has_* flag that switches each bound off.
_BOUND_KEYS = {
    "min_position": "has_position_limits",
    "max_position": "has_position_limits",
    "max_velocity": "has_velocity_limits",
    "max_acceleration": "has_acceleration_limits",
    "max_jump": "has_jump_limits",
}
_FLAGS = frozenset(_BOUND_KEYS.values())
# Keys ros2_control's joint_limits files carry that the gate does not use (it commands
# positions only); accepted so such a file loads unchanged.
_IGNORED = frozenset(
    {
        "has_effort_limits",
        "max_effort",
        "has_jerk_limits",
        "max_jerk",
        "has_deceleration_limits",
        "max_deceleration",
        "has_soft_limits",
        "k_position",
        "k_velocity",
        "soft_lower_limit",
        "soft_upper_limit",
        "angle_wraparound",
    }
)
_MOVABLE = ("revolute", "prismatic", "continuous")

Bounds = dict[str, float]  # joint_limits keys -> value (inf: switched off)


@dataclasses.dataclass(frozen=True)
class JointLimits:
    """Bounds per commanded joint, in `names` order (float64 arrays); inf where a bound is
    switched off. `source` names where they came from, for error and warning lines."""

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray  # per second, in the joint's unit
    acceleration: np.ndarray  # per second squared
    jump: np.ndarray  # largest |first point - measured state|
    source: str

    def __eq__(self, other: object) -> bool:
        """The same bounds for the same joints (settings holding limits are compared, e.g.
        to reuse a compiled engine; arrays alone would compare element by element)."""
        if not isinstance(other, JointLimits):
            return NotImplemented
        arrays = ("lower", "upper", "velocity", "acceleration", "jump")
        same = all(np.array_equal(getattr(self, a), getattr(other, a)) for a in arrays)
        return same and (self.names, self.source) == (other.names, other.source)


def urdf_bounds(xml: str, source: str) -> dict[str, Bounds]:
    """Position and velocity bounds of every movable joint of a URDF, by joint name; a
    continuous joint has no position bounds. ValueError naming `source` on a bad file."""
    from urdf_parser_py.urdf import URDF  # ROS's own parser; only configure needs it

    try:
        robot = URDF.from_xml_string(xml)
    except Exception as err:  # lxml and the parser raise several types for a bad file
        raise ValueError(f"{source}: not a readable URDF: {err}") from None
    bounds: dict[str, Bounds] = {}
    for joint in robot.joints:
        if joint.type not in _MOVABLE or joint.limit is None:
            continue
        entry: Bounds = {"max_velocity": float(joint.limit.velocity)}
        if joint.type == "continuous":
            entry |= {"min_position": -math.inf, "max_position": math.inf}
        else:
            entry |= {
                "min_position": float(joint.limit.lower),
                "max_position": float(joint.limit.upper),
            }
        bounds[joint.name] = entry
    return bounds


def block_bounds(block: Mapping[str, Mapping[str, object]], source: str) -> dict[str, Bounds]:
    """A joint_limits block (joint -> keys) as bounds; a false has_* flag switches its
    bounds off. ValueError naming the joint, the key and `source` on anything else."""
    bounds: dict[str, Bounds] = {}
    for joint, keys in block.items():
        if not isinstance(keys, Mapping):
            raise ValueError(f"{source}: joint_limits.{joint} must be a mapping of limit keys")
        entry: Bounds = {}
        for key, value in keys.items():
            entry |= _one_key(joint, key, value, source)
        bounds[joint] = entry
    return bounds


def _one_key(joint: str, key: str, value: object, source: str) -> Bounds:
    where = f"{source}: joint_limits.{joint}.{key}"
    if key in _IGNORED:
        return {}
    if key in _FLAGS:
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, got {value!r}")
        off = [k for k, flag in _BOUND_KEYS.items() if flag == key]
        return {} if value else {k: _off(k) for k in off}
    if key not in _BOUND_KEYS:
        known = ", ".join(sorted(_BOUND_KEYS) + sorted(_FLAGS))
        raise ValueError(f"{where}: unknown key (known: {known})")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    if key.startswith("max_") and key != "max_position" and not value > 0:
        raise ValueError(f"{where} must be > 0, got {value}")
    return {key: float(value)}


def _off(key: str) -> float:
    """The value of a switched-off bound: no lower and no upper position, no rate bound."""
    return -math.inf if key == "min_position" else math.inf


def resolve(
    joint_names: Sequence[str],
    urdf: Mapping[str, Bounds] | None,
    block: Mapping[str, Bounds] | None,
    source: str,
) -> JointLimits:
    """The commanded joints' limits: URDF bounds with the block's on top. ValueError in
    one line for a block joint that is not commanded, lower > upper, or a missing bound."""
    merged = _merged(joint_names, urdf, block, source)
    for name, entry in zip(joint_names, merged, strict=True):
        missing = [key for key in _BOUND_KEYS if key not in entry]
        if missing:
            raise ValueError(
                f"{source}: joint {name!r} has no {missing[0]} (give it in joint_limits, or "
                f"switch it off with {_BOUND_KEYS[missing[0]]}: false)"
            )
        if entry["min_position"] > entry["max_position"]:
            raise ValueError(
                f"{source}: joint {name!r} has min_position {entry['min_position']} > "
                f"max_position {entry['max_position']}"
            )

    def column(key: str) -> np.ndarray:
        return np.array([entry[key] for entry in merged], np.float64)

    return JointLimits(
        names=tuple(joint_names),
        lower=column("min_position"),
        upper=column("max_position"),
        velocity=column("max_velocity"),
        acceleration=column("max_acceleration"),
        jump=column("max_jump"),
        source=source,
    )


def _merged(
    joint_names: Sequence[str],
    urdf: Mapping[str, Bounds] | None,
    block: Mapping[str, Bounds] | None,
    source: str,
) -> list[Bounds]:
    """Each joint's URDF bounds with the block's on top; ValueError in one line for a
    block joint that is not among `joint_names`."""
    urdf, block = urdf or {}, block or {}
    unknown = sorted(set(block) - set(joint_names))
    if unknown:
        raise ValueError(
            f"{source}: joint_limits names {unknown[0]!r}, which is not a commanded joint "
            f"(joint names: {', '.join(joint_names)})"
        )
    return [{**urdf.get(name, {}), **block.get(name, {})} for name in joint_names]


def velocity_bounds(
    joint_names: Sequence[str],
    urdf: Mapping[str, Bounds] | None,
    block: Mapping[str, Bounds] | None,
    source: str,
) -> np.ndarray:
    """max_velocity of each joint of a robot commanded in velocities (URDF, the block on
    top), float64; inf where switched off (has_velocity_limits: false). ValueError in one
    line for a block joint that is not among them, or a joint without the bound."""
    bounds = []
    for name, entry in zip(joint_names, _merged(joint_names, urdf, block, source), strict=True):
        if "max_velocity" not in entry:
            raise ValueError(
                f"{source}: joint {name!r} has no max_velocity, which its velocity commands "
                f"are capped at (give it in joint_limits, or switch it off with "
                f"has_velocity_limits: false)"
            )
        bounds.append(entry["max_velocity"])
    return np.array(bounds, np.float64)


def ros_parameters(params: Path) -> dict[str, Any]:
    """The ros__parameters of a params YAML, every node's merged in file order."""
    data = yaml.safe_load(Path(params).read_text(encoding="utf-8")) or {}
    merged: dict[str, Any] = {}
    for entry in data.values() if isinstance(data, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("ros__parameters"), dict):
            merged |= entry["ros__parameters"]
    return merged


def limits_from_files(
    joints: Sequence[str],
    params: Path | None = None,
    urdf: Path | None = None,
    block_file: Path | None = None,
) -> JointLimits:
    """`joints`' limits as a node started with the `params` YAML reads them, without ROS
    (the offline checks and the in-process evaluation): the URDF (`urdf`, else the
    params' robot_description or robot_description_file, relative to the working
    directory), then the joint_limits block (`block_file`, a joint_limits YAML or a params
    YAML, else the params'). A block joint not in `joints` is left out: these readers
    count or gate what is commanded; the node's configure validates the whole block."""
    values = ros_parameters(params) if params else {}
    text, where = "", ""
    if urdf is not None:
        text, where = urdf.read_text(encoding="utf-8"), str(urdf)
    elif values.get("robot_description"):
        text, where = values["robot_description"], "robot_description"
    elif values.get("robot_description_file"):
        path = Path(values["robot_description_file"])
        text, where = path.read_text(encoding="utf-8"), str(path)
    if block_file is not None:
        loaded = yaml.safe_load(block_file.read_text(encoding="utf-8")) or {}
        block, block_source = loaded.get("joint_limits", {}), str(block_file)
        block = block or ros_parameters(block_file).get("joint_limits", {})
    else:
        block, block_source = values.get("joint_limits", {}), "joint_limits"
    block = {joint: keys for joint, keys in block.items() if joint in joints}
    bounds = urdf_bounds(text, where) if text else None
    source = " + ".join(s for s in (where, block_source if block else "") if s) or "no limits"
    return resolve(joints, bounds, block_bounds(block, block_source), source)
