"""Meta-World through the node: the env wrapper (oxygen_core.metaworld), its tasks and
language, and oxygen-sim --world metaworld over real rclpy topics.

Expected values come from MuJoCo itself (the hand body's position, the fingers' qpos) or
from the same env stepped directly with the same actions: MuJoCo is deterministic, so what
the sim node publishes for a seed equals a direct rollout exactly. The ROS test follows
test_sim_node: the sim runs in this process in its own context, the probe in another,
every topic is matched from both ends and the probe's chunks are in the sim's reader
before its first tick, so their effect falls on known ticks.
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from metaworld_harness import require_metaworld

require_metaworld()  # before anything imports mujoco

from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import Image, JointState  # noqa: E402
from sim_harness import Probe, Sim  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from oxygen_core.config import model_preset  # noqa: E402
from oxygen_core.metaworld.baselines import (  # noqa: E402
    RANDOM_HOLD_STEPS,
    BlindExpert,
    RandomActor,
    average_scene,
    blind_observation,
)
from oxygen_core.metaworld.env import (  # noqa: E402
    ACTION_NAMES,
    SAWYER_JOINTS,
    STATE_NAMES,
    Expert,
    MetaWorldEnv,
)
from oxygen_core.metaworld.episode import (  # noqa: E402
    CONTROL_PERIOD_NS,
    Chunk,
    ChunkRunner,
    MetaWorld,
)
from oxygen_core.metaworld.tasks import MT10_TASKS, TASK_TEXTS, Narrator  # noqa: E402
from oxygen_ros.convert import image_to_rgb, stamp_to_ns  # noqa: E402
from oxygen_ros.msg import ActionChunk  # noqa: E402
from oxygen_ros.params import fit_to_model  # noqa: E402
from oxygen_ros.tools.configure import load_settings  # noqa: E402
from oxygen_ros.tools.sim.lockstep import LockstepMarks, lockstep_due  # noqa: E402
from oxygen_ros.tools.sim.loop import SimConfig, SimLoop  # noqa: E402
from oxygen_ros.tools.sim.metaworld import (  # noqa: E402
    ACTION_TOPIC,
    TOPICS,
    chunk_msg,
    chunk_rejection,
)
from oxygen_ros.topics import ACTION_CHUNK  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NS = 1_000_000_000
START_NS = NS  # the sim's first tick
TASK = "drawer-open-v3"
# The scripted policies' gains are above 1 on purpose (the env clips): not news here.
pytestmark = pytest.mark.filterwarnings("ignore:Constant.*may be too high:UserWarning")


@pytest.fixture
def env():
    e = MetaWorldEnv(TASK, camera_size=32)
    yield e
    e.close()


def _rollout(
    task: str, seed: int, act: Callable[[MetaWorldEnv, object], object]
) -> tuple[list[np.ndarray], object]:
    """A direct episode without ROS: the states after each step, and the last observation."""
    e = MetaWorldEnv(task, camera_size=16)
    try:
        obs = e.reset(seed, render=False)
        states = [obs.state]
        while not obs.success and obs.steps < e.max_path_length:
            obs = e.step(act(e, obs), render=False)
            states.append(obs.state)
        return states, obs
    finally:
        e.close()


# ------------------------------------------------------------------ the env wrapper


def test_the_observation_is_lerobots_and_mujocos_on_a_fixed_seed(env):
    obs = env.reset(0)
    data = env.data
    # State: the hand body's position and the fingers' opening, as LeRobot's agent_pos.
    np.testing.assert_array_equal(obs.state[:3], data.body("hand").xpos)
    opening = np.linalg.norm(data.body("rightclaw").xpos - data.body("leftclaw").xpos) / 0.1
    assert obs.state[3] == np.clip(opening, 0.0, 1.0) == 1.0
    np.testing.assert_allclose(obs.state[:3], [0.0045629838, 0.6014653574, 0.1951884195], atol=1e-9)
    qpos = [data.qpos[env._env.model.joint(n).qposadr[0]] for n in SAWYER_JOINTS]
    np.testing.assert_array_equal(obs.joints, qpos)
    assert len(SAWYER_JOINTS) == 9 and obs.joints[0] == pytest.approx(1.8892881452, abs=1e-9)
    assert (obs.success, obs.steps, env.max_path_length) == (False, 0, 500)
    assert env.control_period_s == pytest.approx(CONTROL_PERIOD_NS / NS)
    # The image: corner2 at the asked size, MuJoCo's upside-down render turned upright.
    assert obs.image.shape == (32, 32, 3) and obs.image.dtype == np.uint8
    env._renderer.update_scene(data, camera="corner2")
    np.testing.assert_array_equal(obs.image, env._renderer.render()[::-1, ::-1])
    # A seed is one episode: the same again, another seed another placement.
    np.testing.assert_array_equal(env.reset(0).raw, obs.raw)
    assert not np.array_equal(env.reset(1).raw[4:7], obs.raw[4:7])


def test_actions_are_clipped_and_a_malformed_one_is_held_and_counted(env):
    env.reset(0, render=False)
    mocap = env.data.mocap_pos.copy()
    env.step([2.0, 0.0, -0.5, 1.0], render=False)  # dx clipped to 1: the mocap moves 1 cm
    np.testing.assert_allclose(env.data.mocap_pos - mocap, [[0.01, 0.0, -0.005]], atol=1e-9)
    assert (env.counts.steps, env.counts.clipped, env.counts.malformed) == (1, 1, 0)
    np.testing.assert_array_equal(env.hold(), [0.0, 0.0, 0.0, 1.0])  # the last gripper effort
    mocap = env.data.mocap_pos.copy()
    env.step([np.nan, 1.0, 1.0, -1.0], render=False)
    env.step([1.0, 1.0, 1.0], render=False)  # 3 numbers
    env.step("open", render=False)
    np.testing.assert_array_equal(env.data.mocap_pos, mocap)  # held: no delta reached MuJoCo
    assert (env.counts.steps, env.counts.clipped, env.counts.malformed) == (4, 1, 3)
    np.testing.assert_array_equal(env.hold(), [0.0, 0.0, 0.0, 1.0])


def test_the_step_limit_is_the_benchmarks(env):
    env.reset(0, render=False)
    for _ in range(env.max_path_length):
        obs = env.step(env.hold(), render=False)
    assert (obs.success, obs.steps) == (False, 500)
    with pytest.raises(RuntimeError, match="step limit"):
        env.step(env.hold(), render=False)


@pytest.mark.parametrize("task", ["drawer-open-v3", "pick-place-v3"])
def test_the_scripted_expert_succeeds_within_the_step_limit(task):
    expert = Expert(task)
    _, obs = _rollout(task, 0, lambda e, o: expert.act(o))
    assert obs.success and obs.steps < 500


# ------------------------------------------------------------------ tasks and language


def test_every_mt10_task_has_an_instruction_and_lines():
    import metaworld

    assert MT10_TASKS == tuple(metaworld.env_dict.MT10_V3)
    assert set(TASK_TEXTS) == set(MT10_TASKS)
    assert TASK_TEXTS["drawer-open-v3"].instruction == "open the drawer"
    assert TASK_TEXTS["push-v3"].instruction == "push the puck to the goal"
    assert len({t.instruction for t in TASK_TEXTS.values()}) == len(MT10_TASKS)


def test_the_narration_follows_the_experts_phases():
    expert, narrator = Expert("pick-place-v3"), Narrator("pick-place-v3")
    narration, memory = [], []

    def act(e, obs):
        line = narrator.update(obs)
        if not narration or narration[-1] != line.narration:
            narration.append(line.narration)
        memory.extend([line.memory] if line.memory else [])
        return expert.act(obs)

    _, obs = _rollout("pick-place-v3", 0, act)
    act(None, obs)
    assert narration == [
        "reaching the puck",
        "grasping the puck",
        "carrying the puck to the goal",
        "puck placed at the goal",
    ]
    assert memory == ["reached the puck", "grasped the puck", "puck placed at the goal"]


# ------------------------------------------------------------------ chunks


def test_a_malformed_chunk_names_its_reason():
    good = chunk_msg(np.zeros((4, 4)), START_NS)
    assert chunk_rejection(good) is None
    assert chunk_rejection(chunk_msg(np.zeros((4, 3)), START_NS)) == "shape"
    short = chunk_msg(np.zeros((4, 4)), START_NS)
    short.horizon = 5
    assert chunk_rejection(short) == "shape"
    named = chunk_msg(np.zeros((4, 4)), START_NS)
    named.joint_names = ["x", "y", "z", "g"]
    assert chunk_rejection(named) == "action_names"
    assert chunk_rejection(chunk_msg(np.full((2, 4), np.nan), START_NS)) == "non_finite"
    slow = chunk_msg(np.zeros((4, 4)), START_NS)
    slow.control_period.nanosec = 50_000_000
    assert chunk_rejection(slow) == "control_period"
    assert tuple(good.joint_names) == ACTION_NAMES


def test_rows_run_from_the_stamp_past_ones_skipped_a_newer_chunk_supersedes():
    p, runner = CONTROL_PERIOD_NS, ChunkRunner()
    rows = np.arange(12.0).reshape(3, 4)
    runner.add(Chunk(10 * p, rows))
    assert runner.row_at(9 * p) is None  # not started: hold
    np.testing.assert_array_equal(runner.row_at(11 * p), rows[1])  # row 0 is past
    assert runner.row_at(13 * p) is None  # used up: hold
    runner.add(Chunk(12 * p, rows + 100))
    runner.add(Chunk(20 * p, rows + 200))
    np.testing.assert_array_equal(runner.row_at(12 * p), rows[0] + 100)
    np.testing.assert_array_equal(runner.row_at(20 * p), rows[0] + 200)


def test_lockstep_learns_the_frame_grid_then_waits_at_each_due_tick_for_frame_and_chunk():
    """Frames every 3 ticks: the first (overdue at the first clock) is off the grid, the
    second shows it; then a tick runs once the frame of its latest due tick and that
    frame's chunk are in, and a frame let go counts as done."""
    p, marks = CONTROL_PERIOD_NS, LockstepMarks()
    due = functools.partial(lockstep_due, marks, frame_ticks=3, period_ns=p)
    assert not due(t=80 * p)  # no frame yet
    marks.finished(80 * p, 0)
    assert due(t=80 * p) and not due(t=81 * p)
    marks.finished(81 * p, 1)  # the timer's first due tick: the grid is 81 + 3k
    assert marks.grid_ns == 81 * p
    assert not due(t=82 * p)  # frame 1's chunk is not here yet
    marks.commanded(1)
    assert due(t=82 * p) and due(t=83 * p)
    assert not due(t=84 * p)  # due at 84
    marks.finished(84 * p, 2)
    marks.commanded(2)
    assert due(t=86 * p) and not due(t=87 * p)
    marks.let_go(87 * p)  # the node skipped the frame at 87
    assert due(t=89 * p) and not due(t=90 * p)


class _Port:
    def __init__(self) -> None:
        self.sent: dict[str, list] = collections.defaultdict(list)

    def publish(self, key: str, msg: object, time_ns: int) -> None:
        self.sent[key].append(msg)


def _loop_episode(policy: str) -> tuple[_Port, dict]:
    """One reach-v3 episode (seed 0) of the sim loop driven by `policy`: what it sent, its
    outcome."""
    port = _Port()
    loop = SimLoop(MetaWorld(camera_size=16), SimConfig((("reach-v3", 0),), policy), port)
    try:
        while loop.tick():
            pass
    finally:
        loop.close()
    (outcome,) = loop.outcomes
    return port, outcome


def test_the_expert_through_the_loops_chunks_succeeds_as_in_the_env():
    expert = Expert("reach-v3")
    _, direct = _rollout("reach-v3", 0, lambda e, o: expert.act(o))
    port, outcome = _loop_episode("expert")
    assert outcome["success"] and outcome["steps"] == direct.steps
    assert outcome["chunks_accepted"] == direct.steps + 1 and outcome["held_steps"] == 0
    assert json.loads(port.sent["episode"][0].data) == outcome
    assert len(port.sent["expert_chunk"]) == direct.steps + 1


def test_the_hold_baseline_is_the_hold_action_sent_as_chunks():
    """policy hold: every tick a one-row chunk of zero deltas and the gripper as it was,
    taken as any chunk is: the episode equals a direct rollout of env.hold()."""
    states, direct = _rollout("reach-v3", 0, lambda e, o: e.hold())
    port, outcome = _loop_episode("hold")
    assert (outcome["success"], outcome["steps"]) == (direct.success, direct.steps)
    assert outcome["chunks_accepted"] == direct.steps + 1 and outcome["held_steps"] == 0
    assert outcome["actions_clipped"] == outcome["actions_malformed"] == 0
    published = [np.array(m.position) for m in port.sent["state"]]
    np.testing.assert_array_equal(published, states)  # the same episode, step by step
    # The hand stays within 1 cm: it only settles onto its mocap weld after the reset.
    np.testing.assert_allclose(states[-1], states[0], atol=0.01)
    assert "expert_chunk" not in port.sent  # nothing of the expert's runs


def test_the_blind_expert_reads_the_hand_but_the_average_scene_not_this_one(env):
    """Hand fields come from the episode, object and goal fields from the mean of MT1's
    sampled tasks at the reference seed, whichever seed the episode has."""
    obs = env.reset(400000, render=False)
    scene = average_scene(TASK)
    blind = blind_observation(obs, scene).raw
    np.testing.assert_array_equal(blind[:4], obs.raw[:4])  # hand and fingers, now
    np.testing.assert_array_equal(blind[18:22], obs.raw[18:22])  # and a step before
    np.testing.assert_array_equal(blind[4:18], scene[4:18])
    np.testing.assert_array_equal(blind[36:], scene[36:])
    assert not np.allclose(obs.raw[4:7], scene[4:7], atol=1e-3)  # this drawer stands elsewhere
    other = env.reset(400001, render=False)
    np.testing.assert_array_equal(
        blind_observation(other, scene).raw[4:], np.r_[scene[4:18], other.raw[18:22], scene[22:]]
    )
    action = BlindExpert(TASK)(obs)
    expert = np.clip(Expert(TASK).act(blind_observation(obs, scene)), -1.0, 1.0)
    np.testing.assert_array_equal(action, expert)


def test_the_random_baseline_is_seeded_and_holds_each_draw_for_a_second(env):
    obs = env.reset(0, render=False)
    first, again = RandomActor(TASK, 7), RandomActor(TASK, 7)
    actions = []
    for _ in range(2 * RANDOM_HOLD_STEPS + 1):
        action = first(obs)
        np.testing.assert_array_equal(action, again(obs))
        actions.append(action.copy())
        obs = env.step(action, render=False)
    assert np.all(np.abs(actions) <= 1.0)
    assert all((a == actions[0]).all() for a in actions[:RANDOM_HOLD_STEPS])
    assert not (actions[RANDOM_HOLD_STEPS] == actions[0]).any()
    assert not (actions[2 * RANDOM_HOLD_STEPS] == actions[RANDOM_HOLD_STEPS]).any()
    assert not (RandomActor(TASK, 8)(env.reset(0, render=False)) == actions[0]).any()


@pytest.mark.parametrize("policy", ["random", "blind"])
def test_a_baseline_through_the_loops_chunks_is_its_direct_rollout(policy):
    actor = RandomActor("reach-v3", 0) if policy == "random" else BlindExpert("reach-v3")
    states, direct = _rollout("reach-v3", 0, lambda e, o: actor(o))
    port, outcome = _loop_episode(policy)
    assert (outcome["success"], outcome["steps"]) == (direct.success, direct.steps)
    assert outcome["held_steps"] == outcome["actions_malformed"] == 0
    np.testing.assert_array_equal([np.array(m.position) for m in port.sent["state"]], states)


# ------------------------------------------------------------------ the params file


@pytest.mark.ros
@pytest.mark.parametrize(
    ("params", "preset"), [("metaworld.yaml", "tiny"), ("metaworld_mt10.yaml", "demo")]
)
def test_the_params_file_loads_and_matches_the_sims_topics_and_rate(params, preset):
    """The params files read by the node's own code fit their model and the sim: the tiny
    model's (random weights) and the trained policy's, whose checkpoint is in the tree."""
    settings, topics = load_settings(ROOT / "config" / params)
    cfg, robot = settings.node, settings.robot
    assert cfg.preset == preset
    if preset == "demo":
        assert (ROOT / cfg.checkpoint_dir / "assets" / "metaworld").is_dir()
    assert (robot.name, robot.action_dim, robot.state_dim) == ("metaworld", 4, 4)
    assert robot.cameras == ("base_0_rgb",)
    layout = fit_to_model(cfg, model_preset(cfg.preset), robot)
    assert layout.action_names == ACTION_NAMES and not cfg.joint_trajectory
    assert cfg.joint_names == STATE_NAMES
    defaults = {t.key: t.topic for t in TOPICS}
    assert topics.cameras == (defaults["camera/corner2"],)
    assert (topics.joint_state, topics.instruction) == (defaults["state"], defaults["instruction"])
    assert topics.output(ACTION_CHUNK) == ACTION_TOPIC
    assert cfg.control_period_s == pytest.approx(CONTROL_PERIOD_NS / NS)


# ------------------------------------------------------------------ the ROS node


PROBED = (
    ("/clock", Clock),
    ("/metaworld/corner2/image_raw", Image),
    ("/metaworld/state", JointState),
    ("/metaworld/joint_states", JointState),
    ("/oxygen/instruction", String),
    ("/metaworld/episode", String),
)


@pytest.mark.ros
def test_the_sim_node_publishes_sensors_runs_a_chunk_and_rejects_malformed_ones():
    probe = Probe(PROBED, (ACTION_TOPIC, ActionChunk))
    # 2 x real time: 500 steps in about 3 s; every sample has time to reach the probe.
    sim = Sim(
        "metaworld", probe, tasks=[TASK], real_time_factor=2.0, camera_size=32, camera_rate_hz=20.0
    )
    p = CONTROL_PERIOD_NS
    push = np.tile([1.0, 0.0, 0.0, -1.0], (8, 1))  # +1 cm in x per step, gripper open
    nan = chunk_msg(push * np.nan, START_NS)
    names = chunk_msg(push, START_NS)
    names.joint_names = ["a", "b", "c", "d"]
    wide = chunk_msg(np.zeros((2, 5)), START_NS)
    try:
        sim.start(nan, chunk_msg(push, START_NS + 4 * p), names, wide)
        probe.wait(lambda: probe.get("/metaworld/episode"), "the episode's outcome", 120.0)
    finally:
        sim.close()
        probe.close()
    # The env stepped directly: hold for 4 steps, the chunk's 8 rows, then hold again.
    expected, _ = _rollout(TASK, 0, lambda e, o: push[0] if 4 <= o.steps < 12 else e.hold())
    states = {
        stamp_to_ns(m.header.stamp): np.array(m.position) for m in probe.get("/metaworld/state")
    }
    assert len(states) > 250 and list(probe.get("/metaworld/state")[0].name) == list(STATE_NAMES)
    for stamp, state in states.items():
        np.testing.assert_array_equal(state, expected[(stamp - START_NS) // p], err_msg=stamp)
    # The hand went where the chunk said: 8 x 1 cm in x (the weld lags and settles short).
    np.testing.assert_allclose(expected[60][:3] - expected[0][:3], [0.08, 0, 0], atol=0.006)
    joints = probe.get("/metaworld/joint_states")
    assert list(joints[0].name) == list(SAWYER_JOINTS)
    # Camera at 20 Hz (every 4th tick), upright, as the env renders the seed's first frame.
    images = probe.get("/metaworld/corner2/image_raw")
    assert (images[0].encoding, images[0].width, images[0].height) == ("rgb8", 32, 32)
    assert stamp_to_ns(images[0].header.stamp) == START_NS
    e = MetaWorldEnv(TASK, camera_size=32)
    try:
        np.testing.assert_array_equal(image_to_rgb(images[0]), e.reset(0).image)
    finally:
        e.close()
    assert probe.get("/oxygen/instruction")[0].data == "open the drawer"
    clock = [stamp_to_ns(m.clock) for m in probe.get("/clock")]
    assert clock[0] == START_NS and set(np.diff(clock) % p) == {0} and min(np.diff(clock)) > 0
    # One accepted chunk, three rejected by reason; every other step held.
    outcome = json.loads(probe.get("/metaworld/episode")[0].data)
    assert outcome["chunks_accepted"] == 1
    assert outcome["chunks_rejected"] == {"action_names": 1, "non_finite": 1, "shape": 1}
    assert (outcome["steps"], outcome["held_steps"], outcome["success"]) == (500, 492, False)
    assert outcome["actions_malformed"] == 0  # no rejected chunk reached the env
