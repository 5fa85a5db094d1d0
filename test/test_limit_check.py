"""oxygen-bag limit-check on hand-made bags with known violations: exact counts per kind.

Joint a has [-1, 1], 2 /s, 50 /s^2 and a jump of 0.3; joint b [-2, 2], 4 /s, 100 /s^2,
0.3. Trajectory 0 (from 1.0 s, 0.1 s apart) is within every limit. Trajectory 1 (from
1.15 s, joints listed b first) takes over between its points: the step into its first
point from trajectory 0's last commanded point (0.1 at 1.1 s) is 8 /s, its last step
7 /s, its last point 1.3 is outside [-1, 1], its accelerations around the seam are
+93.3, -93.3 and 60 /s^2, and its first point lies 0.4 from the joint state at 1.12 s
(the one at 1.2 s comes after its stamp and is not the one compared).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from std_msgs.msg import String

from oxygen_core.safety.limits import limits_from_files
from oxygen_ros.convert import joint_state_msg, ns_to_stamp, trajectory_msg
from oxygen_ros.tools import limit_check
from oxygen_ros.tools.bagio import BagWriter
from oxygen_ros.tools.limit_sampling import (
    STATE_MAX_AGE_S,
    JointSample,
    MeasuredStates,
    sampled,
)

pytestmark = pytest.mark.ros

MS = 1_000_000
TRAJECTORY, STATES = limit_check.DEFAULT_TOPICS
URDF = """<?xml version="1.0"?>
<robot name="two">
  <link name="base"/><link name="l1"/><link name="l2"/>
  <joint name="a" type="revolute"><parent link="base"/><child link="l1"/>
    <limit lower="-1" upper="1" velocity="2" effort="0"/></joint>
  <joint name="b" type="revolute"><parent link="l1"/><child link="l2"/>
    <limit lower="-2" upper="2" velocity="4" effort="0"/></joint>
</robot>
"""
BLOCK = """joint_limits:
  a: {max_acceleration: 50.0, max_jump: 0.3}
  b: {max_acceleration: 100.0, max_jump: 0.3}
"""


def _trajectory(writer: BagWriter, stamp_ns: int, names, rows) -> None:
    msg = trajectory_msg(names, np.array(rows), [0.0, 0.1, 0.2], stamp=ns_to_stamp(stamp_ns))
    writer.write_ros(TRAJECTORY, stamp_ns, msg)


def _state(writer: BagWriter, stamp_ns: int, a: float) -> None:
    msg = joint_state_msg(("a", "b"), np.array([a, 0.0]), stamp=ns_to_stamp(stamp_ns), frame_id="")
    writer.write_ros(STATES, stamp_ns, msg)


def _bag(tmp_path: Path, violations: bool = True, reset: bool = False) -> Path:
    bag = tmp_path / "bag"
    with BagWriter(bag, split_s=None) as writer:
        _state(writer, 900 * MS, 0.0)
        _trajectory(writer, 1000 * MS, ("a", "b"), [[0.0, 0.0], [0.1, 0.0], [0.2, 0.0]])
        if reset:  # an episode ended: the arm was moved home, whatever was commanded
            writer.write_ros(limit_check.RESET_TOPIC, 1110 * MS, String(data="reset"))
        if violations:
            _state(writer, 1120 * MS, 0.1)
            _trajectory(writer, 1150 * MS, ("b", "a"), [[0.0, 0.5], [0.0, 0.6], [0.0, 1.3]])
            _state(writer, 1200 * MS, 5.0)
    return bag


def _files(tmp_path: Path) -> list[str]:
    (tmp_path / "two.urdf").write_text(URDF)
    (tmp_path / "limits.yaml").write_text(BLOCK)
    return ["--urdf", str(tmp_path / "two.urdf"), "--limits", str(tmp_path / "limits.yaml")]


def test_known_violations_are_counted_exactly_and_the_worst_named(tmp_path, capsys):
    args = [str(_bag(tmp_path)), *_files(tmp_path), "--json"]
    assert limit_check.main(args) == 0  # counting: never a failure by itself
    report = json.loads(capsys.readouterr().out)
    assert (report["trajectories"], report["points"], report["topics"]) == (2, 6, [TRAJECTORY])
    assert report["counts"] == {"position": 1, "velocity": 2, "acceleration": 3, "jump": 1}
    worst = report["worst"]
    assert worst["position"] == [
        {"kind": "position", "trajectory": 1, "point": 2, "time_ns": 1350 * MS, "joint": "a",
         "value": 1.3, "limit": 1.0}
    ]  # fmt: skip
    assert [(f["point"], f["value"]) for f in worst["velocity"]] == [
        (0, pytest.approx(8.0)),
        (2, pytest.approx(7.0)),
    ]
    assert [(f["point"], f["value"]) for f in worst["acceleration"]] == [
        (-1, pytest.approx(7 / 0.075)),  # centred on trajectory 0's last point: the seam
        (0, pytest.approx(-7 / 0.075)),
        (1, pytest.approx(60.0)),
    ]
    assert [(f["joint"], f["value"], f["limit"]) for f in worst["jump"]] == [
        ("a", pytest.approx(0.4), 0.3)
    ]
    assert report["limits"] == f"{tmp_path / 'two.urdf'} + {tmp_path / 'limits.yaml'}"


def test_a_reset_starts_the_next_trajectory_afresh(tmp_path, capsys):
    """The same bag with a reset between the trajectories: no seam step (8 /s) and no seam
    accelerations; what lies inside trajectory 1 is counted as before, and '' for
    --reset-topic ignores the reset. (A sim that does not settle: trajectory 1 is logged
    90 ms after the reset.)"""
    bag = str(_bag(tmp_path, reset=True))
    assert limit_check.main([bag, *_files(tmp_path), "--json", "--reset-settle-s", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"position": 1, "velocity": 1, "acceleration": 1, "jump": 1}
    assert [(f["point"], f["value"]) for f in report["worst"]["acceleration"]] == [
        (1, pytest.approx(60.0))
    ]
    assert limit_check.main([bag, *_files(tmp_path), "--json", "--reset-topic", ""]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts == {"position": 1, "velocity": 2, "acceleration": 3, "jump": 1}


def test_a_trajectory_stamped_before_a_reset_and_logged_after_it_is_not_counted(tmp_path):
    """Computed for the episode before and still in flight at the reset, the sim drops it
    (previous_episode): a step to 0.9 stamped 1.1 s, logged after the reset at 1.11 s; and
    all it logs while it settles (given 0.1 s: the trajectory at 1.2 s too)."""
    bag = tmp_path / "bag"
    with BagWriter(bag, split_s=None) as writer:
        _trajectory(writer, 1000 * MS, ("a", "b"), [[0.0, 0.0], [0.1, 0.0], [0.2, 0.0]])
        writer.write_ros(limit_check.RESET_TOPIC, 1110 * MS, String(data="reset"))
        stale = trajectory_msg(
            ("a", "b"), np.array([[0.9, 0.0]]), [0.0], stamp=ns_to_stamp(1100 * MS)
        )
        writer.write_ros(TRAJECTORY, 1115 * MS, stale)
        _trajectory(writer, 1200 * MS, ("a", "b"), [[0.0, 0.0], [0.05, 0.0], [0.1, 0.0]])
    reset = limit_check.RESET_TOPIC
    trajectories, _ = limit_check.read_trajectories(bag, TRAJECTORY, STATES, reset, 0.0)
    assert [t.stamp_ns for t in trajectories] == [1000 * MS, 1200 * MS]
    assert trajectories[1].after_reset
    every, _ = limit_check.read_trajectories(bag, TRAJECTORY, STATES, None)
    assert len(every) == 3
    settled, _ = limit_check.read_trajectories(bag, TRAJECTORY, STATES, reset, 0.1)
    assert [t.stamp_ns for t in settled] == [1000 * MS]


def test_the_table_and_the_fail_flag(tmp_path, capsys):
    files = _files(tmp_path)
    assert limit_check.main([str(_bag(tmp_path)), *files, "--fail-on-violation"]) == 1
    out = capsys.readouterr().out
    assert "2 trajectories, 6 points on /oxygen/joint_trajectory" in out
    assert (
        "position           1  a +1.3000 vs limit 1.0000 (trajectory 1, point 2, t 1.350 s)" in out
    )
    assert "the seam" in out
    clean = _bag(tmp_path / "clean", violations=False)
    assert limit_check.main([str(clean), *files, "--fail-on-violation", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["counts"].values()) == {0}


def test_the_params_give_the_topic_the_urdf_and_the_block(tmp_path, capsys, monkeypatch):
    """config/sim.yaml: the node's trajectory topic as it resolves it, the sim arm's URDF
    (joint_2 stops at 1.9) and the params' joint_limits block: the URDF has no
    acceleration or jump bound, so without the block the limits would not resolve."""
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)  # the params name the URDF relative to the checkout
    names = ("joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper")
    rows = np.zeros((3, 7))
    rows[:, 1] = [1.85, 1.88, 1.95]  # the last point past joint_2's 1.9
    bag = tmp_path / "sim"
    with BagWriter(bag, split_s=None) as writer:
        msg = trajectory_msg(names, rows, [0.0, 0.1, 0.2], stamp=ns_to_stamp(1000 * MS))
        writer.write_ros("/oxygen/joint_trajectory", 1000 * MS, msg)
    assert limit_check.main([str(bag), "--params", "config/sim.yaml", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"position": 1, "velocity": 0, "acceleration": 0, "jump": 0}
    assert report["limits"] == "config/robots/sim_arm.urdf + joint_limits"


def test_each_controllers_topic_is_checked_on_its_own_joints_and_seams(tmp_path, capsys):
    """Commands split over two controllers (a on one topic, b on the other): each topic is
    a trajectory stream of its own, its seams measured against its own previous command;
    the totals add up, and config/aloha.yaml's four controllers are its default topics."""
    bag = tmp_path / "split"
    rows = {"a": [[0.0], [0.1], [1.5]], "b": [[0.0], [0.1], [0.2]]}  # a: past 1, 14 /s
    with BagWriter(bag, split_s=None) as writer:
        _state(writer, 900 * MS, 0.0)
        for joint, topic in (("a", "/arm_a/joint_trajectory"), ("b", "/arm_b/joint_trajectory")):
            msg = trajectory_msg((joint,), np.array(rows[joint]), [0.0, 0.1, 0.2],
                                 stamp=ns_to_stamp(1000 * MS))  # fmt: skip
            writer.write_ros(topic, 1000 * MS, msg)
    args = ["--topic", "/arm_a/joint_trajectory", "--topic", "/arm_b/joint_trajectory"]
    assert limit_check.main([str(bag), *_files(tmp_path), *args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["topics"] == ["/arm_a/joint_trajectory", "/arm_b/joint_trajectory"]
    a, b = (report["by_topic"][t]["counts"] for t in report["topics"])
    assert a == {"position": 1, "velocity": 1, "acceleration": 1, "jump": 0}
    assert b == dict.fromkeys(limit_check.KINDS, 0)
    assert report["counts"] == a and (report["trajectories"], report["points"]) == (2, 6)
    root = Path(__file__).resolve().parents[1]
    wiring = limit_check.resolved(root / "config" / "aloha.yaml")
    assert [t.split("/")[1] for t in wiring.trajectory_topics] == [
        "left_arm_controller", "left_gripper_controller",
        "right_arm_controller", "right_gripper_controller",
    ]  # fmt: skip
    assert wiring.joint_state_topic == "/joint_states" and wiring.from_desired


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    files = _files(tmp_path)
    bag = _bag(tmp_path)
    assert limit_check.main([str(bag), *files, "--topic", "/elsewhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"oxygen-bag limit-check: bag {bag} has no JointTrajectory with points on /elsewhere"
    )
    assert limit_check.main([str(tmp_path / "none"), *files]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "limits.yaml").write_text("joint_limits:\n  a: {max_acceleration: 50.0}\n")
    assert limit_check.main([str(bag), *files]) == 2
    assert "joint 'a' has no max_jump" in capsys.readouterr().err


def test_the_check_computes_with_its_own_code_not_the_gates():
    """It must be able to catch a gate bug, so it shares no arithmetic with the gate."""
    tree = ast.parse(Path(limit_check.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "oxygen_core.safety.limits" in imported
    assert not {m for m in imported if m and m.startswith("oxygen_core.safety.gate")}


def test_the_jtc_controller_model_counts_what_it_commands_update_by_update(tmp_path, capsys):
    """At 10 Hz, with no joint state to read (another topic), so the arm follows its
    command: trajectory 0 takes over at 1.0 s from its first point, 0, and commands a
    period ahead, 0.1 then 0.2 (1 /s). Trajectory 1 arrives at 1.15 s and takes over at 1.2
    s, its point 0 (1.15 s) already past: mid-segment, 0.95 (between 0.6 at 1.25 s and 1.3
    at 1.35 s, at 1.3 s), a step of 7.5 /s and 65 /s^2; then it holds 1.3, outside [-1, 1],
    stepping 3.5 /s into it. Five updates, to the last point's time plus one."""
    bag = str(_bag(tmp_path))
    args = [bag, *_files(tmp_path), "--json", "--controller", "jtc", "--update-rate", "10"]
    args += ["--joint-state-topic", "/no_states"]
    assert limit_check.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["trajectories"], report["points"]) == (2, 5)
    assert report["counts"] == {"position": 2, "velocity": 2, "acceleration": 1, "jump": 0}
    worst = report["worst"]
    assert [(f["time_ns"], f["value"]) for f in worst["velocity"]] == [
        (1200 * MS, pytest.approx(7.5)),
        (1300 * MS, pytest.approx(3.5)),
    ]
    assert [(f["trajectory"], f["point"], f["value"]) for f in worst["acceleration"]] == [
        (1, 0, pytest.approx(65.0))
    ]
    assert sorted((f["time_ns"], round(f["value"], 9)) for f in worst["position"]) == [
        (1300 * MS, 1.3),
        (1400 * MS, 1.3),
    ]


def test_under_jtc_a_run_starts_from_the_joint_state_before_its_first_trajectory(tmp_path, capsys):
    """After a reset the controller takes the first trajectory over from where the reset
    left the arm, not from that trajectory's first point: the joint state says a is at 0.4;
    at 10 Hz trajectory 0 takes over at its arrival (1.0 s) and commands a period ahead,
    0.1: a step of -3 /s (over 2 /s; -30 /s^2 is within 50), then 1 /s (40 /s^2). Without
    the state (the trajectory's joints not all in it) the run starts at the first point:
    nothing over."""
    bag = tmp_path / "bag"
    with BagWriter(bag, split_s=None) as writer:
        _state(writer, 900 * MS, 0.4)
        _trajectory(writer, 1000 * MS, ("a", "b"), [[0.0, 0.0], [0.1, 0.0], [0.2, 0.0]])
    args = [str(bag), *_files(tmp_path), "--json", "--controller", "jtc", "--update-rate", "10"]
    assert limit_check.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"position": 0, "velocity": 1, "acceleration": 0, "jump": 0}
    assert [(f["time_ns"], f["value"]) for f in report["worst"]["velocity"]] == [
        (1000 * MS, pytest.approx(-3.0))
    ]
    bag = tmp_path / "bag_without_b"
    with BagWriter(bag, split_s=None) as writer:
        msg = joint_state_msg(("a",), np.array([0.4]), stamp=ns_to_stamp(900 * MS), frame_id="")
        writer.write_ros(STATES, 900 * MS, msg)
        _trajectory(writer, 1000 * MS, ("a", "b"), [[0.0, 0.0], [0.1, 0.0], [0.2, 0.0]])
    args[0] = str(bag)
    assert limit_check.main(args) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["velocity"] == 0


def _lagging_bag(tmp_path: Path) -> Path:
    """Trajectory 0 (a: 0, 0.15, 0.3 from 1.0 s); the arm lagging at 1.15 s (a 0.02 moving
    at 0.6 /s); trajectory 1 (a: 0.05 at 1.3 s) arriving at 1.15 s."""
    bag = tmp_path / "bag"
    with BagWriter(bag, split_s=None) as writer:
        _state(writer, 900 * MS, 0.0)
        _trajectory(writer, 1000 * MS, ("a", "b"), [[0.0, 0.0], [0.15, 0.0], [0.3, 0.0]])
        lagging = joint_state_msg(
            ("a", "b"),
            np.array([0.02, 0.0]),
            stamp=ns_to_stamp(1150 * MS),
            frame_id="",
            velocities=np.array([0.6, 0.0]),
        )
        writer.write_ros(STATES, 1150 * MS, lagging)
        msg = trajectory_msg(
            ("a", "b"), np.array([[0.05, 0.0]]), [0.0], stamp=ns_to_stamp(1300 * MS)
        )
        writer.write_ros(TRAJECTORY, 1150 * MS, msg)
    return bag


def test_under_jtc_a_take_over_starts_from_the_measured_state(tmp_path, capsys):
    """The controller takes a trajectory over from the joint state it reads, not from its
    last command. At 10 Hz trajectory 0 (a: 0, 0.15, 0.3 from 1.0 s) has the command at
    0.3 for 1.2 s; trajectory 1 (a: 0.05 at 1.3 s) arrives at 1.15 s and takes over at 1.2
    s. The arm lagged: the state at 1.15 s has a at 0.02 moving at 0.6 /s, so 0.05 at 1.2
    s, where trajectory 1 wants it: nothing over. Taking the arm to follow its command
    (no state to read) the segment runs from 0.3 to 0.05 in one period: -2.5 /s, over 2."""
    bag = _lagging_bag(tmp_path)
    args = [str(bag), *_files(tmp_path), "--json", "--controller", "jtc", "--update-rate", "10"]
    assert limit_check.main(args) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["velocity"] == 0
    assert limit_check.main([*args, "--joint-state-topic", "/no_states"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["velocity"] == 1
    assert report["worst"]["velocity"][0]["value"] == pytest.approx(-2.5)


def test_the_measured_state_is_moved_on_at_its_velocity_and_trusted_only_while_fresh():
    """A state is the arm's at a later update moved on at its velocities; older than
    STATE_MAX_AGE_S, or lacking a joint of the topic, it is none."""
    samples = [
        JointSample(1000 * MS, {"a": 0.1, "b": 0.0, "c": 9.0}, {"a": 2.0, "b": 0.0, "c": 0.0}),
        JointSample(2000 * MS, {"a": 0.5}, {"a": 0.0}),  # lacks b: not the topic's state
    ]
    states = MeasuredStates(samples, ("a", "b"))
    position, velocity = states.at(1050 * MS)
    np.testing.assert_allclose(position, [0.2, 0.0])
    np.testing.assert_allclose(velocity, [2.0, 0.0])
    assert states.at(999 * MS) is None
    assert states.at(1000 * MS + round(STATE_MAX_AGE_S * 1e9) + 1) is None
    still = MeasuredStates([JointSample(1000 * MS, {"a": 0.1, "b": 0.0}, {})], ("a", "b"))
    position, velocity = still.at(1200 * MS)
    np.testing.assert_allclose(position, [0.1, 0.0])
    assert velocity is None


def test_from_the_desired_state_a_take_over_starts_from_the_command_whatever_is_logged(
    tmp_path,
):
    """A controller that interpolates from its desired state reads no state: the bag above,
    whose lagging arm makes trajectory 1 meet it exactly, is counted from the command
    (0.3 at the take-over, at rest after its last point): -2.5 /s into 0.05, over 2."""
    trajectories, states = limit_check.read_trajectories(
        _lagging_bag(tmp_path), TRAJECTORY, STATES, None
    )
    files = _files(tmp_path)
    limits = limits_from_files(["a", "b"], None, Path(files[1]), Path(files[3]))
    received = limit_check.arrivals(trajectories, "jtc")
    measured, _ = sampled(received, limits, "jtc", 10.0, states)
    desired, _ = sampled(received, limits, "jtc", 10.0, states, from_desired=True)
    assert [f.kind for f in measured if f.kind == "velocity"] == []
    (velocity,) = [f for f in desired if f.kind == "velocity"]
    assert velocity.value == pytest.approx(-2.5)
