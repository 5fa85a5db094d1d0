"""Recovery data (oxygen-train dagger): the expert taking over from where a trained
policy left the arm, and oxygen-train continuing a checkpoint on those episodes."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from oxygen_core.config import ROBOT_PRESETS, model_preset, robot_preset
from oxygen_core.engine import EngineConfig, make_engine
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import TOKENIZER_FILE, TRAIN_CONFIG
from oxygen_core.model.normalize import NormStats, identity_stats
from oxygen_core.model.tokenizer import load_tokenizer
from oxygen_core.robot_spec import declaration, declared_robot
from oxygen_core.sim import arm
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.tasks import make_task
from oxygen_core.train import checkpoints, cli, dagger, prepare
from oxygen_core.train import dataset as D
from oxygen_core.train.records import Dart, expert_episode

DT = 0.05
H = 10
POLICY = Path(__file__).resolve().parents[1] / "data" / "policy" / "sim_demo"
META = json.loads((POLICY / TRAIN_CONFIG).read_text())
ROBOT = robot_preset(META["robot"])
CFG = ROBOT.apply(model_preset("demo"))


def test_the_handover_step_is_in_the_first_half_and_fixed_by_the_seed():
    steps = int(round(make_task("put", 0).time_limit / DT))
    drawn = [dagger.handover_step("put", s) for s in range(200)]
    assert min(drawn) >= 1 and max(drawn) <= steps // 2
    assert len(set(drawn)) > 50
    assert drawn == [dagger.handover_step("put", s) for s in range(200)]


def test_the_expert_takes_over_from_a_world_another_controller_left():
    task = make_task("pick", 4)
    world = task.new_world()
    # Somewhere the expert never goes: 10 cm off to the side and low, wrist turned, the
    # gripper half closed on nothing.
    point = world.objects[task.target].centre + np.array([0.0, 0.10, 0.04])
    world.joints = arm.inverse_top_down(point, 0.7, 0.4)
    world.pose = arm.forward(world.joints)
    start = world.joints.copy()
    records = expert_episode("pick", 4, H, 32, world=world, name="recover/pick/4")
    assert records and {r.episode for r in records} == {"recover/pick/4"}
    np.testing.assert_allclose(records[0].obs.state, start, atol=1e-6)
    assert task.verdict(world) is True  # the records are kept only when it succeeds
    assert records[0].narration == "moving to the " + task.objects[task.target].name


def test_an_arm_the_expert_cannot_plan_from_is_a_failed_episode():
    task = make_task("pick", 4)
    world = task.new_world()
    world.joints = world.joints.copy()
    world.joints[2] -= 1.0  # stretched up and out of top-down reach
    world.pose = arm.forward(world.joints)
    assert expert_episode("pick", 4, H, 32, world=world) == []


@pytest.fixture(scope="module")
def engine():
    """The shipped policy, actions only: its own mistakes are what the data is for. A
    fixed hand-over delay: "auto" follows the wall-clock latency, which varies with load."""
    policy, _ = checkpoints.trained_policy(POLICY)
    return make_engine(policy, EngineConfig(streams=(), rtc_delay_steps=1))


def test_a_closed_loop_can_stop_after_a_number_of_steps(engine):
    outcome = dagger.rollout.run_episode(engine, "push", 3, 2, Renderer(32, 32), max_steps=9)
    assert outcome.steps == 9 and not outcome.success


@pytest.mark.slow
def test_a_recovery_episode_starts_where_the_policy_left_the_arm(engine):
    renderer = Renderer(128, 128)
    engine.restart()
    records = dagger.recovery_episode(engine, "pick", 3, 2, renderer, 128)
    assert records and {r.episode for r in records} == {"recover/pick/3"}
    # The same policy run alone for handover_step steps leaves the arm where they start.
    engine.restart()
    world = make_task("pick", 3).new_world()
    start = world.joints.copy()
    steps = dagger.handover_step("pick", 3)
    dagger.rollout.run_episode(engine, "pick", 3, 2, renderer, max_steps=steps, world=world)
    np.testing.assert_allclose(records[0].obs.state, world.joints, atol=1e-6)
    assert not np.allclose(world.joints, start)
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
    assert len(prepare.episodes(args, CFG)) == 2 * len(data)
    base = cli.base_policy(args)
    other = dataclasses.replace(data, episode=[f"{e}-b" for e in data.episode])
    prep = prepare.prepare(CFG, ROBOT, D.concat([data, other]), 2, base=base)  # one held out
    assert prep.tokenizer_bytes == (POLICY / TOKENIZER_FILE).read_bytes()
    for ours, theirs in (
        (prep.norm.state, base.norm.state),
        (prep.norm.actions, base.norm.actions),
    ):
        np.testing.assert_array_equal(ours.q01, theirs.q01)
        np.testing.assert_array_equal(ours.q99, theirs.q99)
    assert cli.initial_params(CFG, args, base) is base.params


def test_a_later_stage_trains_on_seeds_the_earlier_ones_never_saw(tmp_path):
    """--first-seed: the expert's episodes start there, cached apart from seeds 0..N-1
    and from the same seeds of other task families."""
    common = ["--out", "unused", "--work", str(tmp_path), "--families", "pick",
              "--seeds", "1", "--camera-size", "32", "--workers", "1"]  # fmt: skip
    later = cli._train_parser().parse_args([*common, "--first-seed", "7"])
    assert set(prepare.episodes(later, CFG).episode) == {"pick/7"}
    assert [p.name for p in tmp_path.iterdir()] == ["episodes-7+1-pick-32-64-1.npz"]
    first = cli._train_parser().parse_args(common)
    assert set(prepare.episodes(first, CFG).episode) == {"pick/0"}
    push = cli._train_parser().parse_args([*common, "--families", "push"])
    assert set(prepare.episodes(push, CFG).episode) == {"push/0"}
    with pytest.raises(SystemExit):
        cli.train_main([*common, "--first-seed", str(prepare.SCENE_FIRST_SEED)])


def test_episodes_only_writes_one_familys_episodes_for_another_runs_add_episodes(tmp_path, capsys):
    """More push scenes than pick and put: a push-only file that a stage adds."""
    common = ["--work", str(tmp_path), "--seeds", "1", "--camera-size", "32", "--workers", "1"]
    with pytest.raises(SystemExit):  # a training run needs --out
        cli.train_main([*common, "--families", "push"])
    cli.train_main([*common, "--episodes-only", "--families", "push", "--first-seed", "7"])
    written = Path(capsys.readouterr().out.strip())
    assert written.parent == tmp_path and written.exists()
    args = cli._train_parser().parse_args(
        [*common, "--out", "unused", "--families", "pick", "--add-episodes", str(written)]
    )
    assert sorted(set(prepare.episodes(args, CFG).episode)) == ["pick/0", "push/7"]
    one = [*common, "--families", "push", "--first-seed", "7", "--out", str(tmp_path / "ck")]
    with pytest.raises(SystemExit, match="1 episodes hold none out for validation"):
        cli.train_main(one)


def test_seeds_the_expert_fails_on_all_give_a_clear_error():
    """Push seed 3 with DART: the expert's push misses, the episode is dropped."""
    with pytest.raises(ValueError, match=r"the expert completed none of 1 episodes"):
        D.generate_sim(["push"], range(3, 4), CFG, 32, Dart())


def test_a_checkpoint_continues_as_its_robot_with_a_plan_stage():
    """sim_plan is sim_grip plus the plan stage: same cameras and spaces, so a sim_grip
    checkpoint may continue as sim_plan (and back); sim (joint actions) may not."""
    grip, plan, sim = (robot_preset(name) for name in ("sim_grip", "sim_plan", "sim"))
    assert checkpoints.same_io(grip, plan) and checkpoints.same_io(plan, grip)
    assert not checkpoints.same_io(grip, sim) and not checkpoints.same_io(plan, sim)


def test_init_from_a_checkpoint_of_another_robot_is_refused():
    other = "sim" if META["robot"] != "sim" else "sim_grip"
    args = cli._train_parser().parse_args(
        ["--out", "unused", "--robot", other, "--init-from", str(POLICY)]
    )
    with pytest.raises(SystemExit, match=f"--robot {META['robot']}; this run is"):
        cli.base_policy(args)


@pytest.mark.parametrize("preset", sorted(ROBOT_PRESETS))
def test_a_robots_declaration_reads_back_to_the_same_robot(preset):
    robot = dataclasses.replace(ROBOT_PRESETS[preset], name="declared")
    assert declared_robot("declared", declaration(robot), "test") == robot


def test_a_checkpoint_of_a_declared_robot_loads_and_continues_without_its_params(tmp_path):
    """A robot declared as data (config/metaworld.yaml's) is recorded in the checkpoint's
    train_config.json: oxygen-eval in-process, averaging and --init-from load it with no params
    file, and a run of another robot may not continue it."""
    robot = declared_robot(
        "arm4", {"cameras": ["base_0_rgb"], "action_dim": 4, "state_dim": 4, "action_horizon": 4},
        "test",
    )  # fmt: skip
    ckpt = tmp_path / "ck"
    args = cli.train_args(["--out", str(ckpt), "--preset", "tiny"])
    args.robot_config, args.robot = robot, robot.name
    cfg = robot.apply(model_preset("tiny"))
    norm = NormStats(state=identity_stats(4), actions=identity_stats(cfg.action_dim))
    checkpoints.write_checkpoint(ckpt, P.to_runtime(P.init_params(cfg, 0)), norm, robot.name)
    (ckpt / TOKENIZER_FILE).write_bytes(load_tokenizer().model_proto)
    (ckpt / TRAIN_CONFIG).write_text(json.dumps(cli.run_fields(args)))
    policy, meta = checkpoints.trained_policy(ckpt)
    assert policy.robot == robot and meta["robot"] == "arm4"
    args.init_from = str(ckpt)
    assert cli.base_policy(args).robot == robot
    args.robot_config = dataclasses.replace(robot, action_horizon=8)
    with pytest.raises(SystemExit, match="--robot arm4; this run is"):
        cli.base_policy(args)
