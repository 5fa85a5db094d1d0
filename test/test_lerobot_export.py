"""oxygen-bag to-lerobot on data/sim_bag, read back with pyarrow and PyAV directly.

The expectations come from the bag itself, not from the exporter's plan: the sim renders
one image per camera per 0.1 s and publishes the joint state and the expert's trajectory
at the same stamps, and each EpisodeOutcome says when its episode started and ended, so
every image of an episode is one frame, and its state and action are the messages of the
same stamp. LeRobot's own reader is checked by scripts/check_lerobot_export.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from oxygen_ros.convert import image_to_rgb, joint_positions, stamp_to_ns
from oxygen_ros.tools.bagio import BagWriter, from_cdr, read_bag
from oxygen_ros.tools.lerobot_export import export, main

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]
BAG, PARAMS = ROOT / "data/sim_bag", ROOT / "config/sim.yaml"
CAMERAS = {"observation.images.base": "/camera/base/image_raw",
           "observation.images.wrist": "/camera/wrist/image_raw"}  # fmt: skip
JOINTS = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper"]


@pytest.fixture(scope="module")
def bag() -> dict:
    """What the bag holds, by stamp."""
    held: dict = {"images": {t: {} for t in CAMERAS.values()}, "state": {}, "action": {}}
    held["episodes"] = []
    for m in read_bag(BAG):
        msg = from_cdr(m.data, m.msgtype)
        if m.topic in held["images"]:
            held["images"][m.topic][stamp_to_ns(msg.header.stamp)] = image_to_rgb(msg).copy()
        elif m.topic == "/joint_states":
            held["state"][stamp_to_ns(msg.header.stamp)] = joint_positions(msg, JOINTS)
        elif m.topic == "/sim/expert/joint_trajectory":
            assert list(msg.joint_names) == JOINTS
            held["action"][stamp_to_ns(msg.header.stamp)] = np.float32(msg.points[0].positions)
        elif m.topic == "/sim/episode":
            start, end = stamp_to_ns(msg.start), stamp_to_ns(msg.header.stamp)
            held["episodes"].append((start, end, msg.instruction))
    return held


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lerobot") / "sim"
    assert main([str(BAG), "--out", str(out), "--params", str(PARAMS)]) == 0
    return out


def episode_stamps(bag: dict) -> list[list[int]]:
    """The first camera's image stamps within each episode's [start, end]."""
    stamps = sorted(bag["images"]["/camera/base/image_raw"])
    return [[t for t in stamps if start <= t <= end] for start, end, _ in bag["episodes"]]


def test_the_v3_layout_and_info(dataset: Path, bag: dict) -> None:
    info = json.loads((dataset / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10
    frames, episodes = len(bag["images"]["/camera/base/image_raw"]), len(bag["episodes"])
    assert frames == sum(map(len, episode_stamps(bag))) and episodes >= 2
    tasks = {text for _, _, text in bag["episodes"]}
    assert info["total_episodes"] == episodes and info["total_tasks"] == len(tasks)
    assert info["total_frames"] == frames
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    features = info["features"]
    assert set(features) == {*CAMERAS, "observation.state", "action", "timestamp",
                             "frame_index", "episode_index", "index", "task_index"}  # fmt: skip
    assert features["observation.state"] == {"dtype": "float32", "shape": [7], "names": JOINTS}
    assert features["action"]["names"] == JOINTS
    for key in CAMERAS:
        shape = next(iter(bag["images"][CAMERAS[key]].values())).shape
        assert features[key]["dtype"] == "video" and features[key]["shape"] == list(shape)
        assert features[key]["info"]["video.fps"] == 10
        assert (dataset / f"videos/{key}/chunk-000/file-000.mp4").is_file()
    for path in ("meta/stats.json", "meta/tasks.parquet", "data/chunk-000/file-000.parquet",
                 "meta/episodes/chunk-000/file-000.parquet"):  # fmt: skip
        assert (dataset / path).is_file(), path
    stats = json.loads((dataset / "meta/stats.json").read_text())
    assert stats["observation.state"]["count"] == [frames]
    assert np.shape(stats["observation.images.base"]["mean"]) == (3, 1, 1)


def test_frames_episodes_tasks_state_and_action_are_the_bags(dataset: Path, bag: dict) -> None:
    data = pq.read_table(dataset / "data/chunk-000/file-000.parquet").to_pydict()
    episodes = pq.read_table(dataset / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    tasks = pq.read_table(dataset / "meta/tasks.parquet").to_pydict()
    stamps = episode_stamps(bag)
    assert [e["length"] for e in episodes] == [len(s) for s in stamps]
    assert [e["tasks"] for e in episodes] == [[text] for _, _, text in bag["episodes"]]
    texts = list(dict.fromkeys(text for _, _, text in bag["episodes"]))
    assert tasks["__index_level_0__"] == texts and tasks["task_index"] == list(range(len(texts)))
    flat = [t for s in stamps for t in s]
    assert data["index"] == list(range(len(flat)))
    assert data["episode_index"] == [k for k, s in enumerate(stamps) for _ in s]
    assert data["frame_index"] == [i for s in stamps for i in range(len(s))]
    assert data["task_index"] == [texts.index(bag["episodes"][k][2]) for k in data["episode_index"]]
    assert np.allclose(data["timestamp"], np.asarray(data["frame_index"]) / 10)
    state = np.asarray(data["observation.state"], np.float32)
    action = np.asarray(data["action"], np.float32)
    assert np.array_equal(state, np.stack([bag["state"][t] for t in flat]))
    assert np.array_equal(action, np.stack([bag["action"][t] for t in flat]))
    starts = np.cumsum([0] + [len(s) for s in stamps])
    for k, record in enumerate(episodes):
        assert (record["dataset_from_index"], record["dataset_to_index"]) == tuple(
            starts[k : k + 2]
        )
        for key in CAMERAS:
            assert record[f"videos/{key}/from_timestamp"] == pytest.approx(starts[k] / 10)


def test_videos_decode_to_the_bags_images(dataset: Path, bag: dict) -> None:
    flat = [t for s in episode_stamps(bag) for t in s]
    for key, topic in CAMERAS.items():
        with av.open(str(dataset / f"videos/{key}/chunk-000/file-000.mp4")) as video:
            frames = np.stack([f.to_ndarray(format="rgb24") for f in video.decode(video=0)])
        assert frames.shape == (len(flat), *bag["images"][topic][flat[0]].shape)
        error = np.abs(frames.astype(int) - np.stack([bag["images"][topic][t] for t in flat]))
        assert error.mean() < 1.0 and error.max() <= 64, (key, error.mean(), error.max())


def test_files_roll_over_at_their_size_limits(tmp_path: Path) -> None:
    out = tmp_path / "rolled"
    export([BAG], out, PARAMS, data_file_mb=1e-6, video_file_mb=1e-6)
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["data/file_index"] for e in episodes] == [0, 1, 2]
    key = "observation.images.base"
    assert [e[f"videos/{key}/file_index"] for e in episodes] == [0, 1, 2]
    assert [e[f"videos/{key}/from_timestamp"] for e in episodes] == [0.0, 0.0, 0.0]
    for k, e in enumerate(episodes):
        table = pq.read_table(out / f"data/chunk-000/file-{k:03d}.parquet")
        assert table.num_rows == e["length"]
        with av.open(str(out / f"videos/{key}/chunk-000/file-{k:03d}.mp4")) as video:
            assert video.streams.video[0].frames == e["length"]


def _copy_without(target: Path, *topics: str) -> Path:
    with BagWriter(target, split_s=None) as writer:
        for message in read_bag(BAG):
            if message.topic not in topics:
                writer.write(message)
    return target


def test_without_trajectories_or_outcomes_the_next_state_and_instructions_serve(
    tmp_path: Path, dataset: Path
) -> None:
    """Every episode has its own instruction, and the sim's arm reaches each command one
    period later: the fallbacks give the same frames and actions for the arm, but for
    the gripper (its command is an open/close setpoint that the servo follows at 2 /s)
    and an episode's last frame when no joint state of its episode follows it (the next
    one is the reset, or the bag ends: no action)."""
    bare = _copy_without(tmp_path / "bare", "/sim/expert/joint_trajectory", "/sim/episode")
    summary = export([bare], tmp_path / "bare_out", PARAMS)
    got, want = (
        pq.read_table(d / "data/chunk-000/file-000.parquet").to_pydict()
        for d in (tmp_path / "bare_out", dataset)
    )
    want_lengths = np.bincount(want["episode_index"])
    got_lengths = np.bincount(got["episode_index"], minlength=len(want_lengths))
    lost = want_lengths - got_lengths
    assert summary.episodes == len(want_lengths) and summary.frames == len(got["index"])
    assert set(lost) <= {0, 1}
    kept = [
        i
        for i, (e, k) in enumerate(zip(want["episode_index"], want["frame_index"], strict=True))
        if k < got_lengths[e]
    ]
    assert got["episode_index"] == [want["episode_index"][i] for i in kept]
    assert got["frame_index"] == [want["frame_index"][i] for i in kept]
    assert got["observation.state"] == [want["observation.state"][i] for i in kept]
    arm = JOINTS.index("gripper")
    got_action, want_action = np.asarray(got["action"]), np.asarray(want["action"])[kept]
    assert np.array_equal(got_action[:, :arm], want_action[:, :arm])
    assert not np.array_equal(got_action[:, arm], want_action[:, arm])


def test_a_missing_topic_or_an_empty_bag_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = _copy_without(tmp_path / "no_states", "/joint_states")
    with BagWriter(tmp_path / "empty", split_s=None):
        pass
    for bag, named in ((missing, "/joint_states"), (tmp_path / "empty", "holds no")):
        out = tmp_path / f"out_{bag.name}"
        assert main([str(bag), "--out", str(out), "--params", str(PARAMS)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bag) in err and named in err, err
        assert not out.exists()
