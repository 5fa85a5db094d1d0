"""oxygen-train --bags: records read back from an oxygen-record bag equal the in-process
expert's records exactly, bad bags fail in one line naming bag and topic, and a few
training steps on a bag write a checkpoint the policy loads."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from oxygen_core.config import IMAGE_SLOTS
from oxygen_core.model.checkpoint import TOKENIZER_FILE, TRAIN_CONFIG
from oxygen_core.policy import load_policy
from oxygen_core.train.records import Record, expert_episode
from oxygen_ros.tools import train
from oxygen_ros.tools.bag_records import BagError, Sources, bag_records, sources
from oxygen_ros.tools.bagio import BagMessage, BagWriter, Storage, from_cdr, read_bag, to_cdr
from oxygen_ros.tools.sim import record

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "config" / "sim.yaml"
SEEDS = (0, 1)
CAMERA = 56  # the tiny preset's image size: the node's resize leaves the images as rendered
HORIZON = 4
HZ = 20.0


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> Path:
    """Two pick episodes, a camera frame every control tick (as the in-process expert
    renders one per step)."""
    out = tmp_path_factory.mktemp("bags") / "pick"
    argv = [str(out), "--families", "pick", "--episodes", str(len(SEEDS))]
    argv += ["--camera-size", str(CAMERA), "--camera-rate", str(HZ), "--control-rate", str(HZ)]
    assert record.main(argv) == 0
    return out


@pytest.fixture(scope="module")
def src() -> Sources:
    return sources(PARAMS)


def _copy(
    bag: Path,
    out: Path,
    change: Callable[[BagMessage], BagMessage | None],
    storage: Storage = "mcap",
) -> Path:
    """`bag` rewritten message by message (None drops one)."""
    with BagWriter(out, storage, split_s=None) as writer:
        for message in read_bag(bag):
            changed = change(message)
            if changed is not None:
                writer.write(changed)
    return out


def test_records_from_the_bag_equal_the_in_process_expert_records(bag, src):
    got = bag_records(bag, src, HORIZON, CAMERA)
    want = [r for s in SEEDS for r in expert_episode("pick", s, HORIZON, CAMERA, HZ)]
    assert len(got) == len(want) > 2 * 30
    _assert_same(got, want)
    assert all(r.grounding == () for r in got)  # a bag does not know the scene
    # Episodes: the in-process names are "pick/<seed>"; a bag's are "<bag>#<episode>".
    assert _episodes(got) == [len([r for r in want if r.episode == f"pick/{s}"]) for s in SEEDS]
    assert {r.memory for r in got} > {""} and len({r.narration for r in got}) > 2


def _assert_same(got: list[Record], want: list[Record]) -> None:
    """The same observations, chunk targets and language targets, step by step, exactly."""
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.obs.images.keys() == b.obs.images.keys(), k
        for slot in a.obs.images:
            np.testing.assert_array_equal(a.obs.images[slot], b.obs.images[slot], err_msg=str(k))
        assert a.obs.state.dtype == b.obs.state.dtype and a.actions.dtype == b.actions.dtype
        np.testing.assert_array_equal(a.obs.state, b.obs.state, err_msg=str(k))
        np.testing.assert_array_equal(a.actions, b.actions, err_msg=str(k))
        assert (a.obs.prompt, a.narration, a.memory) == (b.obs.prompt, b.narration, b.memory), k


def test_an_sqlite3_copy_of_the_bag_gives_the_same_records(bag, src, tmp_path):
    copy = _copy(bag, tmp_path / "sqlite", lambda m: m, storage="sqlite3")
    assert next(copy.glob("*.db3"))
    _assert_same(bag_records(copy, src, HORIZON, CAMERA), bag_records(bag, src, HORIZON, CAMERA))


def _episodes(records: list[Record]) -> list[int]:
    names = list(dict.fromkeys(r.episode for r in records))
    return [sum(r.episode == n for r in records) for n in names]


def test_a_missing_topic_is_one_line_naming_the_bag_and_the_topic(bag, src, tmp_path):
    topic = "/sim/expert/joint_trajectory"
    broken = _copy(bag, tmp_path / "no_command", lambda m: None if m.topic == topic else m)
    with pytest.raises(BagError) as error:
        bag_records(broken, src, HORIZON, CAMERA)
    message = str(error.value)
    assert "\n" not in message and str(broken) in message and f"no topic {topic}" in message


def test_a_nan_joint_state_is_one_line_naming_the_bag_and_the_topic(bag, src, tmp_path):
    states = []

    def nan_in_the_tenth_state(message: BagMessage) -> BagMessage:
        if message.topic == "/joint_states":
            states.append(message)
            if len(states) == 10:
                msg = from_cdr(message.data, message.msgtype)
                msg.position[2] = math.nan
                return BagMessage(message.topic, message.msgtype, message.time_ns, to_cdr(msg))
        return message

    broken = _copy(bag, tmp_path / "nan", nan_in_the_tenth_state)
    with pytest.raises(BagError) as error:
        bag_records(broken, src, HORIZON, CAMERA)
    message = str(error.value)
    assert "\n" not in message and f"{broken} topic /joint_states" in message
    assert "JointState positions are not finite for joints ['joint_3']" in message


def test_steps_without_an_image_are_skipped_with_a_printed_count(bag, src, tmp_path):
    first = []

    def drop_first_wrist(message: BagMessage) -> BagMessage | None:
        if message.topic == "/camera/wrist/image_raw" and not first:
            first.append(message)
            return None
        return message

    broken = _copy(bag, tmp_path / "late_wrist", drop_first_wrist)
    lines: list[str] = []
    got = bag_records(broken, src, HORIZON, CAMERA, log=lines.append)
    assert len(got) == len(bag_records(bag, src, HORIZON, CAMERA)) - 1
    why = f"no image received yet from /camera/wrist/image_raw ({IMAGE_SLOTS[1]})"
    steps = len(got) + 1
    assert lines == [f"{broken}: skipped 1 of {steps} steps: missing_camera x1 (first: {why})"]


def test_an_episode_whose_outcome_failed_is_left_out_with_a_printed_count(bag, src, tmp_path):
    def first_failed(message: BagMessage) -> BagMessage:
        if message.topic != "/sim/episode":
            return message
        msg = from_cdr(message.data, message.msgtype)
        msg.success = msg.index != 0
        return BagMessage(message.topic, message.msgtype, message.time_ns, to_cdr(msg))

    broken = _copy(bag, tmp_path / "failed", first_failed)
    lines: list[str] = []
    got = bag_records(broken, src, HORIZON, CAMERA, log=lines.append)
    first, second = _episodes(bag_records(bag, src, HORIZON, CAMERA))
    assert len(got) == second and len(lines) == 1
    assert f"skipped {first} of {first + second} steps: failed_episode x{first}" in lines[0]


def test_a_few_steps_on_a_bag_write_a_checkpoint_the_policy_loads(bag, src, tmp_path):
    out, work = tmp_path / "ckpt", tmp_path / "work"
    common = ["--bags", str(bag), "--params", str(PARAMS), "--out", str(out), "--work", str(work)]
    common += ["--preset", "tiny", "--steps", "2", "--batch-size", "2"]
    train.main([*common, "--robot", "sim", "--val-every-episode", "2"])
    meta = json.loads((out / TRAIN_CONFIG).read_text())
    [episodes] = work.glob(f"bags-*-{CAMERA}.npz")
    assert meta["episodes"] == str(episodes) and meta["train"]["steps"] == 2
    assert meta["action_horizon"] == HORIZON  # the horizon the node checks it is run at
    # What the bags were recorded at (not oxygen-train's sim default), the bags, no sim seeds.
    assert (meta["camera_size"], meta["bags"]) == (CAMERA, [str(bag)])
    assert not {"families", "seeds", "first_seed", "dart"} & set(meta)
    steps = len(bag_records(bag, src, HORIZON, CAMERA))
    assert meta["train_steps"] + meta["val_steps"] == steps and meta["val_steps"] > 0
    policy = load_policy("tiny", "sim", out, out / TOKENIZER_FILE)
    assert policy.robot.name == "sim" and policy.tokenizer is not None
    # A robot that plans from the grounding rows cannot train on bags alone.
    with pytest.raises(SystemExit, match="no grounding rows"):
        train.main([*common, "--robot", "sim_plan"])
