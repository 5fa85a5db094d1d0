"""oxygen-eval node --world metaworld: Meta-World episodes through the sim node over
topics, alone and as oxygen-eval manifest's metaworld tasks on a local Ray.

The expected outcomes come from the same episodes run directly, without ROS: the task's
env reset to the seed and stepped with the scripted policy (MuJoCo is deterministic, so
the sim node's episode has the same success and steps). The hold baseline's outcome is
read from its own run's report and must reach the fleet's table unchanged.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from metaworld_harness import require_metaworld

require_metaworld()  # before anything imports mujoco

from oxygen_core.metaworld.env import Expert, MetaWorldEnv, Observation  # noqa: E402
from oxygen_core.metaworld.tasks import MT10_TASKS  # noqa: E402
from oxygen_core.sim.seeds import DEV  # noqa: E402
from oxygen_core.sim.success import SuccessRate  # noqa: E402
from oxygen_ros.tools import metaworld_eval  # noqa: E402
from oxygen_ros.tools.closed_loop import success_entry  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "config" / "sim.yaml"
METAWORLD = ROOT / "config" / "metaworld.yaml"
# The scripted policies' gains are above 1 on purpose (the env clips): not news here.
pytestmark = [pytest.mark.ros, pytest.mark.filterwarnings("ignore:Constant.*:UserWarning")]


def _expert_episode(task: str, seed: int) -> Observation:
    """The scripted policy's episode of `seed`, stepped directly: its last observation."""
    env, expert = MetaWorldEnv(task, camera_size=16), Expert(task)
    try:
        obs = env.reset(seed, render=False)
        while not obs.success and obs.steps < env.max_path_length:
            obs = env.step(expert.act(obs), render=False)
        return obs
    finally:
        env.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--tasks", "drawer-open-v3,drawer-opn-v3"],
            f"unknown task 'drawer-opn-v3'; Meta-World's are {', '.join(MT10_TASKS)}",
        ),
        (["--params", "nowhere.yaml"], "params file nowhere.yaml does not exist"),
        (
            ["--params", str(SIM)],
            f"{SIM}: not Meta-World params: joint_names must be the sim's state ['ee_x', "
            "'ee_y', 'ee_z', 'gripper']: ('joint_1', 'joint_2', 'joint_3', 'joint_4', "
            "'joint_5', 'joint_6', 'gripper')",
        ),
        (["--episodes", "0"], "--episodes must be >= 1, --first-seed >= 0 and --rtf > 0"),
        (
            ["--policy", "hold", "--delay-steps", "1"],
            "--delay-steps is a d >= 0 for the model's node (lockstep)",
        ),
        (
            ["--delay-steps", "1", "--set", "rtc_delay_steps=2"],
            "--delay-steps sets rtc_delay_steps: leave it out of --set",
        ),
    ],
)
def test_bad_input_fails_in_one_line_before_anything_runs(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    assert metaworld_eval.main([*args, "--out", str(out)]) == 1
    assert capsys.readouterr().err == f"oxygen-eval node --world metaworld: {message}\n"
    assert not out.exists()


@pytest.mark.slow
def test_an_expert_episode_over_topics_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    task, out = "drawer-open-v3", tmp_path / "eval"
    args = ["--policy", "expert", "--tasks", task, "--episodes", "1", "--camera-size", "32"]
    assert metaworld_eval.main([*args, "--rtf", "4", "--out", str(out)]) == 0
    direct = _expert_episode(task, DEV.start)  # the default first seed
    assert direct.success  # what the run is checked against is a success
    report = json.loads((out / "report.json").read_text())
    (episode,) = report["episodes"]
    assert (episode["task"], episode["seed"]) == (task, DEV.start)
    assert (episode["success"], episode["steps"]) == (direct.success, direct.steps)
    rate = success_entry(int(direct.success), 1)
    assert report["success"] == {task: rate, "all": rate}
    assert report["mean_steps_to_success"] == {task: direct.steps, "all": direct.steps}
    # Every scripted action reached the env as a one-row chunk: none held, none rejected.
    counts = report["input_counts"][task]
    assert (counts["held_steps"], counts["actions_malformed"]) == (0, 0)
    assert (counts["chunks_accepted"], counts["chunks_rejected"]) == (direct.steps + 1, {})
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    assert report["commit"].startswith(head.stdout.decode().strip())
    assert report["command"] == (
        f"oxygen-eval node --world metaworld --params {METAWORLD} --policy expert --tasks {task} "
        f"--episodes 1 --first-seed {DEV.start} --camera-size 32 --rtf 4 --out {out}"
    )
    assert (report["seed_range"], report["seeds"], report["policy"]) == (
        "dev", [DEV.start, DEV.start], "expert"
    )  # fmt: skip
    assert "node" not in report  # the expert runs without the node
    text = SuccessRate(int(direct.success), 1).text()
    assert f"| {task} | {text} | {float(direct.steps)} | 0 |" in (out / "report.md").read_text()
    assert f"success per task on dev seeds: {task} {text}" in capsys.readouterr().out
    assert (out / "output_bag" / "metadata.yaml").is_file() and (out / "sim.log").is_file()


@pytest.mark.slow
def test_metaworld_tasks_on_ray_fill_the_meta_world_table(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from oxygen_ros.tools.eval import cli  # imports ray

    task = "reach-v3"
    batch = {"task": task, "seeds": {"count": 1}, "rtf": 8, "camera_size": 32}
    manifest = {
        "inputs": {"metaworld": [batch]},
        "configurations": {
            "expert": {"params": str(METAWORLD), "policy": "expert"},
            "hold": {"params": str(METAWORLD), "policy": "hold"},
        },
    }
    path, out = tmp_path / "manifest.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(manifest))
    assert cli.main([str(path), "--out", str(out), "--no-progress"]) == 0
    folder = out / f"{task}-seeds{DEV.start}-{DEV.start}"
    runs: dict[str, Any] = {
        name: json.loads((folder / name / "report.json").read_text()) for name in ("expert", "hold")
    }
    direct = _expert_episode(task, DEV.start)
    assert (runs["expert"]["episodes"][0]["steps"], direct.success) == (direct.steps, True)
    (hold,) = runs["hold"]["episodes"]
    assert hold["held_steps"] == 0 and hold["chunks_accepted"] == hold["steps"] + 1
    summary = json.loads((out / "eval_report.json").read_text())
    table = (out / "eval_report.md").read_text()
    assert "## Meta-World success" in table
    assert "| task | expert (dev seeds) | hold (dev seeds) |" in table
    cells = []
    for name, report in runs.items():
        own = report["success"][task]
        pooled = summary["configurations"][name]["metaworld"][task]
        assert {k: pooled[k] for k in ("episodes", "successes", "rate")} == {
            k: own[k] for k in ("episodes", "successes", "rate")
        }
        assert pooled["ci95"] == pytest.approx(own["ci95"], abs=1e-4) and pooled["tasks"] == 1
        assert pooled["mean_steps_to_success"] == report["mean_steps_to_success"][task]
        cells.append(SuccessRate(own["successes"], own["episodes"]).text())
        marker = json.loads((folder / name / "task.json").read_text())
        assert marker["episodes"] == 1 and 1 <= marker["worker"]["domain_id"] <= 100
    assert f"| {task} | {cells[0]} | {cells[1]} |" in table
