"""The ROS command line of our executables: `-p name:=value` arguments and `--help`.

rcl reads the value of `-p name:=value` as YAML, so a Python value must be written as the
YAML literal of the same type: `true`/`false` (Python's `True` would be the string
"True"), `[a, b]` for a list, and a string that YAML would read as something else ("1",
"true", "") in quotes. `parameter_args` is the one place that writes them; the tools that
start a node or the simulator as a child process call it. `override` reads a tool's
`--set NAME=VALUE` option back into a typed value.

rcl drops one kind of `-p` silently: a value YAML reads as a string (`control_rate_hz:=fast`)
for a parameter of another type that a params file also sets; the node would run on the
file's value. `unapplied` finds those in a node's command line once it is built.

The nodes take their options as ROS parameters, which rclpy parses and argparse never
sees, so `--help` is handled here before `rclpy.init`: `wants_help` finds it among the
arguments before `--ros-args`, and `help_text` lists the parameters (default, range or
choices, description) from the same data the node declares them from.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from oxygen_core.engine.types import is_parameter

HELP_FLAGS = ("-h", "--help")
_WIDTH = 100
_DOC = " " * 6  # indent of a parameter's description


def ros_value(value: object) -> str:
    """`value` as the YAML literal rcl parses back to the same type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(ros_value(v) for v in value) + "]"
    if isinstance(value, str) and not _plain(value):
        return json.dumps(value)  # a JSON string is a YAML string
    return str(value)


def _plain(text: str) -> bool:
    """Whether YAML reads `text` unquoted as this string, also inside a [list]."""
    if not text or any(c in text for c in ",[]{}#"):
        return False
    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


def ros_texts(overrides: Mapping[str, object]) -> dict[str, str]:
    """Typed values as the text `-p name:=value` takes (what `load_settings` reads)."""
    return {name: ros_value(value) for name, value in overrides.items()}


def parameter_args(overrides: Mapping[str, object]) -> list[str]:
    """`-p name:=value` for each override, in order (to follow `--ros-args`)."""
    args: list[str] = []
    for name, value in overrides.items():
        args += ["-p", f"{name}:={ros_value(value)}"]
    return args


def override(text: str) -> tuple[str, object]:
    """NAME=VALUE -> (NAME, the value as YAML reads it: 10 is an int, auto a string): a
    tool's `--set` option (argparse type), written back by `parameter_args`."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, yaml.safe_load(value)


def wants_help(args: Sequence[str] | None = None) -> bool:
    """-h or --help before `--ros-args` (after it, every argument is ROS's).
    `args`: a full argv, program name first (default sys.argv)."""
    argv = list(sys.argv if args is None else args)[1:]
    if "--ros-args" in argv:
        argv = argv[: argv.index("--ros-args")]
    return any(a in HELP_FLAGS for a in argv)


_PARAM_FLAGS = ("-p", "--param")
_ROS_TYPES = {bool: "bool", int: "integer", float: "double"}


def _listed(value: Any) -> Any:
    """A parameter's value with rclpy's array.array as a list."""
    return value if isinstance(value, bool | int | float | list) else list(value)


def cli_parameters(args: Sequence[str], node_name: str) -> dict[str, str]:
    """name -> value text of every `-p [node:]name:=value` in the --ros-args sections of a
    full argv that applies to the node `node_name` (the last one given wins, as in rcl)."""
    found: dict[str, str] = {}
    ros = False
    for flag, value in itertools.pairwise(list(args)):
        if flag in ("--ros-args", "--"):
            ros = flag == "--ros-args"
        elif ros and flag in _PARAM_FLAGS and ":=" in value:
            name, _, text = value.partition(":=")
            node, _, param = name.rpartition(":")
            if node in ("", node_name):
                found[param] = text
    return found


def unapplied(cli: Mapping[str, str], values: Mapping[str, Any]) -> list[str]:
    """The `-p` overrides rcl dropped: a string for a declared parameter of another type
    that still holds another value. `values`: the node's declared parameters' values."""
    lines = []
    for name, text in cli.items():
        value = values.get(name)
        if value is None or isinstance(value, str):
            continue
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            parsed = text
        if isinstance(parsed, str):
            kind = _ROS_TYPES.get(type(value), "array")
            lines.append(
                f"-p {name}:={text} was not applied: {name} takes a {kind}, not a string "
                f"(it is still {ros_value(_listed(value))})"
            )
    return lines


@dataclasses.dataclass(frozen=True)
class ParamDoc:
    """One ROS parameter as `--help` shows it."""

    name: str
    default: Any
    doc: str
    span: tuple[float, float] | None = None
    choices: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        limits = f", in [{self.span[0]}, {self.span[1]}]" if self.span else ""
        if self.choices:
            limits = f", one of {', '.join(self.choices)}"
        head = f"  {self.name} (default {ros_value(self.default)}{limits})"
        return [head, textwrap.fill(self.doc, _WIDTH, initial_indent=_DOC, subsequent_indent=_DOC)]


def dataclass_params(*configs: type) -> list[ParamDoc]:
    """The parameter fields of config dataclasses (oxygen_core's `parameter` metadata)."""
    return [
        ParamDoc(f.name, f.default, f.metadata["doc"], f.metadata["span"], f.metadata["choices"])
        for config in configs
        for f in dataclasses.fields(config)
        if is_parameter(f)
    ]


def help_text(
    prog: str, summary: str, params: Iterable[ParamDoc], examples: Sequence[str], notes: str = ""
) -> str:
    """Usage, what the executable is, its parameters, and example command lines."""
    parts = [
        f"usage: {prog} [-h] [--ros-args [--params-file FILE] [-p NAME:=VALUE ...]]",
        "",
        textwrap.fill(" ".join(summary.split()), _WIDTH),
        "",
        "ROS parameters (set with -p NAME:=VALUE or a --params-file):",
        *(line for p in params for line in p.lines()),
    ]
    if notes:
        parts += ["", textwrap.fill(" ".join(notes.split()), _WIDTH)]
    parts += ["", "examples:", *(f"  {e}" for e in examples)]
    return "\n".join(parts) + "\n"
