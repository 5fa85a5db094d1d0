#!/usr/bin/env python3
"""The pip requirements of a robot install, pinned at requirements.txt's versions.

    python3 scripts/robot_requirements.py cuda13          # every line, for pip -r
    python3 scripts/robot_requirements.py --jax cuda12    # JAX alone (make bench-gpu)

requirements.txt pins the development venv and is the one place the project names a
version. A robot takes from it only what its system ROS does not provide (rosdep
installs rclpy, the messages, numpy's and yaml's system packages from package.xml), and
JAX with the extra of its accelerator: `cpu`, `cuda12` (NVIDIA driver 525 or newer) or
`cuda13` (driver 580 or newer; Jetson AGX Thor on JetPack 7). JAX 0.10.2 is the version
tested here, and the first whose CUDA 13 wheels carry Thor's sm_110. numpy is pinned too:
JAX needs numpy 2, newer than Ubuntu 24.04's. Standard library only: it runs before
anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements.txt"
ACCELERATORS = ("cpu", "cuda12", "cuda13")
# What the node and its tools import that a ROS install does not bring, JAX aside.
ROBOT_PACKAGES = ("numpy", "orbax-checkpoint", "sentencepiece", "rosbags")


def pins(text: str) -> dict[str, str]:
    """name (lower case, extras dropped) -> version, from `name[extra]==version` lines."""
    found = re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)", text, flags=re.MULTILINE)
    return {name.lower(): version for name, version in found}


def jax_requirement(accelerator: str, pinned: dict[str, str]) -> str:
    """JAX with its accelerator's extra, at the tested version."""
    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator {accelerator!r} is not one of {', '.join(ACCELERATORS)}")
    return f"jax[{accelerator}]=={pinned['jax']}"


def robot_requirements(accelerator: str, pinned: dict[str, str]) -> list[str]:
    """Every pip line a robot install needs."""
    missing = [name for name in ("jax", *ROBOT_PACKAGES) if name not in pinned]
    if missing:
        raise ValueError(f"requirements.txt pins no {', '.join(missing)}")
    rest = [f"{name}=={pinned[name]}" for name in ROBOT_PACKAGES]
    return [jax_requirement(accelerator, pinned), *rest]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="robot_requirements.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("accelerator", help=" | ".join(ACCELERATORS))
    parser.add_argument("--jax", action="store_true", help="Print only the JAX requirement.")
    args = parser.parse_args(argv)
    pinned = pins(REQUIREMENTS.read_text())
    try:
        lines = robot_requirements(args.accelerator, pinned)
    except ValueError as error:
        print(f"robot_requirements.py: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines[:1] if args.jax else lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
