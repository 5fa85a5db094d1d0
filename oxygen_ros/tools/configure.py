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

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.exceptions import ParameterException
from rclpy.node import Node

from oxygen_ros import topics
from oxygen_ros.params import ConfigError, Settings, declare_parameters, read_settings
from oxygen_ros.ros_args import unapplied

NODE_NAME = "oxygen"  # the node's name: its `~/` topics resolve under it


@dataclasses.dataclass(frozen=True)
class TopicNames:
    """Fully qualified topics of the node with these parameters.

    Its outputs are the rows of oxygen_ros.topics.OUTPUTS that these parameters switch on,
    resolved as the node resolves them.
    """

    node: str  # the node's fully qualified name, which its /diagnostics statuses start with
    cameras: tuple[str, ...]
    joint_state: str
    instruction: str
    request: str
    published: tuple[topics.Topic, ...]  # topic: the fully qualified name
    estop: str = ""
    enable: str = ""  # the ~/enable service

    def inputs(self) -> tuple[str, ...]:
        """Every topic the node subscribes to."""
        named = (*self.cameras, self.joint_state, self.instruction, self.request, self.estop)
        return tuple(name for name in named if name)

    def outputs(self) -> dict[str, str]:
        """topic -> message type of everything the node publishes."""
        return {t.topic: t.output.msgtype for t in self.published}

    def output(self, name: str, stream: str | None = None) -> str | None:
        """The topic of output `name` (of `stream`); None when the node does not publish it."""
        return next((t.topic for t in self.published if t.key == (name, stream)), None)

    def per_stream(self, name: str) -> dict[str, str]:
        """stream -> topic of a per-stream output."""
        return {t.stream: t.topic for t in self.published if t.output.name == name}


def load_settings(
    params: Path, overrides: Mapping[str, object] | None = None, namespace: str = ""
) -> tuple[Settings, TopicNames]:
    """The node's settings and topics from its params YAML, read by the node's own code.

    overrides: parameter values as the text `-p name:=value` takes (YAML: "0" is an int;
    a typed value goes through `ros_args.ros_texts` first).
    namespace: the node's namespace (launch's `namespace:=`): relative topics resolve in it.
    Raises FileNotFoundError, or params.ConfigError naming a bad or unknown parameter.
    """
    with params_node(params, overrides, namespace) as node:
        try:
            declare_parameters(node)
        except ParameterException as error:  # a mistyped or out-of-range value, as the node
            raise ConfigError(f"bad parameter: {error}") from None
        # rclpy ignores a -p override of an undeclared name: refuse it instead.
        unknown = [name for name in overrides or {} if not node.has_parameter(name)]
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a parameter of the node")
        texts = {name: str(value) for name, value in (overrides or {}).items()}
        values = {name: node.get_parameter(name).value for name in texts}
        dropped = unapplied(texts, values)  # rcl kept the file's value without a word
        if dropped:
            raise ConfigError(f"bad parameter: {dropped[0]}")
        settings = read_settings(node)
        return settings, _topic_names(node, settings)


@contextlib.contextmanager
def params_node(
    params: Path, overrides: Mapping[str, object] | None = None, namespace: str = ""
) -> Iterator[Node]:
    """A throw-away node named like the oxygen node, in its own context, holding the params
    file (and `-p` overrides) as the node would receive them: parameters declared on it
    resolve as the node's, topic names in its namespace. FileNotFoundError without the file."""
    if not Path(params).is_file():
        raise FileNotFoundError(f"params file {params} does not exist")
    args = ["--ros-args", "--params-file", str(params)]
    for name, value in (overrides or {}).items():
        args += ["-p", f"{name}:={value if value != '' else repr('')}"]  # rcl: YAML values
    with own_node(NODE_NAME, namespace, args) as node:
        yield node


@contextlib.contextmanager
def own_node(name: str, namespace: str = "", cli_args: Sequence[str] = ()) -> Iterator[Node]:
    """A node in a context of its own, so another rclpy user in the process is left be;
    no parameter services and no /rosout: it only reads and looks, and goes."""
    context = Context()
    rclpy.init(args=[], context=context)
    try:
        node = rclpy.create_node(
            name,
            namespace=namespace,
            context=context,
            cli_args=list(cli_args),
            start_parameter_services=False,
            enable_rosout=False,
        )
        try:
            yield node
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
        published=tuple(
            dataclasses.replace(t, topic=resolve(t.topic)) for t in topics.output_topics(cfg)
        ),
        estop=resolve(cfg.estop_topic),
        enable=node.resolve_service_name(topics.ENABLE),
    )
