"""The ROS command line of our executables (oxygen_ros.ros_args): --help and -p values."""

from __future__ import annotations

import dataclasses
import re

from oxygen_core.engine.types import EngineConfig, is_parameter
from oxygen_ros import node as oxygen_node
from oxygen_ros.params import NodeConfig
from oxygen_ros.ros_args import ros_value, wants_help
from oxygen_ros.tools.sim import node as sim_node


def test_help_is_asked_before_ros_args_only():
    assert wants_help(["oxygen-node", "--help"])
    assert wants_help(["oxygen-node", "-h", "--ros-args", "-p", "autostart:=true"])
    assert not wants_help(["oxygen-node"])
    assert not wants_help(["oxygen-node", "--ros-args", "-p", "instruction:=--help"])
    assert not wants_help(["--help"])  # the program's name, as rclpy reads argv


def test_node_help_lists_every_parameter_field_with_its_default():
    text = oxygen_node.help_text()
    fields = [
        f for config in (NodeConfig, EngineConfig) for f in dataclasses.fields(config)
        if is_parameter(f)
    ]  # fmt: skip
    listed = re.findall(r"^  (\S+) \(default ", text, re.M)
    assert listed == [f.name for f in fields]
    for field in fields:
        assert f"\n  {field.name} (default {ros_value(field.default)}" in text, field.name
    assert "  control_rate_hz (default 50.0, in [0.1, 1000.0])\n" in text
    assert "  engine_mode (default oxygen, one of oxygen, shared, isolated)\n" in text
    assert "--params-file config/tiny.yaml -p autostart:=true" in text


def test_sim_help_lists_what_the_sim_node_declares():
    text = sim_node.help_text()
    assert re.findall(r"^  (\S+) \(default ", text, re.M) == [p.name for p in sim_node.PARAMETERS]
    for parameter in sim_node.PARAMETERS:
        assert f"\n  {parameter.name} (default {ros_value(parameter.default)}" in text
    assert "  families (default [pick, put, push])\n" in text
