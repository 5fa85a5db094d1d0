"""The scripted expert: it solves every family on fixed seeds and narrates what it does."""

import json

import numpy as np
import pytest

from oxygen_core.sim import arm, bench
from oxygen_core.sim.expert import Expert
from oxygen_core.sim.runner import run_expert, run_expert_episode
from oxygen_core.sim.tasks import FAMILIES, make_task


@pytest.mark.parametrize("family", FAMILIES)
def test_expert_succeeds_on_ten_seeds_per_family(family):
    results = run_expert((family,), list(range(10)))[family]
    assert [r.success for r in results] == [True] * 10
    limit = make_task(family, 0).time_limit
    assert all(0 < r.time_to_success < limit for r in results)


def test_put_narration_and_memory_lines():
    result = run_expert_episode("put", 0)
    assert result.instruction == "put the red block in the yellow bowl"
    assert result.narration == (
        "moving to the red block",
        "grasping the red block",
        "lifting the red block",
        "carrying the red block to the yellow bowl",
        "placing the red block in the yellow bowl",
    )
    assert result.memory == ("picked up the red block", "put the red block in the yellow bowl")


def test_pick_and_push_language():
    pick = run_expert_episode("pick", 0)
    assert pick.narration == (
        "moving to the yellow block",
        "grasping the yellow block",
        "lifting the yellow block",
    )
    assert pick.memory == ("picked up the yellow block",)
    push = run_expert_episode("push", 0)
    assert push.instruction == "push the yellow ball to the left"
    assert push.narration == (
        "moving behind the yellow ball",
        "lowering next to the yellow ball",
        "pushing the yellow ball to the left",
    )
    assert push.memory == ("pushed the yellow ball to the left",)


def test_expert_targets_are_reachable_joint_vectors_within_limits():
    task = make_task("put", 1)
    world = task.new_world()
    expert = Expert(task, world)
    low, high = arm.POSITION_LIMITS[:, 0], arm.POSITION_LIMITS[:, 1]
    for _ in range(200):
        step = expert.act(world, 0.05)
        assert step.targets.shape == (7,) and np.all((step.targets >= low) & (step.targets <= high))
        world.step(step.targets, 0.05)


def test_episodes_are_deterministic():
    assert run_expert_episode("push", 5) == run_expert_episode("push", 5)


def test_a_failed_grasp_is_retried():
    task = make_task("pick", 2)
    world = task.new_world()
    expert = Expert(task, world)
    moved = False
    for _ in range(400):
        step = expert.act(world, 0.05)
        # The first time the fingers start closing, slide the object out from under them.
        if not moved and step.narration.startswith("grasping") and step.targets[6] == 0.0:
            world.objects[task.target].position[:2] += [0.0, 0.05]
            moved = True
        world.step(step.targets, 0.05)
        if task.verdict(world) is True:
            break
    assert moved and task.verdict(world) is True


def test_sim_bench_reports_the_expert_on_a_named_seed_range(tmp_path, capsys):
    out = tmp_path / "bench.json"
    bench.main(["--episodes", "2", "--first-seed", "500000", "--renders", "0", "--json", str(out)])
    payload = json.loads(out.read_text())
    assert payload["seeds"] == {"first": 500000, "last": 500001, "range": "test"}
    assert {f: r["successes"] for f, r in payload["expert"].items()} == dict.fromkeys(FAMILIES, 2)
    assert "seeds 500000-500001 (test)" in capsys.readouterr().out
