"""The commanded joints' limits from the node's parameters: the URDF, then joint_limits.

The URDF comes from `robot_description` (the XML itself), else `robot_description_file`,
else the latched `robot_description_topic` (robot_state_publisher's transient-local
std_msgs/String), waited for at configure up to `robot_description_timeout_s`; a robot
without one gives every bound in the block. The block is the parameters
`joint_limits.<joint>.<key>` (the params YAML nests them like `streams:`), the ros2_control
joint_limits keys plus `max_jump`; `oxygen_core.safety.limits` merges the two and names
what is wrong in one line.

The block's parameters are declared at start-up for every commanded joint (action_names,
else joint_names), and also every `joint_limits.*` name the params file gives: rclpy
drops a value of an undeclared name without a word, and a misspelt key or joint must fail
configure, not leave a joint with the URDF's bound alone. They are dynamically typed, so
`max_velocity: 2` is read as the number it is; the types are checked when they are read.

Only a gate needs limits: none are read with gate_policy off, or when the chunk is not
joint positions (joint_trajectory false: velocity or end-effector actions, which the
position gate cannot judge). A robot commanded in joint velocities through
~/command_chunk needs only its joints' max_velocity, which its rows are capped at
(`read_velocity_cap`, oxygen_core.safety.velocity).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.wait_for_message import wait_for_message
from std_msgs.msg import String

from oxygen_core.config import RobotConfig
from oxygen_core.safety.limits import (
    JointLimits,
    block_bounds,
    resolve,
    urdf_bounds,
    velocity_bounds,
)
from oxygen_core.safety.velocity import VelocityCap


class NodeConfig(typing.Protocol):
    """The fields of oxygen_ros.params.NodeConfig read here (params imports this module)."""

    gate_policy: str
    joint_trajectory: bool
    command_chunk: bool
    joint_names: tuple[str, ...]
    robot_description: str
    robot_description_file: str
    robot_description_topic: str
    robot_description_timeout_s: float


PREFIX = "joint_limits."
# The keys `ros2 param describe` lists for every commanded joint (others a file gives are
# declared too, and checked by oxygen_core.safety.limits).
LIMIT_KEYS = {
    "min_position": "Lowest position (rad, or m for a prismatic joint); overrides the URDF.",
    "max_position": "Highest position; overrides the URDF.",
    "max_velocity": "Largest speed per second; overrides the URDF.",
    "max_acceleration": "Largest acceleration per second squared (a URDF has none).",
    "max_jump": "Furthest a chunk's first point may lie from the measured position.",
    "has_position_limits": "false: no position range (a continuous joint).",
    "has_velocity_limits": "false: no velocity bound.",
    "has_acceleration_limits": "false: no acceleration bound.",
    "has_jump_limits": "false: no start-jump bound.",
}
_LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def declare_limit_parameters(node: Node, joints: Sequence[str]) -> None:
    """Declare joint_limits.<joint>.<key> for `joints` and for every such name given."""
    described = {f"{PREFIX}{j}.{key}": doc for j in joints for key, doc in LIMIT_KEYS.items()}
    # rclpy has no public view of the overrides (the params file and -p values).
    given = [name for name in node._parameter_overrides if name.startswith(PREFIX)]
    for name in dict.fromkeys([*described, *given]):
        doc = described.get(name, "A joint_limits key the params file gives.")
        descriptor = ParameterDescriptor(name=name, description=doc, dynamic_typing=True)
        node.declare_parameter(name, None, descriptor)


def read_limits(node: Node, cfg: NodeConfig, commanded: Sequence[str]) -> JointLimits | None:
    """The commanded joints' limits when a gate will judge them, else None. ValueError in
    one line naming the parameter (and the joint) on anything the gate cannot run with."""
    if cfg.gate_policy == "off" or not cfg.joint_trajectory or not commanded:
        return None
    urdf, where = _urdf(node, cfg)
    block = block_bounds(_block(node), "parameters")
    source = f"{where} + joint_limits" if where else "joint_limits"
    return resolve(commanded, urdf_bounds(urdf, where) if where else None, block, source)


def read_velocity_cap(
    node: Node, cfg: NodeConfig, robot: RobotConfig, commanded: Sequence[str]
) -> VelocityCap | None:
    """The bounds a velocity robot's ~/command_chunk rows are capped at: max_velocity of
    each commanded joint but the grippers (whose commands are positions); None for other
    robots, or without ~/command_chunk. ValueError in one line as `read_limits`."""
    if robot.action_space != "velocity" or not cfg.command_chunk:
        return None
    if not commanded:
        raise ValueError("a velocity robot's ~/command_chunk needs action_names to cap them")
    urdf, where = _urdf(node, cfg)
    columns = [i for i in range(len(commanded)) if i not in robot.gripper_dims]
    joints = [commanded[i] for i in columns]
    # A gripper's bounds may be in the block (a ros2_control file): not velocities here.
    grippers = {commanded[i] for i in robot.gripper_dims if i < len(commanded)}
    block = block_bounds(_block(node), "parameters")
    source = f"{where} + joint_limits" if where else "joint_limits"
    bounds = np.full(len(commanded), np.inf)
    bounds[columns] = velocity_bounds(
        joints,
        urdf_bounds(urdf, where) if where else None,
        {joint: b for joint, b in block.items() if joint not in grippers},
        source,
    )
    return VelocityCap(bounds)


def _urdf(node: Node, cfg: NodeConfig) -> tuple[str, str]:
    """The URDF's XML and where it came from; ("", "") when no parameter names one."""
    if cfg.robot_description:
        return cfg.robot_description, "robot_description"
    if cfg.robot_description_file:
        where = f"robot_description_file {cfg.robot_description_file}"
        try:
            return Path(cfg.robot_description_file).read_text(encoding="utf-8"), where
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"{where}: cannot read it: {error}") from None
    if cfg.robot_description_topic:
        return _wait_for_urdf(node, cfg.robot_description_topic, cfg.robot_description_timeout_s)
    return "", ""


def _wait_for_urdf(node: Node, topic: str, timeout_s: float) -> tuple[str, str]:
    """The latched URDF on `topic`, waited for without the node's executor (configure runs
    inside it)."""
    try:
        where = f"robot_description_topic {node.resolve_topic_name(topic)}"
    except RuntimeError as error:  # rclpy's RCLError, with rcl's reason
        raise ValueError(
            f"robot_description_topic {topic!r} is not a valid topic name: {error}"
        ) from None
    got, message = wait_for_message(
        String, node, topic, qos_profile=_LATCHED, time_to_wait=timeout_s
    )
    if not got:
        raise ValueError(
            f"{where}: no URDF within robot_description_timeout_s={timeout_s} s (is "
            "robot_state_publisher running, publishing it transient local?)"
        )
    return message.data, where


def _block(node: Node) -> dict[str, dict[str, object]]:
    """The joint_limits parameters that have a value, as joint -> key -> value."""
    block: dict[str, dict[str, object]] = {}
    for name, param in node.get_parameters_by_prefix(PREFIX.rstrip(".")).items():
        if param.value is None:
            continue
        joint, dot, key = name.rpartition(".")
        if not dot:
            raise ValueError(f"{PREFIX}{name} is not of the form joint_limits.<joint>.<key>")
        block.setdefault(joint, {})[key] = _plain(param.value)
    return block


def _plain(value: object) -> object:
    """Arrays come from rclpy as array.array or lists: keep them visibly not numbers."""
    return value if isinstance(value, bool | int | float | str) else list(value)
