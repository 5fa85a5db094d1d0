"""Recovery data (oxygen-train-dagger): the expert taking over from wherever a policy left
the arm, its labels on a real closed loop, and oxygen-train continuing a checkpoint on
them."""

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from oxygen_core.config import model_preset, robot_preset
from oxygen_core.engine import EngineConfig, make_engine
from oxygen_core.policy import load_policy
from oxygen_core.sim import arm
from oxygen_core.sim.expert import SPEED, Expert
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.tasks import make_task
from oxygen_core.train import cli, dagger
from oxygen_core.train import dataset as D
from oxygen_core.train.records import expert_episode

DT = 0.05
H = 10
POLICY = Path(__file__).resolve().parents[1] / "data" / "policy" / "sim_demo"
ROBOT = robot_preset("sim")
CFG = ROBOT.apply(model_preset("demo"))


def _started(family: str = "pick", seed: int = 4, steps: int = 30):
    """An expert `steps` control steps into its own episode, and its world."""
    task = make_task(family, seed)
    world = task.new_world()
    expert = Expert(task, world)
    for _ in range(steps):
        world.step(expert.act(world, DT).targets, DT)
    return task, world, expert


def _grip(targets: np.ndarray) -> np.ndarray:
    return arm.forward(np.asarray(targets, np.float64)).grip


def test_a_chunk_from_the_start_is_the_experts_own_first_h_commands():
    task = make_task("put", 7)
    world = task.new_world()
    chunk = dagger.expert_chunk(Expert(task, world), world, H, DT)
    own = expert_episode("put", 7, horizon=H, camera_size=16)[0].actions
    np.testing.assert_allclose(chunk, own, atol=1e-6)


def test_a_chunk_moves_neither_the_expert_nor_the_world():
    _, world, expert = _started()
    before = copy.deepcopy((expert, world))
    dagger.expert_chunk(expert, world, H, DT)
    np.testing.assert_array_equal(world.joints, before[1].joints)
    np.testing.assert_array_equal(expert._point, before[0]._point)
    assert expert._index == before[0]._index
    # ... and the expert goes on exactly as if no chunk had been asked for.
    np.testing.assert_array_equal(
        expert.act(world, DT).targets, before[0].act(before[1], DT).targets
    )


def test_taking_over_starts_from_the_arm_not_from_the_setpoint():
    _, world, expert = _started()
    goal = expert._goal.copy()
    # Someone else drove the arm 8 cm sideways and 3 cm down, still top-down.
    moved = world.pose.grip + np.array([0.0, 0.08, -0.03])
    world.joints = arm.inverse_top_down(moved, 0.3, 1.0)
    world.pose = arm.forward(world.joints)
    labels = dagger.expert_chunk(expert, world, H, DT)
    first = _grip(labels[0])
    assert np.linalg.norm(first - world.pose.grip) <= SPEED * DT + 1e-6
    assert np.linalg.norm(first - goal) < np.linalg.norm(world.pose.grip - goal)
    # The shadow's own setpoint, not taken over, is where the labels would have jumped.
    assert np.linalg.norm(_grip(expert.act(world, DT).targets) - world.pose.grip) > 0.05


def test_an_arm_out_of_top_down_reach_gets_no_label():
    _, world, expert = _started()
    world.joints = world.joints.copy()
    world.joints[2] -= 1.0  # the arm stretched up and out of reach
    world.pose = arm.forward(world.joints)
    taken = copy.deepcopy(expert)
    taken.take_over(world)
    with pytest.raises(arm.Unreachable):
        taken.act(world, DT)
    assert dagger.expert_chunk(expert, world, H, DT) is None


@pytest.fixture(scope="module")
def engine():
    """The shipped policy, actions only: its own errors are what recovery data is for."""
    policy = load_policy("demo", "sim", POLICY, POLICY / cli.TOKENIZER_FILE)
    return make_engine(policy, EngineConfig(streams=()))


@pytest.mark.slow
def test_every_label_of_a_closed_loop_starts_where_the_arm_is(engine):
    records, _ = dagger.policy_episode(engine, "push", 3, 2, Renderer(128, 128))
    task = make_task("push", 3)
    assert 0 < len(records) <= int(round(task.time_limit / DT)) // 2
    assert {r.episode for r in records} == {"dagger/push/3"}
    assert all(r.narration and r.obs.prompt == task.instruction for r in records)
    assert all(len(r.grounding) == 2 for r in records)
    for r in records:  # one step of the expert's segment from the arm, not a jump
        assert np.linalg.norm(_grip(r.actions[0]) - _grip(r.obs.state)) <= SPEED * DT + 1e-4
    chunks = np.stack([r.actions for r in records])
    assert chunks.shape == (len(records), H, 7) and np.all(np.isfinite(chunks))


def test_oxygen_train_continues_a_checkpoint_with_its_norm_stats_and_tokenizer(tmp_path):
    data = D.collect(expert_episode("pick", 2, horizon=H, camera_size=32)[::8], CFG)
    extra = tmp_path / "extra.npz"
    data.save(extra)
    args = cli._train_parser().parse_args(
        ["--out", "unused", "--episodes", str(extra), "--add-episodes", str(extra),
         "--init-from", str(POLICY)]
    )  # fmt: skip
    assert len(cli._episodes(args, CFG)) == 2 * len(data)
    base = cli.base_policy(args)
    other = dataclasses.replace(data, episode=[f"{e}-b" for e in data.episode])
    prep = cli.prepare(CFG, ROBOT, D.concat([data, other]), 2, base=base)  # one held out
    assert prep.tokenizer_bytes == (POLICY / cli.TOKENIZER_FILE).read_bytes()
    for ours, theirs in (
        (prep.norm.state, base.norm.state),
        (prep.norm.actions, base.norm.actions),
    ):
        np.testing.assert_array_equal(ours.q01, theirs.q01)
        np.testing.assert_array_equal(ours.q99, theirs.q99)
    assert cli.initial_params(CFG, args, base) is base.params
