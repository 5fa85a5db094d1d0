"""oxygen-config viewers: the shipped viewer configs are what the generator makes now.

Each robot's params YAML yields an rviz config, an rqt perspective and a Foxglove layout
whose topics are the node's own (cameras in slot order, `~/` names under the node and its
namespace). config/viewers/ must equal a fresh generation, so a changed YAML or topic name
cannot leave a stale viewer config behind.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from oxygen_ros import topics
from oxygen_ros.tools import viewer_configs
from oxygen_ros.tools.foxglove import bridged_topics

pytestmark = pytest.mark.ros  # load_settings reads the YAML with rclpy

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = sorted((ROOT / "config").glob("*.yaml"))
SHIPPED = ROOT / "config" / "viewers"


def _params(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["/**"]["ros__parameters"]


@pytest.mark.parametrize("params", ROBOTS, ids=lambda p: p.stem)
def test_shipped_configs_match_a_fresh_generation(params):
    for name, text in viewer_configs.render(params).items():
        assert (SHIPPED / name).read_text() == text, (
            f"config/viewers/{name} is stale: run oxygen-config viewers "
            "--params config/*.yaml --out config/viewers"
        )


def test_every_shipped_file_comes_from_a_robot_config():
    expected = {n for params in ROBOTS for n in viewer_configs.render(params)}
    assert {p.name for p in SHIPPED.iterdir()} == expected


@pytest.mark.parametrize("params", ROBOTS, ids=lambda p: p.stem)
def test_rviz_shows_each_camera_in_slot_order_and_the_markers(params):
    rviz = yaml.safe_load((SHIPPED / f"{params.stem}.rviz").read_text())
    displays = rviz["Visualization Manager"]["Displays"]
    images = [d for d in displays if d["Class"] == "rviz_default_plugins/Image"]
    shown = [
        d["Topic"]["Value"] + ("/compressed" if "Transport Hint" in d["Topic"] else "")
        for d in images
    ]
    assert shown == _params(params)["camera_topics"]
    markers = [d for d in displays if d["Class"] == "rviz_default_plugins/MarkerArray"]
    assert [m["Topic"]["Value"] for m in markers] == ["/oxygen/markers"]


def test_a_namespace_moves_the_nodes_topics_not_absolute_cameras():
    files = viewer_configs.render(ROOT / "config" / "tiny.yaml", namespace="arm1")
    assert set(files) == {"tiny.arm1.rviz", "tiny.arm1.perspective", "tiny.arm1.foxglove.json"}
    rviz = yaml.safe_load(files["tiny.arm1.rviz"])
    topics = [d["Topic"]["Value"] for d in rviz["Visualization Manager"]["Displays"][1:]]
    assert topics == [
        "/arm1/oxygen/markers",
        *_params(ROOT / "config" / "tiny.yaml")["camera_topics"],
    ]
    perspective = json.loads(files["tiny.arm1.perspective"])
    plot = perspective["groups"]["pluginmanager"]["groups"]["plugin__rqt_plot__Plot__1"]
    assert ast.literal_eval(plot["groups"]["plugin"]["keys"]["topics"]["repr"]) == [
        "/arm1/oxygen/stats/frame_s",
        "/arm1/oxygen/stats/budget_s",
    ]


def test_rqt_perspective_runs_the_robot_monitor_and_one_plot_per_group():
    perspective = json.loads((SHIPPED / "tiny.perspective").read_text())
    manager = perspective["groups"]["pluginmanager"]
    running = ast.literal_eval(manager["keys"]["running-plugins"]["repr"])
    assert running == {"rqt_robot_monitor/RobotMonitor": [1], "rqt_plot/Plot": [1, 2, 3]}
    assert set(manager["groups"]) == {
        "plugin__rqt_robot_monitor__RobotMonitor__1",
        "plugin__rqt_plot__Plot__1",
        "plugin__rqt_plot__Plot__2",
        "plugin__rqt_plot__Plot__3",
    }


def _leaves(tree) -> list[str]:  # noqa: ANN001 (a panel id or a split)
    if isinstance(tree, str):
        return [tree]
    return _leaves(tree["first"]) + _leaves(tree["second"])


@pytest.mark.parametrize("params", ROBOTS, ids=lambda p: p.stem)
def test_foxglove_layout_places_every_panel_once_on_a_bridged_topic(params):
    from oxygen_ros.tools.configure import load_settings

    layout = json.loads((SHIPPED / f"{params.stem}.foxglove.json").read_text())
    panels = layout["configById"]
    assert sorted(_leaves(layout["layout"])) == sorted(panels)
    _, names = load_settings(params)
    served = set(bridged_topics(names))
    images = [c["imageMode"]["imageTopic"] for k, c in panels.items() if k.startswith("Image!")]
    assert images == list(names.cameras)
    paths = [p["value"] for k, c in panels.items() if k.startswith("Plot!") for p in c["paths"]]
    joints = _params(params)["joint_names"]
    assert len(paths) == len(joints) + sum(len(g) for g in viewer_configs.STATS_PLOTS)
    assert {p.split(".")[0] for p in paths} <= served
    texts = {c["topicPath"].removesuffix(".data") for k, c in panels.items() if "Raw" in k}
    assert texts == set(names.per_stream(topics.TEXT).values()) and texts <= served
