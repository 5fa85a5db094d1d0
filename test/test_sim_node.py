"""The simulated robot over ROS 2: oxygen-sim's node, its loop, and oxygen-record.

The sim node runs in this process in its own rclpy context, with a probe node in another
context: everything between them goes over DDS. The sim holds its first episode until
the probe subscribes to the instruction and publishes trajectories (wait_for_peers_s),
as it waits for the oxygen node in a closed-loop run. Expected values are worked out by
hand from the executor's rules (the world follows a command within the joint velocity
limits exactly, one control period later).

What DDS guarantees, and so what the tests here count on: every topic is matched both
ways before the sim ticks and the probe reads reliably, deeper than anything a test
publishes, so a sample is lost only when the sim's writer (reliable, depth 10) overwrites
it before it was delivered. At a sim rate of a few ticks per wall second that needs a
second of stalled delivery; at 25 x real time, only a few milliseconds, so there a test
asserts order, no duplicates and the last sample of a topic (which stays in the writer's
history until delivered), never that every sample came. The trajectories the probe sends
are acknowledged by the sim's reader before its first tick.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as Image_
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from sim_harness import Probe, Sim
from std_msgs.msg import String
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory

from oxygen_core.sim.arm import HOME, JOINT_NAMES
from oxygen_core.sim.episode import Tabletop, TabletopSettings
from oxygen_core.sim.expert import Expert
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.runner import run_expert_episode
from oxygen_core.sim.seeds import DEV
from oxygen_core.sim.tasks import FAMILIES, make_task
from oxygen_ros.convert import image_to_rgb, stamp_to_ns
from oxygen_ros.msg import EpisodeOutcome
from oxygen_ros.tools.bagio import from_cdr, read_bag
from oxygen_ros.tools.replay_job import Job
from oxygen_ros.tools.sim import animation, evaluate
from oxygen_ros.tools.sim.loop import SimConfig, SimLoop, episode_order
from oxygen_ros.tools.sim.messages import trajectory_msg
from oxygen_ros.tools.sim.record import record

pytestmark = pytest.mark.ros
NS = 1_000_000_000
START_NS = NS  # the sim's first tick
TRAJECTORY_TOPIC = "/oxygen/joint_trajectory"


PROBED = (
    ("/clock", Clock),
    ("/joint_states", JointState),
    ("/camera/base/image_raw", Image),
    ("/camera/wrist/image_raw", Image),
    ("/oxygen/instruction", String),
    ("/sim/episode", EpisodeOutcome),
)


@pytest.fixture
def probe():
    p = Probe(PROBED, (TRAJECTORY_TOPIC, JointTrajectory))
    yield p
    p.close()


def _joint_states_by_stamp(probe: Probe) -> dict[int, np.ndarray]:
    return {stamp_to_ns(m.header.stamp): np.array(m.position) for m in probe.get("/joint_states")}


def _texts(probe: Probe) -> list[str]:
    return [m.data for m in probe.get("/oxygen/instruction")]


@pytest.mark.parametrize("controller", ["jtc_replacement", "jtc"])
def test_sim_publishes_sensors_and_executes_a_trajectory_as_its_controller(probe, controller):
    """jtc_replacement takes the trajectory over at its stamp; jtc (the default) at the
    first tick after it arrives, moving there from the measured state, one period ahead."""
    # 10 ticks per wall second: every sample has a second to reach the probe (module doc).
    sim = Sim("tabletop", probe, families=["pick"], real_time_factor=0.5, camera_size=32,
              wait_for_peers_s=30.0, controller=controller)  # fmt: skip
    # Starts 0.5 s of sim time after the first tick; the sim's reader has it before that tick.
    offsets = np.array([[0.05, -0.05, 0.05, 0.05, -0.05, 0.05, -0.05]]).T
    points = HOME + (offsets * np.array([1.0, 2.0, 3.0])).T  # within the speed limits
    start = START_NS + NS // 2
    try:
        sim.start(trajectory_msg([0.0, 0.2, 0.4], points, start))
        probe.wait(
            lambda: max(_joint_states_by_stamp(probe), default=0) >= start + NS,
            "joint states 1 s past the trajectory's start",
        )
    finally:
        sim.close()
    states = _joint_states_by_stamp(probe)
    period = NS // 20
    p0, p1, p2 = points
    if controller == "jtc_replacement":
        # Before the start the arm holds home; the world follows each command one tick later.
        lag = period
        np.testing.assert_allclose(states[start], HOME, atol=1e-12)
    else:
        # From home at the first tick to p0 at the start, linearly: halfway at 0.25 s.
        lag = 0
        halfway = START_NS + NS // 4
        np.testing.assert_allclose(states[halfway], (HOME + p0) / 2, atol=1e-9)
    expected = {
        start + lag: p0,
        start + lag + period: p0 + 0.25 * (p1 - p0),
        start + lag + 2 * period: p0 + 0.5 * (p1 - p0),
        start + lag + 4 * period: p1,
        start + lag + 5 * period: p1 + 0.25 * (p2 - p1),
        start + lag + 8 * period: p2,
        start + 14 * period: p2,
    }
    for stamp, want in expected.items():
        np.testing.assert_allclose(states[stamp], want, atol=1e-9, err_msg=f"at {stamp / NS} s")
    assert list(probe.get("/joint_states")[0].name) == list(JOINT_NAMES)
    instruction = make_task("pick", 0).instruction
    assert probe.get("/oxygen/instruction")[0].data == instruction
    clock = [stamp_to_ns(m.clock) for m in probe.get("/clock")]
    assert clock[0] == START_NS and np.all(np.diff(clock) == period)
    # Cameras at 10 Hz on the 20 Hz ticks, rgb8 at the asked size, stamped like the ticks.
    base = probe.get("/camera/base/image_raw")
    assert (base[0].encoding, base[0].width, base[0].height) == ("rgb8", 32, 32)
    stamps = [stamp_to_ns(m.header.stamp) for m in base]
    assert stamps[0] == START_NS and np.all(np.diff(stamps) == 2 * period)
    first = Renderer(32, 32).render(make_task("pick", 0).new_world(), "base")
    np.testing.assert_array_equal(image_to_rgb(base[0]), first)


@pytest.mark.slow
def test_malformed_trajectories_are_counted_the_arm_holds_and_episodes_reset(probe):
    # Two pick episodes that run to the 10 s time limit, at 25 x real time.
    sim = Sim(
        "tabletop",
        probe,
        families=["pick"],
        episodes=2,
        real_time_factor=25.0,
        camera_size=16,
        camera_rate_hz=2.0,
        wait_for_peers_s=30.0,
    )
    good = HOME[None, :] + 0.01
    bad_names = trajectory_msg([0.0], good, 0, names=("a",) * 7)
    nan = trajectory_msg([0.0, 0.1], np.vstack([good, good * np.nan]), 0)
    empty = trajectory_msg([], np.zeros((0, 7)), 0)
    instructions = [make_task("pick", seed).instruction for seed in (0, 1)]
    try:
        sim.start(bad_names, nan, empty)
        probe.wait(lambda: len(probe.get("/sim/episode")) == 2, "two outcomes", 120.0)
        first, second = probe.get("/sim/episode")
        # The last sample of a topic stays in the sim's writer until the probe has it.
        last_ns = stamp_to_ns(second.header.stamp)
        probe.wait(lambda: last_ns in _joint_states_by_stamp(probe), "the last joint state")
        probe.wait(lambda: _texts(probe)[-1:] == [instructions[1]], "the last instruction")
    finally:
        sim.close()
    # Zero stamps mean "now": each one is counted once, in the episode that took it (the
    # first, unless the sim's executor handed it over only after that episode).
    rejected: collections.Counter[str] = collections.Counter()
    for outcome in (first, second):
        rejected.update(dict(zip(outcome.reject_reasons, outcome.reject_counts, strict=True)))
        assert outcome.trajectories_accepted == 0 and outcome.seams == 0
    assert rejected == {"joint_names": 1, "non_finite": 1, "points": 1}
    assert first.trajectories_rejected + second.trajectories_rejected == 3
    assert (first.index, first.seed, second.index, second.seed) == (0, 0, 1, 1)
    assert (first.success, first.steps, first.duration_s) == (False, 200, 10.0)
    assert [first.instruction, second.instruction] == instructions
    assert stamp_to_ns(second.start) == stamp_to_ns(first.header.stamp) + NS // 20
    # Nothing valid ever came: every joint state that arrived, the last one of the second
    # episode among them, is the home pose.
    positions = np.array([m.position for m in probe.get("/joint_states")])
    np.testing.assert_array_equal(positions, np.broadcast_to(HOME, positions.shape))
    # The instruction at each episode's start and again every sim second: 11 per episode
    # sent (the loop tests count them exactly); in order, none twice, over DDS.
    texts = _texts(probe)
    n = texts.count(instructions[0])
    assert texts == [instructions[0]] * n + [instructions[1]] * (len(texts) - n)
    assert n <= 11 and 1 <= len(texts) - n <= 11


def test_expert_through_the_loop_matches_the_reference_runner():
    class Counter:
        def __init__(self) -> None:
            self.counts: collections.Counter[str] = collections.Counter()

        def publish(self, key, msg, time_ns) -> None:
            self.counts[key] += 1

    port = Counter()
    loop = tabletop_loop(SimConfig(episode_order(FAMILIES, 0, 1), "expert"), port)
    while loop.tick():
        pass
    for outcome in loop.outcomes:
        reference = run_expert_episode(outcome.family, outcome.seed)
        assert outcome.success and reference.success
        assert math.isclose(outcome.duration_s, reference.time_to_success, abs_tol=1e-9)
        assert outcome.steps == reference.steps
        assert (outcome.narration, outcome.memory) == (reference.narration, reference.memory)
        assert outcome.accepted == outcome.steps + 1 and outcome.rejected == {}
    ticks = sum(o.steps + 1 for o in loop.outcomes)
    assert port.counts["joint_states"] == port.counts["clock"] == ticks
    assert port.counts["episode"] == 3


@pytest.mark.parametrize("rate_hz", [15.0, 7.0])
def test_the_instruction_repeats_every_second_at_rates_that_do_not_divide_it(rate_hz):
    class Instructions:
        def __init__(self) -> None:
            self.times: list[int] = []

        def publish(self, key, msg, time_ns) -> None:
            if key == "instruction":
                self.times.append(time_ns)

    port = Instructions()
    cfg = SimConfig(episode_order(("pick",), 0, 1), camera_rate_hz=1.0)
    loop = tabletop_loop(cfg, port, control_rate_hz=rate_hz)  # nothing drives the arm: the
    # episode runs to its time limit
    while loop.tick():
        pass
    (outcome,) = loop.outcomes
    period = loop.world.period_ns  # 66666667 ns at 15 Hz, 142857143 ns at 7 Hz: 1 s is no multiple
    assert outcome.duration_s == pytest.approx(10.0, abs=period / NS)
    # At the start, then at the first tick at or after each whole second of the episode.
    expected = [START_NS] + [START_NS + math.ceil(k * NS / period) * period for k in range(1, 11)]
    assert port.times == expected


class Null:
    def publish(self, key, msg, time_ns) -> None:
        pass


def tabletop_loop(cfg, port=None, control_rate_hz=20.0, **kwargs) -> SimLoop:
    """The tabletop's loop at 16 px cameras (a Null port unless given)."""
    world = Tabletop(TabletopSettings(control_rate_hz=control_rate_hz, camera_size=16))
    return SimLoop(world, cfg, port or Null(), **kwargs)


def test_stale_or_zero_stamps():
    loop = tabletop_loop(SimConfig(episode_order(("push",), 3, 1)))
    loop.tick()  # the episode starts at 1 s
    target = HOME[None, :] + np.array([0.02] * 6 + [-0.02])  # the gripper is open at home
    loop.receive(trajectory_msg([0.0], target, START_NS - 1))  # before this episode
    loop.receive(trajectory_msg([0.0], target, 0))  # zero stamp: now
    loop.tick()
    loop.tick()
    np.testing.assert_allclose(loop.episode.sim.world.joints, target[0], atol=1e-12)
    assert dict(loop.episode.rejected) == {"previous_episode": 1}
    assert loop.episode.accepted == 1


def test_a_flood_of_trajectories_keeps_the_newest_and_counts_the_rest():
    loop = tabletop_loop(SimConfig(episode_order(("push",), 3, 1)))
    loop.tick()
    step = np.array([0.001] * 6 + [-0.001])  # the gripper is open at home
    for k in range(20):  # 16 fit in the inbox until the next tick
        loop.receive(trajectory_msg([0.0], HOME[None, :] + k * step, 0))
    loop.tick()
    assert dict(loop.episode.rejected) == {"inbox_full": 4}
    assert loop.episode.accepted == 16
    loop.tick()  # the newest one (k = 19) is the command
    np.testing.assert_allclose(loop.episode.sim.world.joints, HOME + 19 * step, atol=1e-12)


def test_a_trajectory_waiting_across_an_episode_change_is_counted_as_stale():
    loop = tabletop_loop(SimConfig(episode_order(("pick",), 0, 2), camera_rate_hz=1.0))
    while loop.tick() and loop.episode.end_ns is None:  # nothing drives: to the time limit
        pass
    first_start = loop.episode.start_ns
    target = HOME[None, :] + 0.01
    loop.receive(trajectory_msg([0.0], target, first_start + NS))  # for the ended episode
    loop.receive(trajectory_msg([0.0], target, 0))  # zero stamp: now, in the new one
    loop.tick()
    assert loop.episode.index == 1
    assert dict(loop.episode.rejected) == {"previous_episode": 1}
    assert loop.episode.accepted == 1


def test_a_switched_reset_drops_what_arrives_and_starts_the_episode_when_the_policy_is_on():
    """reset_ticks r: the policy is switched off before each reset; for r ticks the new
    world's sensors go out, the world stands and every trajectory (in transit too) is
    dropped as previous_episode; then the policy is switched on and the episode, its time
    limit and its stale-stamp rule start at the next tick."""
    calls: list[tuple[bool, int]] = []
    cfg = SimConfig(episode_order(("pick",), 0, 2), camera_rate_hz=1.0, reset_ticks=3,
                    command_delay_steps=1)  # fmt: skip
    loop = tabletop_loop(cfg, policy_switch=lambda on: calls.append((on, loop.ticks)))
    period = loop.world.period_ns
    target = HOME[None, :] + np.array([0.02] * 6 + [-0.02])  # the gripper is open at home
    loop.tick()  # the first reset tick: switched off, then the world reset
    assert calls == [(False, 0)]
    loop.receive(trajectory_msg([0.0], target, 0))  # the hold a node sends when switched off
    loop.tick()  # in transit for one tick ...
    loop.receive(trajectory_msg([0.0], target, START_NS + 10 * period))
    loop.tick()  # ... the last reset tick drops both and switches the policy on
    assert calls == [(False, 0), (True, 2)]
    ep = loop.episode
    assert ep.start_ns == START_NS + 3 * period and ep.sim.steps == 0
    assert dict(ep.rejected) == {"previous_episode": 2} and ep.accepted == 0
    np.testing.assert_array_equal(ep.sim.world.joints, HOME)
    loop.receive(trajectory_msg([0.0], target, START_NS + 2 * period))  # before the start
    loop.receive(trajectory_msg([0.0], target, 0))  # now
    loop.tick()  # in transit (command_delay_steps 1)
    loop.tick()
    assert dict(ep.rejected) == {"previous_episode": 3} and ep.accepted == 1
    loop.tick()
    np.testing.assert_allclose(ep.sim.world.joints, target[0], atol=1e-12)
    while loop.tick() and loop.episode.end_ns is None:  # nothing more: to the time limit
        pass
    loop.tick()  # closes the first episode and resets for the second
    (first,) = loop.outcomes
    assert (first.steps, first.duration_s, first.start_ns) == (200, 10.0, START_NS + 3 * period)
    assert calls[2:] == [(False, loop.ticks - 1)]
    assert loop.episode.index == 1 and loop.episode.start_ns == first.end_ns + period


def test_a_negative_reset_tick_count_is_refused():
    with pytest.raises(ValueError, match="reset_ticks"):
        SimConfig(episode_order(("push",), 3, 1), reset_ticks=-1)


class Switch:
    """A policy's ~/enable in the probe's context: it records each call and, when switched
    off, sends a hold as the oxygen node does (a zero-stamp trajectory at a pose of the
    ending episode, from the callback, before it answers), which must not run in the next
    episode. The hold is in the sim's reader before the answer goes out (acknowledged);
    the sim's executor takes it within the reset's ticks (1 s of sim time, 0.1 s of wall
    time here)."""

    def __init__(self, probe: Probe, answer: bool = True) -> None:
        self.probe, self.answer = probe, answer
        self.calls: list[bool] = []
        self.service = probe.node.create_service(SetBool, "/policy/enable", self._on_call)

    def _on_call(self, request, response):
        self.calls.append(request.data)
        if not request.data:
            self.probe.send(trajectory_msg([0.0], HOME[None, :] + 0.05, 0))
        response.success = self.answer
        response.message = "enabled" if request.data else "disabled"
        return response


def test_the_sim_switches_an_external_policy_off_and_on_around_each_reset(probe):
    switch = Switch(probe)
    sim = Sim("tabletop", probe, families=["pick"], episodes=2, real_time_factor=10.0,
              camera_size=16, camera_rate_hz=2.0, wait_for_peers_s=30.0,
              policy_enable_service="/policy/enable", reset_settle_s=1.0)  # fmt: skip
    try:
        sim.start()
        probe.wait(lambda: len(probe.get("/sim/episode")) == 2, "two outcomes", 120.0)
    finally:
        sim.close()
    first, second = probe.get("/sim/episode")
    period, settle = NS // 20, NS  # 1 s: 20 ticks
    # Off before each reset, on after its 20 ticks; the episode starts at the tick after.
    assert switch.calls == [False, True, False, True]
    assert stamp_to_ns(first.start) == START_NS + settle
    assert stamp_to_ns(second.start) == stamp_to_ns(first.header.stamp) + period + settle
    for outcome in (first, second):
        assert (outcome.steps, outcome.duration_s, outcome.trajectories_accepted) == (200, 10.0, 0)
    # Each hold sent when switched off was dropped: the arm stood at home throughout.
    rejected = [dict(zip(o.reject_reasons, o.reject_counts, strict=True)) for o in (first, second)]
    assert rejected == [{"previous_episode": 1}] * 2
    positions = np.array([m.position for m in probe.get("/joint_states")])
    np.testing.assert_array_equal(positions, np.broadcast_to(HOME, positions.shape))


def test_a_policy_that_refuses_its_switch_stops_the_run(probe):
    Switch(probe, answer=False)
    sim = Sim("tabletop", probe, families=["pick"], real_time_factor=25.0, camera_size=16,
              wait_for_peers_s=30.0, policy_enable_service="/policy/enable")  # fmt: skip
    try:
        sim.start()
        probe.wait(sim.node.finished.is_set, "the sim to stop")
    finally:
        sim.close()
    assert sim.node.stop.is_set() and probe.get("/sim/episode") == []


def test_record_round_trip_through_rosbags(tmp_path):
    cfg = SimConfig(episode_order(("pick",), 0, 1), "expert", camera_rate_hz=5.0)
    recording = record(tmp_path / "bag", Tabletop(TabletopSettings(camera_size=24)), cfg)
    counts, outcomes = recording.counts, recording.outcomes
    (outcome,) = outcomes
    ticks = outcome.steps + 1
    by_topic: dict[str, list] = collections.defaultdict(list)
    for message in read_bag(tmp_path / "bag"):
        by_topic[message.topic].append(from_cdr(message.data, message.msgtype))
    assert {t: len(ms) for t, ms in by_topic.items()} == {t: n for t, n in counts.items() if n}
    assert len(by_topic["/joint_states"]) == len(by_topic["/sim/expert/joint_trajectory"]) == ticks
    assert len(by_topic["/camera/base/image_raw"]) == math.ceil(ticks / 4)
    assert len(by_topic["/camera/wrist/image_raw"]) == math.ceil(ticks / 4)
    assert [m.data for m in by_topic["/sim/expert/narration"]] == list(outcome.narration)
    assert [m.data for m in by_topic["/sim/expert/memory"]] == list(outcome.memory)
    assert len(by_topic["/oxygen/instruction"]) == 1 + math.floor(outcome.duration_s)
    (episode,) = by_topic["/sim/episode"]
    assert episode.success and episode.steps == outcome.steps
    world = make_task("pick", 0).new_world()
    first = image_to_rgb(by_topic["/camera/wrist/image_raw"][0])
    np.testing.assert_array_equal(first, Renderer(24, 24).render(world, "wrist"))
    # The commanded trajectory is the expert's targets, stamped with the tick.
    first_command = by_topic["/sim/expert/joint_trajectory"][0]
    want = Expert(make_task("pick", 0), world).act(world, 0.05).targets
    np.testing.assert_array_equal(first_command.points[0].positions, want)
    assert stamp_to_ns(first_command.header.stamp) == START_NS
    np.testing.assert_array_equal(by_topic["/joint_states"][0].position, HOME)


@pytest.mark.slow
def test_sim_eval_expert_succeeds_in_every_family_over_topics(tmp_path):
    out = tmp_path / "eval"
    args = ["--policy", "expert", "--episodes", "1", "--rtf", "4", "--camera-size", "64"]
    assert evaluate.main([*args, "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["success"]["all"] == {
        "episodes": 3, "successes": 3, "rate": 1.0, "ci95": [0.4385, 1.0]
    }  # fmt: skip
    by_family = {e["family"]: e for e in report["episodes"]}
    for family in FAMILIES:
        reference = run_expert_episode(family, DEV.start)  # sim-eval's default first seed
        episode = by_family[family]
        assert episode["time_to_success_s"] == pytest.approx(reference.time_to_success, abs=1e-6)
        assert episode["narration"] == list(reference.narration)
        assert episode["chunks"] == reference.steps + 1
    assert report["trajectories_rejected"] == {} and report["seams"]["seams"] > 0
    with Image_.open(out / "episodes.gif") as gif:
        assert gif.n_frames > 10 and gif.size[0] == animation.WIDTH
    assert (out / "episodes.png").is_file() and (out / "output_bag" / "metadata.yaml").is_file()


@pytest.mark.slow
def test_sim_eval_runs_a_baseline_over_topics_with_the_params_horizons(tmp_path):
    out = tmp_path / "hold"
    args = ["--policy", "hold", "--families", "pick", "--episodes", "1", "--rtf", "8"]
    assert evaluate.main([*args, "--camera-size", "16", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["policy"] == "hold" and report["success"]["all"]["successes"] == 0
    (episode,) = report["episodes"]
    # config/sim.yaml executes 2 of 4 rows a frame: a chunk every other tick.
    assert episode["chunks"] == episode["steps"] // 2 + 1
    assert episode["contacts"] == {
        "grasped": False, "release_height": None, "finger_pushes": 0, "object_pushes": 0,
        "off_table": 0, "others_moved": 0.0,
    }  # fmt: skip


def test_shipped_sim_bag_is_a_replay_input_for_the_sim_params(tmp_path):
    root = Path(__file__).resolve().parents[1]
    bag, params = root / "data" / "sim_bag", root / "config" / "sim.yaml"
    job = Job.load(bag, params, tmp_path / "out")  # every input topic of the params is there
    assert job.names.cameras == ("/camera/base/image_raw", "/camera/wrist/image_raw")
    outcomes = [from_cdr(m.data, m.msgtype) for m in read_bag(bag, ["/sim/episode"])]
    assert [(o.family, o.seed, o.success) for o in outcomes] == [
        ("pick", 0, True),
        ("put", 0, True),
        ("push", 0, True),
    ]
    assert [i[1] for i in job.info("offline").instructions] == [o.instruction for o in outcomes]


def test_a_command_delay_holds_each_trajectory_for_that_many_ticks():
    """With command_delay_steps d the arm takes a trajectory d ticks after the one that
    would take it without delay."""
    loop = tabletop_loop(SimConfig(episode_order(("push",), 3, 1), command_delay_steps=2))
    loop.tick()
    target = HOME[None, :] + np.array([0.02] * 6 + [-0.02])  # the gripper is open at home
    loop.receive(trajectory_msg([0.0], target, 0))  # zero stamp: when the controller gets it
    for _ in range(2):
        loop.tick()
        np.testing.assert_allclose(loop.episode.sim.world.joints, HOME, atol=1e-12)
        assert loop.episode.accepted == 0
    loop.tick()
    assert loop.episode.accepted == 1
    loop.tick()
    np.testing.assert_allclose(loop.episode.sim.world.joints, target[0], atol=1e-12)


def test_a_negative_command_delay_is_refused():
    with pytest.raises(ValueError, match="command_delay_steps"):
        SimConfig(episode_order(("push",), 3, 1), command_delay_steps=-1)


@pytest.mark.slow
def test_sim_eval_echoes_the_trained_policys_texts_and_each_outcome(tmp_path, capsys):
    """The demo's run (`oxygen-demo --sim` is oxygen-eval node on config/sim_demo.yaml with
    --echo): the shipped policy narrates the instructed object and the outcome is a line."""
    root = Path(__file__).resolve().parents[1]
    seed = 100_000  # held out from training
    args = ["--params", str(root / "config" / "sim_demo.yaml"), "--families", "pick",
            "--episodes", "1", "--first-seed", str(seed), "--rtf", "4", "--camera-size", "128",
            "--echo", "--out", str(tmp_path / "eval")]  # fmt: skip
    assert evaluate.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    task = make_task("pick", seed)
    outcome = [line for line in lines if line.startswith(f"episode 1/1 pick seed {seed}: ")]
    assert len(outcome) == 1 and repr(task.instruction) in outcome[0]
    during = lines[: lines.index(outcome[0])]  # a text may still finish after the outcome
    narration = [line for line in during if line.startswith("  narration: ")]
    assert narration and any(task.objects[task.target].name in line for line in narration)
    assert all(a != b for a, b in itertools.pairwise(narration))  # only changes are echoed
