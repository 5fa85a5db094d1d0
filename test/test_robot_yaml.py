"""A robot declared only in its params YAML (config/custom_arm.yaml), not in ROBOT_PRESETS,
runs as a preset does: offline replay of the bundled demo bag, and the node configured and
publishing over ROS. Its action_horizon of 8 (the tiny model's is 4) shows that the declared
robot, not a default one, reached the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rclpy
import yaml
from node_harness import Probe, SensorFaults, Spinners

from oxygen_core.config import ROBOT_PRESETS
from oxygen_ros.node import OxygenNode
from oxygen_ros.tools import replay
from oxygen_ros.tools.bagio import from_cdr, read_bag
from oxygen_ros.tools.configure import load_settings
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.topics import ACTION_CHUNK

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
CUSTOM, DEMO_BAG = ROOT / "config" / "custom_arm.yaml", ROOT / "data" / "demo_bag"
PARAMS = yaml.safe_load(CUSTOM.read_text())["/**"]["ros__parameters"]
DECLARED = PARAMS["robots"][PARAMS["robot"]]


def test_the_robot_is_declared_only_in_the_yaml():
    assert PARAMS["robot"] not in ROBOT_PRESETS and "base" not in DECLARED
    robot = load_settings(CUSTOM)[0].robot
    assert robot.name == PARAMS["robot"]
    assert (robot.action_horizon, robot.delta_actions) == (8, tuple(DECLARED["delta_actions"]))


def test_replay_of_the_demo_bag_publishes_the_declared_robots_chunks(tmp_path):
    out = tmp_path / "replay"
    argv = [str(DEMO_BAG), "--params", str(CUSTOM), "--out", str(out), "--no-progress"]
    assert replay.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] > 0 and report["frame_errors"] == 0
    assert report["horizon"] == DECLARED["action_horizon"]
    topic = load_settings(CUSTOM)[1].output(ACTION_CHUNK)
    chunks = [from_cdr(m.data, m.msgtype) for m in read_bag(out / OUTPUT_BAG, [topic])]
    assert len(chunks) == report["frames"]
    for chunk in chunks:  # the gate may slow a chunk to more rows than the horizon's 8
        assert chunk.horizon >= 8 and chunk.action_dim == DECLARED["action_dim"]
        assert np.isfinite(np.asarray(chunk.actions)).all()


def test_the_node_configures_and_runs_the_declared_robot():
    rclpy.init()
    spinners = Spinners()
    node = OxygenNode(cli_args=["--ros-args", "--params-file", str(CUSTOM)])
    probe = Probe(
        cameras=PARAMS["camera_topics"],
        joints=PARAMS["joint_names"],
        streams=PARAMS["stream_names"],
    )
    spinners.add(node)
    spinners.add(probe)
    try:
        assert probe.transition("configure", timeout_s=300) is True
        assert probe.transition("activate") is True
        probe.faults = SensorFaults()
        received = probe.inbox["/oxygen/action_chunk"].wait_count(3, timeout_s=60)
        for chunk in (r.msg for r in received):
            # 8 rows published from d on (the d before run while the chunk is computed)
            assert 1 <= chunk.horizon <= 8 and chunk.action_dim == DECLARED["action_dim"]
            assert list(chunk.joint_names) == PARAMS["joint_names"]
    finally:
        node.release()
        spinners.shutdown()
        rclpy.shutdown()
