"""oxygen-config viewers: rviz2, rqt and Foxglove layouts for one robot's params YAML.

    oxygen-config viewers --params config/aloha.yaml [--namespace arm1] --out DIR

A hand-written rviz config names topics, so it fits one robot and breaks for the next (or
for the same robot under a namespace). These files are generated from what the node
itself would subscribe to and publish: the params YAML is read by the node's own code
(oxygen_ros.tools.configure.load_settings), so camera order, `~/` names and the namespace
resolve exactly as on the robot. Written per robot:

- <robot>.rviz: one Image display per camera (model slot order) and the narration and
  memory text markers;
- <robot>.perspective: rqt with the robot monitor (/diagnostics) and plots of the frame
  time against its budget, the language batch and k, and deadline misses;
- <robot>.foxglove.json: the same for Foxglove in a browser (oxygen-config foxglove).

config/viewers/ ships the output for each robot in config/; a test regenerates and compares them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from oxygen_ros import topics
from oxygen_ros.tools.configure import TopicNames, load_settings

# Slot names of the model's cameras, in camera_topics order (README: base, left, right).
CAMERA_SLOTS = ("Base camera", "Left wrist camera", "Right wrist camera")
# EngineStats fields worth watching live, by plot: time against budget, batching, misses.
STATS_PLOTS = (("frame_s", "budget_s"), ("batch", "k", "active_requests"), ("deadline_misses",))


def camera_labels(names: TopicNames) -> list[str]:
    """A display name per camera: its model slot, then numbered beyond three."""
    return [
        CAMERA_SLOTS[i] if i < len(CAMERA_SLOTS) else f"Camera {i + 1}"
        for i in range(len(names.cameras))
    ]


def _topic(value: str, reliable: bool) -> dict[str, Any]:
    return {
        "Value": value,
        "Depth": 5 if reliable else 1,
        "History Policy": "Keep Last",
        "Reliability Policy": "Reliable" if reliable else "Best Effort",
        "Durability Policy": "Volatile",
    }


def rviz_config(names: TopicNames) -> dict[str, Any]:
    """rviz2's YAML: cameras as Image displays, language as text markers."""
    displays: list[dict[str, Any]] = [
        {
            "Class": "rviz_default_plugins/Grid",
            "Name": "Grid",
            "Enabled": True,
            "Value": True,
            "Reference Frame": "<Fixed Frame>",
            "Cell Size": 0.25,
            "Plane Cell Count": 8,
            "Color": "160; 160; 164",
            "Alpha": 0.5,
        },  # fmt: skip
        {
            "Class": "rviz_default_plugins/MarkerArray",
            "Name": "Narration and memory",
            "Enabled": True,
            "Value": True,
            "Namespaces": {"oxygen": True},
            "Topic": _topic(names.output(topics.MARKERS), reliable=True),
        },  # fmt: skip
    ]
    for label, topic in zip(camera_labels(names), names.cameras, strict=True):
        image = {"Class": "rviz_default_plugins/Image", "Name": label, "Enabled": True}
        image |= {"Value": True, "Normalize Range": True}
        if topic.endswith("/compressed"):  # image_transport: the base topic + transport
            image |= {"Topic": _topic(topic.removesuffix("/compressed"), reliable=False)}
            image["Topic"]["Transport Hint"] = "compressed"
        else:
            image |= {"Topic": _topic(topic, reliable=False)}
        displays.append(image)
    return {
        "Panels": [
            {"Class": "rviz_common/Displays", "Name": "Displays", "Help Height": 0},
            {"Class": "rviz_common/Views", "Name": "Views", "Splitter Ratio": 0.5},
        ],
        "Visualization Manager": {
            "Class": "",
            "Name": "root",
            "Enabled": True,
            "Value": True,
            "Displays": displays,
            "Global Options": {
                "Fixed Frame": "base_link",
                "Background Color": "40; 40; 48",
                "Frame Rate": 30,
            },
            "Tools": [
                {"Class": "rviz_default_plugins/Interact", "Hide Inactive Objects": True},
                {"Class": "rviz_default_plugins/MoveCamera"},
                {"Class": "rviz_default_plugins/Select"},
            ],
            "Views": {
                "Current": {
                    "Class": "rviz_default_plugins/Orbit",
                    "Name": "Current View",
                    "Target Frame": "<Fixed Frame>",
                    "Focal Point": {"X": 0, "Y": 0, "Z": 0.3},
                    "Distance": 1.5,
                    "Pitch": 0.4,
                    "Yaw": 0.6,
                    "Near Clip Distance": 0.01,
                },
                "Saved": None,
            },
        },  # fmt: skip
        "Window Geometry": {"Width": 1400, "Height": 900},
    }


def _repr(value: Any) -> dict[str, str]:
    """A qt_gui setting as perspective files store it: the Python repr of the value."""
    return {"type": "repr", "repr": repr(value)}


def rqt_perspective(names: TopicNames) -> dict[str, Any]:
    """rqt_gui's perspective JSON: one robot monitor, one rqt_plot per STATS_PLOTS entry."""
    plots = {
        f"plugin__rqt_plot__Plot__{i}": {
            "keys": {},
            "groups": {
                "plugin": {
                    "keys": {
                        "topics": _repr(
                            [f"{names.output(topics.STATS)}/{field}" for field in fields]
                        ),
                        "autoscroll": _repr(True),
                    },
                    "groups": {},
                }
            },
        }
        for i, fields in enumerate(STATS_PLOTS, start=1)
    }
    running = {
        "rqt_robot_monitor/RobotMonitor": [1],
        "rqt_plot/Plot": list(range(1, len(STATS_PLOTS) + 1)),
    }
    return {
        "keys": {},
        "groups": {
            "pluginmanager": {
                "keys": {"running-plugins": _repr(running)},
                "groups": {
                    "plugin__rqt_robot_monitor__RobotMonitor__1": {"keys": {}, "groups": {}},
                    **plots,
                },
            }
        },
    }


def foxglove_layout(names: TopicNames, joints: Sequence[str]) -> dict[str, Any]:
    """Foxglove's layout JSON: cameras as images, chunk and stats plotted, text, diagnostics.

    The chunk plot shows the first action of each chunk, one line per joint (the chunk is
    H x D row-major, so the first action is actions[0..D-1]).
    """
    panels: dict[str, Any] = {}
    for i, topic in enumerate(names.cameras):
        panels[f"Image!camera{i}"] = {"imageMode": {"imageTopic": topic}}
    panels["Plot!chunk"] = {
        "title": "Action chunk (first action)",
        "paths": [
            {
                "value": f"{names.output(topics.ACTION_CHUNK)}.actions[{j}]",
                "label": joint,
                "enabled": True,
            }
            for j, joint in enumerate(joints)
        ],
    }
    for i, fields in enumerate(STATS_PLOTS):
        panels[f"Plot!stats{i}"] = {
            "title": ", ".join(fields),
            "paths": [
                {"value": f"{names.output(topics.STATS)}.{f}", "enabled": True} for f in fields
            ],
        }
    for stream, topic in sorted(names.per_stream(topics.TEXT).items()):
        panels[f"RawMessages!{stream}"] = {"topicPath": f"{topic}.data"}
    panels["DiagnosticSummary!diagnostics"] = {"topicToRender": names.output(topics.DIAGNOSTICS)}
    cameras = [k for k in panels if k.startswith("Image!")]
    plots = [k for k in panels if k.startswith("Plot!")]
    texts = [k for k in panels if k.startswith("RawMessages!")]
    return {
        "configById": panels,
        "globalVariables": {},
        "userNodes": {},
        "layout": {
            "direction": "row",
            "first": _stack(cameras, "column"),
            "second": {
                "direction": "column",
                "first": _stack(plots, "column"),
                "second": _stack([*texts, "DiagnosticSummary!diagnostics"], "row"),
                "splitPercentage": 60,
            },
            "splitPercentage": 40,
        },
    }


def _stack(panels: list[str], direction: str) -> str | dict[str, Any]:
    """Foxglove's binary split tree holding `panels` in equal shares."""
    if len(panels) == 1:
        return panels[0]
    half = len(panels) // 2
    return {
        "direction": direction,
        "first": _stack(panels[:half], direction),
        "second": _stack(panels[half:], direction),
        "splitPercentage": round(100 * half / len(panels), 2),
    }


def render(params: Path, namespace: str = "") -> dict[str, str]:
    """File name -> text of every viewer config for this params YAML."""
    settings, names = load_settings(params, namespace=namespace)
    stem = params.stem if not namespace else f"{params.stem}.{namespace.strip('/')}"
    header = (
        f"# rviz2 for the oxygen node with {params.name}"
        + (f" in namespace {namespace}" if namespace else "")
        + f" (robot {settings.node.robot}).\n"
        "# Generated by oxygen-config viewers; regenerate rather than edit.\n"
    )
    return {
        f"{stem}.rviz": header + yaml.safe_dump(rviz_config(names), sort_keys=False),
        f"{stem}.perspective": json.dumps(rqt_perspective(names), indent=2) + "\n",
        f"{stem}.foxglove.json": json.dumps(
            foxglove_layout(names, settings.node.joint_names), indent=2
        )
        + "\n",
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-config viewers", description=__doc__.split("\n\n")[0].strip()
    )
    parser.add_argument("--params", type=Path, nargs="+", required=True, help="params YAMLs")
    parser.add_argument("--namespace", default="", help="the node's namespace")
    parser.add_argument("--out", type=Path, required=True, help="folder to write into")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-config viewers`."""
    args = _parser().parse_args(argv)
    try:
        files = {}
        for params in args.params:
            files |= render(params, args.namespace)
    except (OSError, ValueError) as error:
        print(f"oxygen-config viewers: {error}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text)
        print(args.out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
