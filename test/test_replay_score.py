"""Scored replay: the policy's chunks against the commands and texts a bag recorded.

The scoring arithmetic (oxygen_core.offline_score) and the bag reading
(oxygen_ros.tools.score_targets) are checked on hand-made bags whose errors are known
exactly; the shipped policy's score from data/sim_bag is checked against the in-process
open-loop check (oxygen_core.train.grounding.open_loop) on the episodes the bag was
recorded from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from std_msgs.msg import String

from oxygen_core.engine.types import ActionResult
from oxygen_core.offline_score import Chunk, word_f1
from oxygen_core.sim.episode import Tabletop
from oxygen_core.train import grounding
from oxygen_core.train.dataset import generate_sim
from oxygen_ros.convert import action_chunk_msg, joint_state_msg, ns_to_stamp, trajectory_msg
from oxygen_ros.pipeline import make_pipeline
from oxygen_ros.tools import replay
from oxygen_ros.tools.bagio import BagWriter, bag_topics
from oxygen_ros.tools.replay_job import Job
from oxygen_ros.tools.report import Recording
from oxygen_ros.tools.score_report import score_section
from oxygen_ros.tools.score_targets import ScoreSpec, load_targets
from oxygen_ros.tools.sim.loop import SimConfig

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
SIM_BAG, SIM_DEMO = ROOT / "data" / "sim_bag", ROOT / "config" / "sim_demo.yaml"
MS = 1_000_000
T0, PERIOD = 1000 * MS, 50 * MS
NAMES = ("j1", "gripper")


def at(k: int) -> int:
    """The k-th control tick of the hand-made bags."""
    return T0 + k * PERIOD


def command(k: int) -> tuple[float, float]:
    """(j1, gripper) commanded at tick k: task "a" (ticks 0..9, no command at 5) moves j1
    and closes the gripper at 5; task "b" (ticks 10..13) holds j1 at 5."""
    return (0.1 * k, 1.0 if k < 5 else 0.0) if k < 10 else (5.0, 0.0)


def write_bag(path: Path) -> None:
    """Commands (joints listed in another order than the chunk's), joint states,
    instruction changes at ticks 0 and 10, narration and memory lines."""
    with BagWriter(path) as bag:
        for k in [*range(5), *range(6, 14)]:
            j1, grip = command(k)
            rows = np.array([[grip, j1]])
            msg = trajectory_msg(["gripper", "j1"], rows, [0.0], stamp=ns_to_stamp(at(k)))
            bag.write_ros("/cmd", at(k), msg)
        for k in range(14):
            state = joint_state_msg(NAMES, [0.01 * k, 0.5], stamp=ns_to_stamp(at(k)), frame_id="")
            bag.write_ros("/joint_states", at(k), state)
        for k, text in [(0, "a"), (4, "a"), (10, "b")]:
            bag.write_ros("/instruction", at(k), String(data=text))
        bag.write_ros("/expert/narration", at(0), String(data="moving to the block"))
        bag.write_ros("/expert/narration", at(6), String(data="grasping it"))
        bag.write_ros("/expert/memory", at(9), String(data="picked up the block"))


def targets(bag: Path, spec: ScoreSpec | None = None):
    """The targets of a hand-made bag: chunks of columns NAMES, tasks from ticks 0 and 10."""
    return load_targets(
        bag,
        spec or ScoreSpec(),
        bag_topics(bag),
        names=NAMES,
        outputs=(),
        streams=("narration", "memory"),
        period_s=PERIOD * 1e-9,
        boundaries_ns=[at(0), at(10)],
        limits=None,
    )


@pytest.fixture(scope="module")
def hand_bag(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bags") / "hand"
    write_bag(path)
    return path


def chunk(k: int, offsets: list[tuple[float, float]]) -> Chunk:
    """A 3-row chunk from tick k: the commands of ticks k.. (task a's last held) plus
    `offsets`."""
    rows = [command(min(k + i, 9)) for i in range(3)]
    return Chunk(at(k), np.asarray(rows) + np.asarray(offsets))


def test_chunks_are_scored_per_joint_and_step_with_known_errors(hand_bag):
    chunks = [
        chunk(0, [(0.1, 0), (0.1, 0), (0.1, -0.8)]),  # j1 0.1 off; the gripper opens late
        chunk(8, [(0, 0), (0, 0), (0.3, 0.9)]),  # row 2 at tick 10: task a's last command held
        chunk(4, [(0, 0), (7, 7), (0, 0)]),  # row 1 at tick 5: no command, not scored
        chunk(20, [(9, 9)] * 3),  # after task b's last command: not scored
    ]
    said = [
        ("narration", at(0), "moving to the block"),
        ("narration", at(7), "grasping the block"),  # reference "grasping it"
        ("memory", at(3), ""),  # no memory line yet
        ("memory", at(10), "picked up the block"),  # task b has none yet
    ]
    score, scored = score_section(chunks, said, targets(hand_bag), "policy")
    assert (score["frames"], score["frames_scored"], len(scored)) == (4, 3, 3)
    assert score["rows_scored"] == [3, 2, 3]
    approx = pytest.approx
    assert score["mae"]["j1"] == approx([0.1 / 3, 0.05, 0.4 / 3])
    assert score["mse"]["j1"] == approx([0.01 / 3, 0.005, 0.1 / 3])
    assert score["mae"]["gripper"] == approx([0, 0, 1.7 / 3])
    assert score["mae_by_joint"]["j1"] == score["arm_mae"] == approx(0.6 / 8)
    assert score["first_row_mae"] == approx({"j1": 0.1 / 3, "gripper": 0.0})
    grip = score["grippers"]["gripper"]
    assert (grip["threshold"], grip["range"], grip["range_from"]) == (0.5, [0, 1], "commands")
    assert grip["agreement"] == approx(6 / 8)
    assert grip["agreement_by_step"] == approx([1, 1, 1 / 3])
    assert score["texts"]["narration"] == {
        "topic": "/expert/narration",
        "texts": 2,
        "exact": 0.5,
        "word_f1": approx((1 + 0.4) / 2),
    }
    assert score["texts"]["memory"] == {
        "topic": "/expert/memory",
        "texts": 2,
        "exact": 0.5,
        "word_f1": 0.5,
    }


def test_published_chunks_are_scored_from_their_messages_row_0_at_the_stamp(hand_bag):
    """What `--live` scores: the node's ~/action_chunk messages as the recording keeps them."""
    rec = Recording()
    for k, offset in [(0, 0.25), (6, -0.5)]:
        rows = np.asarray([command(k + i) for i in range(3)]) + [offset, 0.0]
        result = ActionResult(frame=k, actions=rows, prefill_s=0.0, denoise_s=0.0)
        stamp = ns_to_stamp(at(k))
        rec.add(
            action_chunk_msg(
                result,
                stamp=stamp,
                sequence=k,
                joint_names=NAMES,
                control_period_s=PERIOD * 1e-9,
                latency_s=0.0,
                deadline_met=True,
            )
        )
    score, _ = score_section(rec.published, [], targets(hand_bag), "published")
    assert score["chunks"] == "published" and score["rows_scored"] == [2, 2, 2]
    assert score["mae"]["j1"] == pytest.approx([0.375] * 3, abs=1e-6)
    assert score["mae"]["gripper"] == [0, 0, 0]


def test_word_f1_counts_shared_words_with_multiplicity():
    assert word_f1("Grasping the block.", "grasping the block") == 1.0
    assert word_f1("the the block", "the block") == pytest.approx(2 * (2 / 3) / (2 / 3 + 1))
    assert (word_f1("", ""), word_f1("", "a"), word_f1("a b", "c")) == (1.0, 0.0, 0.0)


def test_trajectory_targets_in_chunk_order_a_later_trajectory_replacing_the_rest(tmp_path):
    path = tmp_path / "bag"
    with BagWriter(path) as bag:
        rows = np.array([[1.0, 10], [2, 20], [3, 30]])
        first = trajectory_msg(["gripper", "j1"], rows, [0, 0.05, 0.1], stamp=ns_to_stamp(at(0)))
        bag.write_ros("/cmd", at(0), first)
        # a zero stamp: from its log time, replacing the first one's points from there on
        second = trajectory_msg(
            ["j1", "gripper"], np.array([[7.0, 0.7]]), [0.05], stamp=ns_to_stamp(0)
        )
        bag.write_ros("/cmd", at(1), second)
        bag.write_ros(
            "/cmd", at(2), trajectory_msg(["j1"], np.array([[5.0]]), [0], stamp=ns_to_stamp(at(2)))
        )
    found = targets(path, ScoreSpec(target="/cmd"))
    assert found.notes == ("/cmd: JointTrajectory lacks joints ['gripper'] (1 skipped)",)
    commands = found.commands
    assert (commands.topic, commands.kind) == ("/cmd", "trajectory")
    assert commands.series.times_ns.tolist() == [at(0), at(1), at(2)]
    assert commands.series.positions.tolist() == [[10, 1], [20, 2], [7, 0.7]]
    assert commands.skipped == {"JointTrajectory lacks joints ['gripper']": 1}


def test_joint_state_targets_are_the_next_states_each_in_the_task_it_was_measured_in(hand_bag):
    commands = targets(hand_bag, ScoreSpec(target="/joint_states")).commands
    series = commands.series
    assert commands.kind == "joint_state"
    assert series.times_ns.tolist() == [at(k) - PERIOD for k in range(14)]
    np.testing.assert_allclose(series.positions[:, 0], 0.01 * np.arange(14))
    assert series.segments.tolist() == [1] * 10 + [2] * 4
    # the state at tick 1 is what the command of tick 0 reached
    rows, valid = series.targets(at(0), 1, 3, PERIOD)
    np.testing.assert_allclose(rows[:, 0], [0.01, 0.02, 0.03])
    assert valid.all()


def test_a_named_topic_the_bag_lacks_fails_in_one_line_before_the_model_loads(tmp_path, capsys):
    argv = [str(SIM_BAG), "--params", str(SIM_DEMO), "--out", str(tmp_path / "o"), "--no-progress"]
    assert replay.main([*argv, "--target", "/robot/commands"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{SIM_BAG} has no topic /robot/commands (named by --target)" in err
    assert replay.main([*argv, "--target", "/sim/expert/narration"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "/sim/expert/narration" in err and "std_msgs/msg/String" in err
    assert replay.main([*argv, "--text-target", "narration=/sim/said"]) == 1
    assert "has no topic /sim/said (named by --text-target)" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_shipped_policy_scores_on_the_sim_bag_as_in_the_in_process_check(tmp_path):
    """data/sim_bag holds the expert's pick, put and push episodes of seed 0 (SimConfig's
    defaults but 112 px cameras), back to back from 1 s: record i at 1 s + i periods. A
    replay's frame f at tick t samples the record at t with the noise seeds (seed, f)."""
    job = Job.load(SIM_BAG, SIM_DEMO, tmp_path / "replay", score=ScoreSpec())
    pipeline = make_pipeline(job.settings)
    report = replay.replay_offline(job, progress=False, pipeline=pipeline)
    policy = pipeline.engine.policy
    data = generate_sim(("pick", "put", "push"), [0], policy.config, 112, dart=None)
    sim, period_ns = SimConfig(episodes=(("pick", 0),)), Tabletop().period_ns
    timeline, origin_ns = report["timeline"], job.ticks()[0]
    steps = {
        round((origin_ns + round(t * 1e9) - round(sim.start_s * 1e9)) / period_ns): f
        for t, f in zip(timeline["time_s"], timeline["frame"], strict=True)
    }
    steps = {i: f for i, f in steps.items() if i < len(data)}
    seed = job.settings.engine.seed
    expected = grounding.open_loop(policy, data, list(steps), [(seed, f) for f in steps.values()])

    score = report["score"]
    assert score["frames_scored"] == expected.chunks == len(steps)
    assert report["frames"] - 1 <= len(steps) <= report["frames"]  # the last may lie past it
    assert score["rows_scored"] == expected.rows.tolist()
    for k, joint in enumerate(score["joints"]):
        np.testing.assert_allclose(score["mae"][joint], expected.mae[:, k], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(score["mse"][joint], expected.mse[:, k], rtol=1e-5, atol=1e-9)
    assert score["arm_mae"] == pytest.approx(expected.mean(expected.mae, range(6)), rel=1e-5)
    assert (tmp_path / "replay" / "score.png").is_file()
    assert "## Open-loop score" in (tmp_path / "replay" / "report.md").read_text()
