"""The ROS command line of our executables (oxygen_ros.ros_args): --help and -p values."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import rclpy
from rclpy.context import Context
from rclpy.node import Node

from oxygen_core.engine.types import EngineConfig, is_parameter
from oxygen_ros import node as oxygen_node
from oxygen_ros.params import ConfigError, NodeConfig
from oxygen_ros.ros_args import (
    cli_parameters,
    parameter_args,
    ros_texts,
    ros_value,
    unapplied,
    wants_help,
)
from oxygen_ros.tools.configure import load_settings
from oxygen_ros.tools.sim import node as sim_node
from oxygen_ros.tools.sim.worlds import binding


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
    text = sim_node.help_text("tabletop")
    declared = sim_node.parameters(binding("tabletop"))
    assert re.findall(r"^  (\S+) \(default ", text, re.M) == [p.name for p in declared]
    for parameter in declared:
        assert f"\n  {parameter.name} (default {ros_value(parameter.default)}" in text
    assert "  families (default [pick, put, push])\n" in text


# Values of every type a tool passes, and strings YAML would read as something else.
VALUES = {
    "flag": True,
    "off": False,
    "rate": 20.0,
    "count": 3,
    "name": "pick",
    "topic": "/camera/base/image_raw",
    "relative": "~/instruction",
    "empty": "",
    "digits": "1",
    "word_true": "true",
    "colon": "Narrate the scene:",
    "families": ["pick", "put", "push"],
    "families_tuple": ("pick", "put"),
    "with_comma": ["a, b", "c"],
    "buckets": [1, 2, 4],
    "gains": [1.0, 2.5],
    "flags": [True, False],
}


@pytest.mark.ros
def test_parameter_args_reach_a_node_as_the_same_values():
    context = Context()
    rclpy.init(args=["x", "--ros-args", *parameter_args(VALUES)], context=context)
    try:
        node = Node("args_probe", context=context, start_parameter_services=False,
                    automatically_declare_parameters_from_overrides=True)  # fmt: skip
        for name, value in VALUES.items():
            got = node.get_parameter(name).value
            want = list(value) if isinstance(value, tuple) else value
            got = list(got) if isinstance(want, list) else got  # int arrays come as array("q")
            assert got == want and type(got) is type(want), (name, got)
            if isinstance(want, list):
                assert all(type(g) is type(w) for g, w in zip(got, want, strict=True)), name
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_parameter_args_literals():
    args = parameter_args({"autostart": True, "families": ("pick", "put"), "n": "1"})
    assert args == ["-p", "autostart:=true", "-p", "families:=[pick, put]", "-p", 'n:="1"']


def test_a_tools_set_values_reach_the_node_settings_as_typed():
    """`--set` values read as YAML go through the tools' settings reader as the text `-p`
    takes (`ros_texts`), with the type they were given: the string "off" stays a string
    (YAML 1.1 would read it unquoted as false), and a mistyped one is one line naming it."""
    tiny = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
    typed = {"gate_policy": "off", "instruction": "1", "autostart": True}
    settings, _ = load_settings(tiny, ros_texts(typed))
    assert (settings.node.gate_policy, settings.node.instruction) == ("off", "1")
    assert settings.node.autostart is True
    with pytest.raises(ConfigError, match=r"^bad parameter: .*'autostart'") as error:
        load_settings(tiny, ros_texts({"autostart": "maybe"}))
    assert "\n" not in str(error.value)


def test_the_command_lines_overrides_are_read_as_rcl_applies_them():
    argv = [
        "oxygen-node", "-p", "outside:=1", "--ros-args", "--params-file", "f.yaml",
        "-p", "control_rate_hz:=20.0", "--param", "oxygen:instruction:=go",
        "-p", "other_node:instruction:=no", "-r", "a:=b", "-p", "control_rate_hz:=fast",
        "--", "-p", "after:=1",
    ]  # fmt: skip
    assert cli_parameters(argv, "oxygen") == {"control_rate_hz": "fast", "instruction": "go"}


def test_a_string_rcl_dropped_for_a_typed_parameter_is_named_with_the_value_kept():
    values = {"control_rate_hz": 20.0, "instruction": "go", "batch_buckets": [1, 2]}
    cli = {"control_rate_hz": "fast", "instruction": "5", "batch_buckets": "[1, 4]"}
    assert unapplied(cli, values) == [
        "-p control_rate_hz:=fast was not applied: control_rate_hz takes a double, not a "
        "string (it is still 20.0)"
    ]
    assert unapplied({"control_rate_hz": "20.0", "unknown": "x"}, values) == []


def test_the_tools_settings_reader_refuses_a_string_for_a_typed_parameter():
    """The tools read a params file through a node of their own: a `--set` string for a
    double the file sets must not leave the file's value standing without a word."""
    tiny = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
    with pytest.raises(ConfigError, match="control_rate_hz"):
        load_settings(tiny, {"control_rate_hz": "fast"})
