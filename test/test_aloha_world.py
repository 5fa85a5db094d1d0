"""ALOHA as a world the sim runs (oxygen_core.aloha.episode) and its ROS binding
(oxygen-sim --world aloha): the scripted expert succeeds through the four trajectory
controllers where holding still does not, a command is routed by the joints it names (one
controller's, or every joint split over the four) and refused otherwise, the controllers
run "jtc", and the units and names are those config/aloha.yaml gives the node.

Episodes are driven as the sim's loop drives them (tools.sim.loop: the sim-run policy's
command, then the end check, then one step) without ROS, but for the one test over DDS,
which follows test_sim_node: the sim in this process in its own context, the probe in
another, every topic matched and the probe's trajectories in the sim's reader before the
first tick, and only what DDS guarantees asserted (each topic's last sample). Seeds are
training seeds (0-9999, oxygen_core.sim.seeds).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gym_aloha")

from rclpy.duration import Duration  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from sim_harness import Probe, Sim  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from oxygen_core.aloha.episode import (  # noqa: E402
    ACTION_NAMES,
    CONTROLLERS,
    FROM_DESIRED,
    PERIOD_NS,
    PUBLISHED_NAMES,
    STATE_NAMES,
    TARGET_EVERY,
    Aloha,
    AlohaEpisode,
    position_limits,
    random_draw,
    to_controller,
    to_env,
)
from oxygen_core.controller.jtc import JtcParams  # noqa: E402
from oxygen_core.controller.shaping import Shaped  # noqa: E402
from oxygen_core.sim.executor import Trajectory  # noqa: E402
from oxygen_core.worlds import Refused, Tally  # noqa: E402
from oxygen_ros.convert import stamp_to_ns  # noqa: E402
from oxygen_ros.tools.configure import load_settings  # noqa: E402
from oxygen_ros.tools.sim.aloha import BINDING, TOPICS  # noqa: E402
from oxygen_ros.tools.sim.messages import trajectory_msg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NS = 1_000_000_000
START_NS = NS  # the first tick, as the sim's loop starts
SEED = 3
LEFT_ARM = list(range(6))  # ACTION_NAMES' and STATE_NAMES' places of the left arm
OFFSET = np.array([0.2, 0.15, -0.2, 0.3, 0.2, -0.3])  # rad, within every joint's range


@pytest.fixture(scope="module")
def world():
    w = Aloha(camera_size=32)
    yield w
    w.close()


def trajectory(shaped: Shaped) -> Trajectory:
    """A sim-run policy's command as the world receives it: the binding's message of it,
    read back (what the sim's loop applies)."""
    return BINDING.command_of(BINDING.command_msg(shaped, shaped.stamp_ns), shaped.stamp_ns)


def drive(episode: AlohaEpisode, ticks: int) -> None:
    """Up to `ticks` ticks of the sim's loop: the sim-run policy's command, then the end,
    else one step."""
    for step in range(ticks):
        t = START_NS + step * PERIOD_NS
        acts = episode.sim_acts(step, t)
        if acts is not None:
            assert episode.accept(trajectory(acts.command), t) is None
        if episode.over():
            return
        episode.step(t)


def tally(episode: AlohaEpisode, policy: str) -> Tally:
    end = START_NS + episode.steps * PERIOD_NS
    return Tally(0, 1, policy, START_NS, end, 1.0, episode.steps, {}, 0, 0.0, (), (), 0)


def test_the_expert_succeeds_through_the_four_controllers(world):
    episode = world.episode("transfer_cube", SEED, "expert", START_NS)
    first = episode.sim_acts(0, START_NS)
    assert first.shown is first.command and first.command.positions.shape == (1, 14)
    drive(episode, 1000)
    outcome = episode.outcome(tally(episode, "expert"))
    assert outcome.success and outcome.steps == outcome.success_step <= outcome.max_steps == 300
    assert (outcome.task, outcome.seed, outcome.reward) == ("transfer_cube", SEED, 4)
    assert set(outcome.limits) == {c.name for c in CONTROLLERS}
    assert episode.lines().narration == "holding the cube in the left gripper"


def test_holding_the_start_pose_does_not_succeed(world):
    episode = world.episode("transfer_cube", SEED, "hold", START_NS)
    start = episode.state()[0]
    drive(episode, 1000)
    assert not episode.outcome(tally(episode, "hold")).success and episode.steps == 300
    np.testing.assert_allclose(episode.state()[0], start, atol=0.01)


@pytest.mark.parametrize(
    ("names", "kind"),
    [
        (("left_waist", "right_waist"), "joint_names"),  # two controllers' joints, not all
        (ACTION_NAMES[:7], "joint_names"),  # an arm and its gripper
        (("left_waist", "elbow"), "joint_names"),
        (ACTION_NAMES, "points"),  # every joint, but a point short of one
    ],
)
def test_a_trajectory_for_no_controllers_joints_is_refused_and_changes_nothing(world, names, kind):
    episode = world.episode("transfer_cube", SEED, "external", START_NS)
    start = episode.state()[0]
    rows = [np.ones(len(names)), np.ones(len(names) - (kind == "points"))]
    refused = episode.accept(Trajectory(names, START_NS / NS, [0.1, 0.2], rows), START_NS)
    assert isinstance(refused, Refused) and refused.kind == kind and "\n" not in refused.reason
    drive(episode, 25)
    np.testing.assert_allclose(episode.state()[0], start, atol=0.01)


def test_a_one_point_trajectory_for_one_arm_moves_that_arm_only(world):
    episode = world.episode("transfer_cube", SEED, "external", START_NS)
    start = episode.state()[0]
    target = start[LEFT_ARM] + OFFSET
    arm = Trajectory(CONTROLLERS[0].joints[::-1], START_NS / NS, [0.5], [target[::-1]])
    assert episode.accept(arm, START_NS) is None  # a controller takes its joints in any order
    drive(episode, 75)
    moved = episode.state()[0]
    np.testing.assert_allclose(moved[LEFT_ARM], target, atol=0.03)
    np.testing.assert_allclose(np.delete(moved, LEFT_ARM), np.delete(start, LEFT_ARM), atol=0.01)


def test_the_controllers_run_jtc_and_refuse_a_trajectory_already_past(world):
    episode = world.episode("insertion", SEED, "external", START_NS)
    params = JtcParams(PERIOD_NS / NS, interpolate_from_desired_state=FROM_DESIRED)
    assert all(e.jtc == params for e in episode.executors.values())
    now = START_NS + NS
    late = Trajectory(("right_gripper",), START_NS / NS, [0.5], [[0.0]])
    refused = episode.accept(late, now)
    assert refused.kind == "late" and refused.reason.startswith("right_gripper: ")
    every = Trajectory(ACTION_NAMES, START_NS / NS, [0.5], [to_controller(np.zeros(14))])
    assert episode.accept(every, now).kind == "late"
    assert episode.accept(every, START_NS) is None  # arriving before its point is due


def test_units_are_the_aloha_presets_and_the_names_config_aloha_yamls():
    settings, topics = load_settings(ROOT / "config" / "aloha.yaml")
    node, robot = settings.node, settings.robot
    assert (node.joint_names, node.action_names) == (STATE_NAMES, ACTION_NAMES)
    assert node.controllers == CONTROLLERS and node.control_period_s == PERIOD_NS / NS
    defaults = {t.key: t.topic for t in TOPICS}
    assert topics.cameras == tuple(defaults[f"camera/{c}"] for c in Aloha.cameras)
    assert (topics.joint_state, topics.instruction) == (
        defaults["joint_states"],
        "/oxygen/instruction",
    )
    # Grippers: the env's 0..1 is the preset's command range in rad, both ways.
    opening = np.zeros(14)
    opening[[6, 13]] = [0.0, 1.0]
    np.testing.assert_allclose(to_controller(opening)[[6, 13]], robot.gripper_command_range)
    sweep = np.linspace(0.0, 1.0, 14)
    np.testing.assert_allclose(to_env(to_controller(sweep)), sweep, atol=1e-15)


def test_the_published_state_is_in_radians_and_the_fingers_in_metres(world):
    episode = world.episode("insertion", SEED, "external", START_NS)
    positions, velocities = episode.state()
    low, high = load_settings(ROOT / "config" / "aloha.yaml")[0].robot.gripper_state_range
    assert all(low <= positions[i] <= high for i in (6, 13))  # 0.0224 m: nearly closed
    np.testing.assert_allclose(positions[LEFT_ARM], [0, -0.96, 1.16, 0, -0.3, 0], atol=1e-9)
    assert velocities.shape == (14,)
    assert episode.render("top").shape == (24, 32, 3)  # 4:3, as gym-aloha's 640 x 480


def test_random_targets_are_seeded_and_within_the_ranges_around_the_start(world):
    episode = world.episode("transfer_cube", SEED, "random", START_NS)
    ranges = position_limits(episode.env.physics)
    start = to_controller(episode.env.joints())
    draws = [random_draw("transfer_cube", SEED, start, ranges)() for _ in range(3)]
    again = random_draw("transfer_cube", SEED, start, ranges)
    np.testing.assert_array_equal(again(), draws[0])
    reach = 0.25 * (ranges[:, 1] - ranges[:, 0])
    for d in draws:
        assert np.all((ranges[:, 0] <= d) & (d <= ranges[:, 1]))
        assert np.all(np.abs(d - start)[LEFT_ARM] <= reach[LEFT_ARM])
    assert episode.sim_acts(1, START_NS) is None
    sent = episode.sim_acts(TARGET_EVERY, START_NS).command
    assert sent.times.tolist() == [1.0] and sent.positions.shape == (1, 14)


# ------------------------------------------------------------------ over ROS


@pytest.mark.ros
def test_the_sim_node_publishes_the_robot_and_runs_each_controllers_topic(world):
    left_arm, right_gripper = CONTROLLERS[0], CONTROLLERS[3]
    probed = [
        ("/joint_states", JointState),
        ("/cam_high/image_raw", Image),
        ("/oxygen/instruction", String),
        ("/aloha/episode", String),
    ]
    probe = Probe(probed, (left_arm.topic, JointTrajectory))
    gripper = probe.node.create_publisher(JointTrajectory, right_gripper.topic, 10)
    # 3 x real time: 300 ticks in 2 s.
    sim = Sim("aloha", probe, tasks=["transfer_cube"], first_seed=SEED, real_time_factor=3.0,
              camera_size=32)  # fmt: skip
    reference = world.episode("transfer_cube", SEED, "external", START_NS)
    start = reference.state()[0]
    target = start[LEFT_ARM] + OFFSET
    stamp = START_NS + NS // 2
    try:
        probe.wait(lambda: gripper.get_subscription_count() > 0, "the gripper's reader")
        gripper.publish(trajectory_msg([0.2], np.array([[1.4]]), stamp, right_gripper.joints))
        assert gripper.wait_for_all_acked(Duration(seconds=60))
        sim.start(
            trajectory_msg([0.5], target[None, :], stamp, left_arm.joints),
            trajectory_msg([0.5], np.zeros((1, 2)), stamp, ("left_waist", "right_waist")),
        )
        end = START_NS + 300 * PERIOD_NS  # the last tick's: 300 steps, then the end
        probe.wait(
            lambda: (
                probe.get("/aloha/episode")
                and stamp_to_ns(probe.get("/joint_states")[-1].header.stamp) == end
            ),
            "the episode's outcome and last joint states",
            60.0,
        )
    finally:
        sim.close()
        probe.close()
    outcome = json.loads(probe.get("/aloha/episode")[-1].data)
    assert (outcome["accepted"], outcome["rejected"]) == (2, {"joint_names": 1})
    assert (outcome["steps"], outcome["success"], outcome["seed"]) == (300, False, SEED)
    last = probe.get("/joint_states")[-1]
    assert tuple(last.name) == PUBLISHED_NAMES  # the state, then the gripper joints (rad)
    positions = np.array(last.position)
    np.testing.assert_allclose(positions[LEFT_ARM], target, atol=0.03)
    np.testing.assert_allclose(positions[7:13], start[7:13], atol=0.01)
    assert positions[13] > 0.05 > start[13]  # the right fingers opened, in m
    assert positions[15] == pytest.approx(1.4, abs=0.05)  # the right gripper joint: 1.4 rad
    image = probe.get("/cam_high/image_raw")[-1]
    assert (image.encoding, image.width, image.height) == ("rgb8", 32, 24)
    assert (stamp_to_ns(image.header.stamp) - START_NS) % (5 * PERIOD_NS) == 0  # 10 Hz
    assert probe.get("/oxygen/instruction")[-1].data == reference.instruction
