"""`oxygen-doctor`: what a robot setup lacks before the node runs on it, in one pass.

    oxygen-doctor config/robot.yaml [--offline] [--listen-s 5] [--allow-random] [--json]
    python -m oxygen_ros.tools.doctor config/tiny.yaml --allow-random -p gate_policy:=clamp

In the spirit of `ros2 doctor`: every finding is one line, `ok|warn|FAIL <check>: <what>
-> <fix>`, and the exit status is 0 only when the node would start and move safely (no
FAIL), else 1. Each decision is the project's own, made by the module that makes it for
the node (doctor_checks names them), so the doctor cannot pass what the node refuses:

- platform: Python and rclpy (oxygen_ros.platform_check), asked before anything imports
  rclpy, so an unsupported distro gets this line instead of a traceback;
- params: the YAML (and `-p` overrides) read as the node reads it, then checked against
  the model preset and robot as configure checks them; JAX's backend against `dtype`;
- checkpoint: from Orbax's metadata and its assets only (stored shapes against the
  preset, embedding rows against the tokenizer, norm stats, trained horizon). The weights
  are never loaded: a 3 B checkpoint is 12 GB, and a doctor must answer in seconds. A
  file corrupt past its metadata is found only by configure. An empty checkpoint_dir
  (random weights) FAILs unless --allow-random (demo, simulation);
- limits, ~/enable, the compilation cache;
- live (not with --offline): for --listen-s seconds, the joint states and cameras the node
  would take, then the graph: a subscriber on each controller output, the e-stop's
  publishers and whether the node's e-stop subscriptions hear them.

Findings come in that order: each one assumes the ones before it pass, so the first FAIL
is the one to fix first. When platform or params FAIL, nothing after them can be judged
and no more lines follow.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from oxygen_ros.platform_check import RCLPY_NEEDS, SUPPORTED, problem
from oxygen_ros.tools.doctor_findings import Finding


def platform() -> Finding:
    """Whether this Python and rclpy run the node (platform_check decides)."""
    error = problem()
    if error is not None:
        return Finding("FAIL", "platform", error, f"run on {SUPPORTED}")
    python = ".".join(map(str, sys.version_info[:3]))
    distro = os.environ.get("ROS_DISTRO", "unset (PyPI rclpy)")
    return Finding(
        "ok",
        "platform",
        f"Python {python}, ROS_DISTRO {distro}, rclpy has {', '.join(RCLPY_NEEDS)}",
    )


def diagnose(
    params: Path,
    overrides: dict[str, str],
    *,
    allow_random: bool = False,
    listen_s: float | None = 5.0,
) -> list[Finding]:
    """Every finding, in the order to fix them; listen_s None: offline (no graph)."""
    first = platform()
    if first.level == "FAIL":
        return [first]
    # Only now: doctor_checks imports rclpy, which the platform check has just vouched for.
    from oxygen_ros.tools import doctor_checks

    return [first, *doctor_checks.diagnose(params, overrides, allow_random, listen_s)]


def exit_code(findings: Sequence[Finding]) -> int:
    return 1 if any(f.level == "FAIL" for f in findings) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-doctor`: print the findings; 0 without a FAIL, else 1."""
    args = _parser().parse_args(argv)
    findings = diagnose(
        args.params,
        dict(args.param),
        allow_random=args.allow_random,
        listen_s=None if args.offline else args.listen_s,
    )
    code = exit_code(findings)
    if args.json:
        rows = [dataclasses.asdict(f) for f in findings]
        print(json.dumps({"exit": code, "findings": rows}, indent=2))
    else:
        print("\n".join(f.line() for f in findings))
    return code


def _override(text: str) -> tuple[str, str]:
    """`name:=value`, as `--ros-args -p` takes it (the value is YAML)."""
    name, sep, value = text.partition(":=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:=VALUE")
    return name, value


def _seconds(text: str) -> float:
    seconds = float(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return seconds


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-doctor",
        description="Check a robot setup for the oxygen node: one line per finding.",
    )
    parser.add_argument("params", type=Path, help="the node's params YAML")
    parser.add_argument(
        "-p", "--param", type=_override, action="append", default=[], metavar="NAME:=VALUE",
        help="a parameter override, as the node would get it from -p",
    )  # fmt: skip
    parser.add_argument(
        "--allow-random", action="store_true",
        help="random weights (empty checkpoint_dir) are a warning, not a FAIL: demo and sim",
    )  # fmt: skip
    parser.add_argument("--offline", action="store_true", help="skip the live topic checks")
    parser.add_argument(
        "--listen-s", type=_seconds, default=5.0, help="how long to listen to the topics (s)"
    )
    parser.add_argument("--json", action="store_true", help="findings as JSON, for scripts")
    return parser


if __name__ == "__main__":
    sys.exit(main())
