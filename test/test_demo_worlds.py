"""oxygen-demo --world W: each world's demo runs the policy trained here for that world, on
params its evaluation accepts, at the camera size the policy was trained on.

What this guards: a retrained policy (another camera size, another checkpoint folder) or a
reworded params file that the demo would only find wrong after its node had compiled.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oxygen_ros.tools import aloha_eval
from oxygen_ros.tools.configure import load_settings
from oxygen_ros.tools.demo import WORLD_DEMOS
from oxygen_ros.tools.sim import evaluate

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.ros


@pytest.mark.parametrize("world", sorted(WORLD_DEMOS))
def test_each_world_demo_runs_a_policy_trained_here_at_its_camera_size(world, monkeypatch):
    demo = WORLD_DEMOS[world]
    monkeypatch.chdir(ROOT)  # the params' checkpoint paths are relative to the node's folder
    settings, names = load_settings(demo.params)
    checkpoint = Path(settings.node.checkpoint_dir)
    assert (checkpoint / "params").is_dir(), f"{demo.params}: no trained checkpoint"
    trained = json.loads((checkpoint / "train_config.json").read_text())
    assert trained["camera_size"] == demo.camera_size
    assert trained["preset"] == settings.node.preset
    # The world's own check of the robot's wiring, as its evaluation makes it first.
    if world == "tabletop":
        evaluate.check_params(names, settings.node.joint_names, settings.node.joint_trajectory)
    else:
        aloha_eval.check_params(settings, names)
