"""oxygen-record --world metaworld and `oxygen-train --bags` on its bags: the expert's clean action
as the bag's target while the env ran it with DART noise, records equal to a direct
rollout step by step (through the node's FrameAssembler), bad bags in one line, evaluation
seeds refused, and the trainer's episodes for the robot the params file declares (a few
training steps cost a compile, 40 s here: test_train_bags runs them on a tabletop bag).

Expected values come from the env stepped directly: MuJoCo is deterministic, so a direct
rollout that executes clip(clean + the episode's noise offset) each step visits exactly
the states the recording did, and the scripted policy on those observations gives
exactly the actions the bag holds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from metaworld_harness import require_metaworld

require_metaworld()  # before anything imports mujoco

from oxygen_core.metaworld.env import Expert, MetaWorldEnv  # noqa: E402
from oxygen_core.metaworld.episode import noise_rng  # noqa: E402
from oxygen_core.metaworld.tasks import Narrator, instruction  # noqa: E402
from oxygen_core.train import dataset as D  # noqa: E402
from oxygen_core.train.records import METAWORLD_DART, DartNoise  # noqa: E402
from oxygen_ros.tools import train  # noqa: E402
from oxygen_ros.tools.bag_records import BagError, bag_records, sources  # noqa: E402
from oxygen_ros.tools.bagio import BagMessage, BagWriter, from_cdr, read_bag, to_cdr  # noqa: E402
from oxygen_ros.tools.sim import record  # noqa: E402

pytestmark = [
    pytest.mark.ros,
    # The scripted policies' gains are above 1 on purpose (the loop clips): not news here.
    pytest.mark.filterwarnings("ignore:Constant.*may be too high:UserWarning"),
]

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "config" / "metaworld.yaml"
TASK = "reach-v3"  # the shortest expert episodes (about 60 steps)
SEEDS = (0, 1)
CAMERA = 56  # the tiny preset's image size: the node's resize leaves the images as rendered
EVERY = 4  # camera frames every 4th tick (20 Hz of the env's 80)
HORIZON = 4


@dataclasses.dataclass(frozen=True)
class Step:
    """One tick of a direct rollout: what the robot showed and what the expert did."""

    image: np.ndarray  # the latest camera frame (rendered every EVERY steps)
    state: np.ndarray
    clean: np.ndarray  # the expert's action clipped to [-1, 1]: the target
    executed: np.ndarray  # what the env ran: clean plus the noise offset, clipped
    narration: str
    memory: str


def _direct(seed: int) -> list[Step]:
    """The recorder's episode of `seed` without ROS or bag: the env stepped with the
    expert's clean action plus the episode's noise (METAWORLD_DART)."""
    env, expert, narrator = MetaWorldEnv(TASK, CAMERA), Expert(TASK), Narrator(TASK)
    noise = DartNoise(METAWORLD_DART, noise_rng(TASK, seed), 4)
    try:
        obs, steps, image, memory = env.reset(seed, render=True), [], None, ""
        while True:
            image = obs.image if obs.image is not None else image
            line = narrator.update(obs)
            memory = line.memory or memory
            clean = np.clip(expert.act(obs), -1.0, 1.0)
            executed = np.clip(clean + noise.offset(), -1.0, 1.0)
            steps.append(Step(image, obs.state, clean, executed, line.narration, memory))
            if obs.success or obs.steps >= env.max_path_length:
                return steps
            obs = env.step(executed, render=(obs.steps + 1) % EVERY == 0)
    finally:
        env.close()


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> Path:
    """Two noisy expert episodes of one task, at the model's image size."""
    out = tmp_path_factory.mktemp("mw") / "reach"
    argv = [str(out), "--tasks", TASK, "--episodes", str(len(SEEDS)), "--first-seed", str(SEEDS[0])]
    assert record.metaworld([*argv, "--camera-size", str(CAMERA)]) == 0
    return out


@pytest.fixture(scope="module")
def direct() -> list[list[Step]]:
    return [_direct(seed) for seed in SEEDS]


@pytest.fixture(scope="module")
def src():
    return sources(PARAMS)


def test_the_bag_holds_the_clean_expert_while_the_env_ran_it_with_noise(bag, direct):
    chunks, states = _read(bag, "/metaworld/expert/action_chunk"), _read(bag, "/metaworld/state")
    steps = [s for episode in direct for s in episode]
    assert len(chunks) == len(states) == len(steps)
    # The states are the direct rollout's that executed clean + noise: the noise ran...
    np.testing.assert_array_equal([m.position for m in states], [s.state for s in steps])
    # ...and the bag's chunk is the scripted policy's action on those observations, exact.
    assert {(m.horizon, m.action_dim) for m in chunks} == {(1, 4)}
    np.testing.assert_array_equal([m.actions for m in chunks], [s.clean for s in steps])
    noisy = [not np.array_equal(s.clean, s.executed) for s in steps]
    assert 5 < sum(noisy) < len(steps) / 2  # bursts, not a constant offset
    outcomes = [json.loads(m.data) for m in _read(bag, "/metaworld/episode")]
    assert [(o["seed"], o["success"], o["steps"]) for o in outcomes] == [
        (seed, True, len(episode) - 1) for seed, episode in zip(SEEDS, direct, strict=True)
    ]


def _read(bag: Path, topic: str) -> list:
    return [from_cdr(m.data, m.msgtype) for m in read_bag(bag, [topic])]


def test_records_from_the_bag_equal_the_direct_rollout_step_by_step(bag, direct, src):
    records = bag_records(bag, src, HORIZON, CAMERA)
    assert [len(e) for e in _episodes(records)] == [len(e) for e in direct]
    for episode, want in zip(_episodes(records), direct, strict=True):
        clean = np.asarray([s.clean for s in want], np.float32)
        for k, (got, step) in enumerate(zip(episode, want, strict=True)):
            np.testing.assert_array_equal(got.obs.images["base_0_rgb"], step.image, err_msg=k)
            np.testing.assert_array_equal(got.obs.state, step.state.astype(np.float32))
            rows = clean[np.minimum(np.arange(k, k + HORIZON), len(clean) - 1)]  # last held
            np.testing.assert_array_equal(got.actions, rows, err_msg=str(k))
            assert (got.obs.prompt, got.narration, got.memory) == (
                instruction(TASK),
                step.narration,
                step.memory,
            ), k
    assert {r.memory for r in records} == {"", "goal reached"}


def _episodes(records: list) -> list[list]:
    names = list(dict.fromkeys(r.episode for r in records))
    return [[r for r in records if r.episode == n] for n in names]


def _copy(bag: Path, out: Path, change: Callable[[BagMessage], BagMessage | None]) -> Path:
    """`bag` rewritten message by message (None drops one)."""
    with BagWriter(out, split_s=None) as writer:
        for message in read_bag(bag):
            changed = change(message)
            if changed is not None:
                writer.write(changed)
    return out


def test_a_bag_without_the_action_topic_fails_in_one_line_naming_it_and_the_bag(bag, src, tmp_path):
    topic = "/metaworld/expert/action_chunk"
    broken = _copy(bag, tmp_path / "no_action", lambda m: None if m.topic == topic else m)
    with pytest.raises(BagError) as error:
        bag_records(broken, src, HORIZON, CAMERA)
    message = str(error.value)
    assert "\n" not in message and str(broken) in message and f"no topic {topic}" in message


def _outcome(text: Callable[[dict], str]) -> Callable[[BagMessage], BagMessage]:
    """A change of the first /metaworld/episode outcome's JSON text."""

    def change(message: BagMessage) -> BagMessage:
        if message.topic != "/metaworld/episode":
            return message
        msg = from_cdr(message.data, message.msgtype)
        outcome = json.loads(msg.data)
        if outcome["index"] == 0:
            msg.data = text(outcome)
        return BagMessage(message.topic, message.msgtype, message.time_ns, to_cdr(msg))

    return change


def test_a_failed_json_outcome_leaves_its_episode_out_and_a_bad_one_fails(bag, src, tmp_path):
    failure = _outcome(lambda o: json.dumps({**o, "success": False}))
    failed = _copy(bag, tmp_path / "failed", failure)
    lines: list[str] = []
    got = bag_records(failed, src, HORIZON, CAMERA, log=lines.append)
    first, second = (len(e) for e in _episodes(bag_records(bag, src, HORIZON, CAMERA)))
    assert len(got) == second and len(lines) == 1
    assert f"skipped {first} of {first + second} steps: failed_episode x{first}" in lines[0]
    broken = _copy(bag, tmp_path / "not_json", _outcome(lambda o: "success"))
    with pytest.raises(BagError, match=f"^{broken} topic /metaworld/episode at log time"):
        bag_records(broken, src, HORIZON, CAMERA)


@pytest.mark.parametrize("seed, episodes, span", [(500_000, 1, "test"), (399_990, 20, "dev")])
def test_seeds_of_an_evaluation_range_are_refused(tmp_path, capsys, seed, episodes, span):
    out = tmp_path / "bag"
    argv = [str(out), "--tasks", TASK, "--first-seed", str(seed), "--episodes", str(episodes)]
    assert record.metaworld(argv) == 1
    assert f"reach into the {span} seeds" in capsys.readouterr().err and not out.exists()


def test_the_trainer_takes_the_robot_the_params_declare(bag, src, tmp_path, capsys):
    """oxygen-train --bags without --robot trains the params' robot (robots.metaworld:
    4 state and 4 action columns, one camera); --robot names a preset instead."""
    common = ["--bags", str(bag), "--params", str(PARAMS), "--work", str(tmp_path)]
    train.main([*common, "--preset", "tiny", "--episodes-only"])
    data = D.Episodes.load(Path(capsys.readouterr().out.strip().splitlines()[-1]))
    records = bag_records(bag, src, HORIZON, CAMERA)
    assert (data.state.shape, data.actions.shape) == ((len(records), 4), (len(records), 4, 4))
    assert data.image_mask.all(axis=0).tolist() == [True, False, False]  # base_0_rgb only
    assert train.trained_robot(src.settings.robot, None).name == "metaworld"
    with pytest.raises(SystemExit, match="robot sim has state_dim 7 and action_dim 7"):
        train.main([*common, "--preset", "tiny", "--robot", "sim", "--episodes-only"])
