"""oxygen-eval node --world aloha (tools.aloha_eval on tools.task_eval): ALOHA episodes
through the sim node over topics, reported; its params file wired as config/aloha.yaml
wires a real ALOHA, with the sim's position ranges; bad input fails in one line first.

The expected outcome of the run over topics comes from the same episode driven without
ROS: the expert's recorded targets replayed in the joint-space env (MuJoCo is
deterministic, so the sim node's episode has the same success step).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("gym_aloha")

from oxygen_core.aloha.env import AlohaEnv  # noqa: E402
from oxygen_core.aloha.episode import (  # noqa: E402
    ACTION_NAMES,
    FROM_DESIRED,
    position_limits,
    to_controller,
    to_env,
)
from oxygen_core.aloha.expert import record, replay  # noqa: E402
from oxygen_core.sim.seeds import DEV  # noqa: E402
from oxygen_ros.tools import aloha_eval  # noqa: E402
from oxygen_ros.tools.closed_loop import success_entry  # noqa: E402
from oxygen_ros.tools.task_eval import TaskEvalSpec, load_checked, sim_parameters  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "config" / "sim.yaml"
pytestmark = pytest.mark.ros


def _params(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())["/**"]["ros__parameters"]


def test_the_sim_params_wire_the_robot_as_config_aloha_yaml_with_the_sims_ranges():
    sim, robot = _params("aloha_sim.yaml"), _params("aloha.yaml")
    assert sim["robots"][sim["robot"]]["base"] == robot["robot"]
    wiring = (
        "camera_topics", "joint_state_topic", "joint_names", "action_names",
        "controller_model", "controller_names", "controllers", "control_rate_hz",
        "interpolate_from_desired_state", "gate_seam_easing",
    )  # fmt: skip
    assert {k: sim[k] for k in wiring} == {k: robot[k] for k in wiring}
    ranges = position_limits(AlohaEnv("transfer_cube").physics)
    for name, (low, high) in zip(ACTION_NAMES, ranges, strict=True):
        mine, theirs = sim["joint_limits"][name], robot["joint_limits"][name]
        assert (mine["min_position"], mine["max_position"]) == pytest.approx((low, high))
        bounds = ("max_velocity", "max_acceleration", "max_jump")
        assert {k: mine[k] for k in bounds} == {k: theirs[k] for k in bounds}


def test_the_sim_runs_the_controllers_as_their_config_sets_them_and_the_node_knows():
    """Where each trajectory starts is the controllers' parameter: the sim's model, the
    ros2_control file and the node's params say the same."""
    config = yaml.safe_load((ROOT / "config/ros2_control/aloha_controllers.yaml").read_text())
    robot = _params("aloha.yaml")
    flags = {
        config[robot["controllers"][name]["topic"].split("/")[1]]["ros__parameters"][
            "interpolate_from_desired_state"
        ]
        for name in robot["controller_names"]
    }
    assert flags == {FROM_DESIRED} == {robot["interpolate_from_desired_state"]}


def test_the_node_is_switched_off_around_every_reset_and_a_baseline_is_not():
    """As on the tabletop: the sim switches the node's ~/enable off before each reset and
    on after the settle, so no chunk of one episode runs in the next."""
    settings, names = load_checked(aloha_eval.ALOHA, aloha_eval.ALOHA_SIM_PARAMS, {})
    model = sim_parameters(TaskEvalSpec(aloha_eval.ALOHA), names, settings)
    assert model["policy_enable_service"] == names.enable == "/oxygen/enable"
    hold = sim_parameters(TaskEvalSpec(aloha_eval.ALOHA, policy="hold"), names, settings)
    assert hold["policy_enable_service"] == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--tasks", "transfer_cube,insert"],
            "unknown task 'insert'; ALOHA's are transfer_cube, insertion",
        ),
        (["--policy", "touch"], None),  # argparse's own choices (exit 2)
        (
            ["--params", str(SIM)],
            f"{SIM}: not ALOHA params: joint_names must be the sim's state",
        ),
        (["--episodes", "0"], "--episodes must be >= 1, --first-seed >= 0 and --rtf > 0"),
    ],
)
def test_bad_input_fails_in_one_line_before_anything_runs(args, message, tmp_path, capsys):
    out = tmp_path / "out"
    if message is None:
        with pytest.raises(SystemExit):
            aloha_eval.main([*args, "--out", str(out)])
    else:
        assert aloha_eval.main([*args, "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"oxygen-eval node --world aloha: {message}"), err
        assert err.count("\n") == 1
    assert not out.exists()


@pytest.mark.slow
def test_an_expert_episode_over_topics_is_reported(tmp_path: Path, capsys):
    out = tmp_path / "eval"
    args = ["--policy", "expert", "--tasks", "transfer_cube", "--episodes", "1"]
    assert aloha_eval.main([*args, "--camera-size", "32", "--rtf", "8", "--out", str(out)]) == 0
    # The default first seed; the sim runs the targets in the controllers' units (their
    # round trip moves a gripper target by 1e-16, which can move a contact by a step).
    demo = record("transfer_cube", DEV.start)
    direct = replay("transfer_cube", DEV.start, to_env(to_controller(demo.targets)))
    assert direct.success
    report = json.loads((out / "report.json").read_text())
    (episode,) = report["episodes"]
    assert (episode["task"], episode["seed"], episode["max_steps"]) == (
        "transfer_cube", DEV.start, 300
    )  # fmt: skip
    assert (episode["success"], episode["success_step"]) == (True, direct.success_step)
    assert report["success"]["all"] == success_entry(1, 1)
    # Every target reached the controllers: one trajectory a step, none refused.
    counts = report["input_counts"]["all"]
    assert (counts["accepted"], counts["rejected"]) == (direct.success_step + 1, {})
    assert report["world"] == "aloha" and "node" not in report
    assert report["command"].startswith("oxygen-eval node --world aloha --params ")
    assert "| transfer_cube | 1/1 (100 %, 21-100) |" in (out / "report.md").read_text()
    assert "success per task on dev seeds: transfer_cube 1/1" in capsys.readouterr().out
    np.testing.assert_array_equal(report["seeds"], [DEV.start, DEV.start])
