"""The node's configuration without the node: parameters, topic names, frame pipeline.

Replay, the live player and the demo must see what the node sees, so nothing here
re-implements the node's reading of its parameters. `load_settings` loads the params
YAML into a throw-away rclpy node named like the node (in its own context, so it does
not disturb another rclpy user in the process), declares the node's parameters and reads
them with `params.read_settings`: same defaults, ranges and errors. Topic names are
resolved by that node too, so `~/` and relative names mean what they mean for the node.
`oxygen_ros.pipeline.make_pipeline` builds what the node's on_configure builds, minus
the publishers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.node import Node

from oxygen_ros import topics
from oxygen_ros.params import ConfigError, Settings, declare_parameters, read_settings

NODE_NAME = "oxygen"  # the node's name: its `~/` topics resolve under it


@dataclasses.dataclass(frozen=True)
class TopicNames:
    """Fully qualified topics of the node with these parameters (frame.Outputs' names)."""

    node: str  # the node's fully qualified name, which its /diagnostics statuses start with
    cameras: tuple[str, ...]
    joint_state: str
    instruction: str
    request: str
    action_chunk: str
    joint_trajectory: str | None  # None when the node does not publish trajectories
    tokens: Mapping[str, str]  # stream -> LanguageTokens topic
    texts: Mapping[str, str]  # stream -> finished-text topic
    stats: str
    markers: str
    diagnostics: str

    def inputs(self) -> tuple[str, ...]:
        """Every topic the node subscribes to."""
        return (*self.cameras, self.joint_state, self.instruction, self.request)

    def outputs(self) -> dict[str, str]:
        """topic -> message type of everything the node publishes."""
        types = {
            self.action_chunk: "oxygen_ros/msg/ActionChunk",
            self.stats: "oxygen_ros/msg/EngineStats",
            self.markers: "visualization_msgs/msg/MarkerArray",
            self.diagnostics: "diagnostic_msgs/msg/DiagnosticArray",
        }
        if self.joint_trajectory:
            types[self.joint_trajectory] = "trajectory_msgs/msg/JointTrajectory"
        types.update({topic: "oxygen_ros/msg/LanguageTokens" for topic in self.tokens.values()})
        types.update({topic: "std_msgs/msg/String" for topic in self.texts.values()})
        return types


def load_settings(
    params: Path, overrides: Mapping[str, object] | None = None
) -> tuple[Settings, TopicNames]:
    """The node's settings and topics from its params YAML, read by the node's own code.

    overrides: parameter values as `-p name:=value` would set them (e.g. seed, engine_mode).
    Raises FileNotFoundError, or params.ConfigError naming a bad or unknown parameter.
    """
    if not Path(params).is_file():
        raise FileNotFoundError(f"params file {params} does not exist")
    args = ["--ros-args", "--params-file", str(params)]
    for name, value in (overrides or {}).items():
        args += ["-p", f"{name}:={value}"]
    context = Context()
    rclpy.init(args=[], context=context)
    try:
        node = rclpy.create_node(
            NODE_NAME,
            context=context,
            cli_args=args,
            start_parameter_services=False,
            enable_rosout=False,
        )
        try:
            declare_parameters(node)
            # rclpy ignores a -p override of an undeclared name: refuse it instead.
            unknown = [name for name in overrides or {} if not node.has_parameter(name)]
            if unknown:
                raise ConfigError(f"{unknown[0]!r} is not a parameter of the node")
            settings = read_settings(node)
            return settings, _topic_names(node, settings)
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def _topic_names(node: Node, settings: Settings) -> TopicNames:
    cfg, resolve = settings.node, node.resolve_topic_name
    return TopicNames(
        node=node.get_fully_qualified_name(),
        cameras=tuple(resolve(topic) for topic in cfg.camera_topics),
        joint_state=resolve(cfg.joint_state_topic),
        instruction=resolve(cfg.instruction_topic),
        request=resolve(topics.REQUEST),
        action_chunk=resolve(topics.ACTION_CHUNK),
        joint_trajectory=resolve(topics.JOINT_TRAJECTORY) if cfg.joint_trajectory else None,
        tokens={s: resolve(topics.stream_tokens(s)) for s in cfg.stream_names},
        texts={s: resolve(topics.stream_text(s)) for s in cfg.stream_names},
        stats=resolve(topics.STATS),
        markers=resolve(topics.MARKERS),
        diagnostics=topics.DIAGNOSTICS,
    )
