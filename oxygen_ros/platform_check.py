"""Whether this Python and this rclpy can run the node, asked before anything imports it.

The node runs on ROS 2 Jazzy (a Jetson AGX Thor on JetPack 7: Ubuntu 24.04, Python 3.12)
and Kilted (the PyPI wheels the tests run on). Older distros fail deep inside an import:
Humble's rclpy has no `rclpy.event_handler` (its QoS events live in `rclpy.qos_event`
until Iron) and its Python 3.10 is older than JAX supports. `oxygen-node` enters here, so
on such a platform it exits with one line naming what it needs, instead of a traceback
from whichever module happened to import first.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

SUPPORTED = "ROS 2 Jazzy or Kilted with Python 3.11 or newer"
MIN_PYTHON = (3, 11)  # JAX's floor
# What the node imports from rclpy that older distros lack, and the first distro with it.
RCLPY_NEEDS = {"rclpy.event_handler": "Iron", "rclpy.lifecycle": "Humble"}


def problem() -> str | None:
    """Why this platform cannot run the node, in one line; None when it can."""
    if sys.version_info < MIN_PYTHON:
        found = ".".join(map(str, sys.version_info[:2]))
        return f"Python {found} is older than {'.'.join(map(str, MIN_PYTHON))}"
    distro = os.environ.get("ROS_DISTRO", "unknown")
    try:
        importlib.import_module("rclpy")
    except ImportError as error:
        return f"rclpy does not import ({error}): source /opt/ros/<distro>/setup.bash first"
    for module, since in RCLPY_NEEDS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            return f"this rclpy (ROS_DISTRO {distro}) has no {module}, which {since} added"
    return None


def node_main(args: Sequence[str] | None = None) -> int:
    """Console script `oxygen-node`: the platform check, then oxygen_ros.node.main."""
    error = problem()
    if error is not None:
        print(f"oxygen-node: {error}; it runs on {SUPPORTED}", file=sys.stderr)
        return 1
    from oxygen_ros.node import main  # only now: it imports what the check asked about

    return main(None if args is None else list(args))


if __name__ == "__main__":
    sys.exit(node_main())
