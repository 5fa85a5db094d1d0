"""Image-free baselines through the in-process closed loop, the seed protocol and the
Wilson interval every closed-loop report gives (oxygen_core.sim.baselines, seeds,
success; oxygen-eval in-process --baseline)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from oxygen_core.safety.limits import limits_from_files
from oxygen_core.sim import arm, seeds
from oxygen_core.sim.baselines import make_baseline
from oxygen_core.sim.episode import Tabletop, TabletopSettings
from oxygen_core.sim.executor import CONTROLLERS
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.scripting import course, held_shape, parse_instruction
from oxygen_core.sim.success import SuccessRate
from oxygen_core.sim.tasks import FAMILIES, make_task
from oxygen_core.train import cli, dagger, evaluate, rollout
from oxygen_core.train.baseline_actor import BaselineActor
from oxygen_ros.tools.sim.loop import SimConfig, SimLoop

ROOT = Path(__file__).resolve().parents[1]
LIMITS = limits_from_files(arm.JOINT_NAMES, ROOT / "config" / "sim_demo.yaml")


@pytest.mark.parametrize(
    ("successes", "episodes", "low", "high"),
    # Published Wilson 95 % intervals (Newcombe 1998, table I: 81/263, 15/148, 0/20).
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611)],
)
def test_the_success_interval_is_wilsons(successes, episodes, low, high):
    got = SuccessRate(successes, episodes).interval()
    assert got == pytest.approx((low, high), abs=1e-4)


def test_all_successes_reach_one_and_a_report_line_names_count_rate_and_interval():
    assert SuccessRate(20, 20).interval()[1] == 1.0
    assert SuccessRate(32, 50).text() == "32/50 (64 %, 50-76)"


def test_dev_and_test_seeds_are_apart_from_each_other_and_every_seed_used_before():
    used = [range(0, 20_000), range(100_000, 100_200), range(200_000, 200_002)]
    used.append(range(300_000, 300_050))
    for span in used:
        assert seeds.evaluation_overlap(span) is None
    assert not set(seeds.DEV) & set(seeds.TEST)
    assert seeds.range_name(range(400_000, 400_050)) == "dev"
    assert seeds.range_name(range(500_950, 501_000)) == "test"
    assert seeds.range_name(range(100_000, 100_050)) == "other"
    assert seeds.range_name(range(400_990, 401_010)) == "other"  # runs past dev's end


def test_training_and_dagger_refuse_evaluation_seeds_in_one_line(capsys):
    with pytest.raises(ValueError, match="reach into the test seeds 500000-500999"):
        seeds.check_not_evaluation(range(499_990, 500_010), "expert seeds")
    with pytest.raises(SystemExit):
        cli.train_args(["--out", "x", "--ground-scenes", "395000"])
    assert "reach into the dev seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        dagger.main(["--checkpoint", "x", "--out", "y", "--first-seed", "400000"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("which training must never see") and "recovery seeds" in err


def test_the_blind_baseline_reads_family_shape_and_direction_never_colour():
    for family in FAMILIES:
        task = make_task(family, 3)
        shape = task.objects[task.target].shape
        assert parse_instruction(task.instruction) == (family, shape, task.direction)
    with pytest.raises(ValueError, match="not a sim task's instruction"):
        parse_instruction("fetch the red block")
    with pytest.raises(ValueError, match="unknown baseline 'smart'"):
        make_baseline("smart")


def test_the_gripper_joint_tells_the_shape_it_holds():
    assert held_shape(0.48) is None  # shut on nothing
    assert held_shape(0.5) == "block" and held_shape(0.55) == "ball"


def test_courses_keep_every_joint_under_its_velocity_limit():
    rows = course(arm.HOME, [(np.array([0.45, -0.2, 0.02]), 0.0), (np.array([0.3, 0.2, 0.1]), 1.0)])
    speeds = np.abs(np.diff(np.vstack([arm.HOME, rows]), axis=0)) / 0.05
    assert np.all(speeds <= arm.VELOCITY_LIMITS + 1e-9)


@pytest.mark.parametrize(("family", "seed"), [("push", 9), ("pick", 7)])
@pytest.mark.parametrize("controller", CONTROLLERS)
def test_the_blind_baseline_solves_a_scene_through_the_gated_closed_loop(family, seed, controller):
    """Its courses keep every step within the velocity limits: nothing is slowed between
    linear segments. Cubic ones ("jtc") can be faster between two points than either step
    of a course at its limit, so the gate may slow those chunks; it rejects none."""
    actor = BaselineActor("blind", execute=2, horizon=10)
    out = rollout.run_episode(
        actor, family, seed, 2, Renderer(16, 16), limits=LIMITS, controller=controller
    )
    assert out.success and out.texts == ()
    frames = out.steps // 2 + out.steps % 2
    if controller == "jtc_replacement":
        assert out.gate.outcomes["passed"] == frames  # nothing slowed
    assert out.gate.outcomes["rejected"] == 0 and sum(out.gate.outcomes.values()) == frames
    assert out.limits.position == out.limits.velocity == 0


def test_holding_still_keeps_the_arm_home_and_fails(tmp_path):
    report = tmp_path / "hold.json"
    evaluate.main(["--baseline", "hold", "--families", "push", "--episodes", "1",
                   "--camera-size", "16", "--json", str(report)])  # fmt: skip
    data = json.loads(report.read_text())
    assert data["run"] == "hold"
    assert data["seeds"] == {"first": 400_000, "last": 400_000, "range": "dev"}
    push = data["summary"]["push"]
    assert (push["successes"], push["episodes"]) == (0, 1)
    assert push["success_ci95"] == pytest.approx([0.0, 0.7935], abs=1e-4)
    assert data["episodes"][0]["steps"] == 180  # the whole time limit (9 s)


def test_train_eval_needs_a_checkpoint_or_a_baseline(capsys):
    with pytest.raises(SystemExit):
        evaluate.main(["--families", "push"])
    assert "give --checkpoint or --baseline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        evaluate.main(["--baseline", "hold", "--with-baselines"])
    assert "--with-baselines runs them next to a --checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("controller", CONTROLLERS)
@pytest.mark.parametrize(("family", "seed"), [("push", 9), ("pick", 7)])
def test_a_baseline_the_sim_runs_equals_the_in_process_one(family, seed, controller):
    """oxygen-sim (policy: blind) sends the same chunks at the same ticks, shaped for its
    controller, as the in-process loop does, so the episode ends the same way at the same
    step, under either model of the trajectory controller. The sim has no chunk gate, so
    neither has the reference (the gated loop is tested above)."""
    actor = BaselineActor("blind", execute=2, horizon=10)
    reference = rollout.run_episode(
        actor, family, seed, 2, Renderer(16, 16), limits=None, controller=controller
    )
    settings = TabletopSettings(camera_size=16, baseline_execute_steps=2, controller=controller)
    loop = SimLoop(Tabletop(settings), SimConfig(((family, seed),), "blind"), _Discard())
    while loop.tick():
        pass
    (outcome,) = loop.outcomes
    assert (outcome.success, outcome.steps) == (reference.success, reference.steps)
    assert repr(outcome.contacts) == repr(reference.contacts)  # nan: never released
    assert outcome.rejected == {} and outcome.limits == reference.limits


class _Discard:
    """A SimPort that drops what the sim publishes."""

    def publish(self, key, msg, time_ns) -> None:
        pass
