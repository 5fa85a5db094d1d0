"""oxygen-bag to-lerobot: bags recorded around this node -> a LeRobotDataset v3 folder.

So data recorded through the node trains any LeRobot policy. The layout is LeRobot's
codebase_version "v3.0" (its `lerobot.datasets` reader): meta/info.json, meta/stats.json,
meta/tasks.parquet, meta/episodes/chunk-000/file-000.parquet, data/chunk-C/file-F.parquet
and videos/<key>/chunk-C/file-F.mp4, where episodes are appended to one file until it
reaches LeRobot's size limits (info.json's data_files_size_in_mb, video_files_size_in_mb),
and a README.md dataset card named by --repo-id, ready for the Hub.

What is read, with the node's own conversions and topic names (the params file, read by
`configure.load_settings`): every camera of camera_topics becomes the video feature
`observation.images.<camera>`; the joint state topic becomes `observation.state` (the
node's joint_names, `convert.joint_positions`); `action` is the commanded target in the
chunk's columns: the first point of the latest JointTrajectory (the bag's one trajectory
topic that the node does not publish, e.g. the sim's /sim/expert/joint_trajectory, or
--action-topic), or without one the next joint state, which is where the last command
took the robot. The task is the instruction in force (`replay_job.instructions`: the
params' instruction, then the instruction topic's changes).

Frames. The first camera is the clock: LeRobot finds a frame's video image by its
timestamp frame_index / fps, so frames sit on an exact fps grid from the episode's first
image, and frame k takes the latest first-camera image at or before its grid time plus
half a period (at the camera's own rate each image is one frame; a dropped image repeats
the one before). The other cameras give their latest image at or before that image's
stamp plus the node's sync_slop_s, and the joint state and the action are the latest at
or before that image's stamp: what the robot knew when the image was taken, as the node
pairs them live; a nearest state could lie after the image and carry the action into the
observation. Frames without every input are left out: before the first message of each,
and where the action would come from another episode (a command before it started, or
without a trajectory topic, the next joint state after its end, which is the reset).

Episodes end at each /sim/episode (EpisodeOutcome, published when an episode ends: its
header stamp is the last instant of the episode) and where the instruction changes; a
segment without frames is no episode.

Videos are H.264 (libx264, a key frame every 2 frames as LeRobot's encoder sets), written
with PyAV, whose wheels bundle FFmpeg. LeRobot writes AV1 (libsvtav1) by default, but its
reader accepts h264 (one of its VALID_VIDEO_CODECS, decoded by torchcodec or PyAV), every
FFmpeg build decodes H.264 (AV1 needs dav1d or libaom), and H.264 keeps the chroma at full
resolution (yuv444p), which LeRobot's encoder refuses for AV1 and HEVC: yuv420p halves
it, and on data/sim_bag's 112 x 112 images a coloured object's edge then came back up to
117 of 255 off. --crf sets the quality: the default 10 came back at most 45 and on
average 0.65 of 255 off there, 0 (lossless up to the RGB/YUV rounding) at most 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from oxygen_core.clock import NS_PER_S
from oxygen_ros.convert import InputError, image_to_rgb
from oxygen_ros.params import ConfigError, commanded_names
from oxygen_ros.tools.bagio import BagMessage, BagReadError, bag_topics, from_cdr, read_bag
from oxygen_ros.tools.configure import load_settings
from oxygen_ros.tools.replay_job import instructions
from oxygen_ros.tools.score_targets import (
    JOINT_STATE,
    TRAJECTORY,
    measured_states,
    message_time,
    trajectory_columns,
)

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk folder (LeRobot's DEFAULT_CHUNK_SIZE)
DATA_FILE_MB = 100  # LeRobot's DEFAULT_DATA_FILE_SIZE_IN_MB
VIDEO_FILE_MB = 200  # LeRobot's DEFAULT_VIDEO_FILE_SIZE_IN_MB
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
EPISODE_TOPIC = "/sim/episode"
EPISODE_OUTCOME = "oxygen_ros/msg/EpisodeOutcome"
CODEC, PIX_FMT, GOP, CRF = "libx264", "yuv444p", 2, 10
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
IMAGE_WORDS = {"image_raw", "image", "image_color", "image_rect", "image_rect_color", "compressed"}


class ExportError(ValueError):
    """An input that cannot be exported; the one-line message names the bag and topic."""


@dataclasses.dataclass(frozen=True)
class Sources:
    """The topics read and the columns they fill."""

    cameras: tuple[str, ...]
    keys: tuple[str, ...]  # observation.images.<camera>, one per camera
    joint_state: str
    instruction: str
    initial_instruction: str  # the params' instruction, in force until the topic says one
    state_names: tuple[str, ...]
    action_names: tuple[str, ...]
    slop_ns: int
    robot: str
    outputs: frozenset[str]  # the node's own topics: never the recorded command


@dataclasses.dataclass(frozen=True)
class Series:
    """Times (ns, sorted) and float32 rows of one input."""

    times: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, pairs: Sequence[tuple[int, np.ndarray]], width: int) -> Series:
        order = sorted(range(len(pairs)), key=lambda i: pairs[i][0])
        times = np.asarray([pairs[i][0] for i in order], np.int64)
        rows = np.asarray([pairs[i][1] for i in order], np.float32).reshape(len(order), width)
        return cls(times, rows)

    def at_or_before(self, t: np.ndarray) -> np.ndarray:
        """Index of the latest entry at or before each time (-1: none)."""
        return np.searchsorted(self.times, t, side="right") - 1


@dataclasses.dataclass(frozen=True)
class Episode:
    """One episode's frames: which image of each camera (its message ordinal in the bag),
    the state and action rows, the task."""

    task: str
    images: np.ndarray  # int64 [N, cameras]: ordinal of each camera's message
    state: np.ndarray  # float32 [N, D]
    action: np.ndarray  # float32 [N, A]


# --------------------------------------------------------------------------- reading


def sources(params: Path) -> Sources:
    """The node's topics and columns from its params file."""
    settings, names = load_settings(params)
    cfg = settings.node
    if not names.cameras:
        raise ExportError(f"{params} names no camera_topics: a LeRobot frame needs an image")
    return Sources(
        cameras=names.cameras,
        keys=camera_keys(names.cameras),
        joint_state=names.joint_state,
        instruction=names.instruction,
        initial_instruction=cfg.instruction.strip(),
        state_names=tuple(cfg.joint_names),
        action_names=tuple(commanded_names(cfg, settings.robot)),
        slop_ns=round(cfg.sync_slop_s * NS_PER_S),
        robot=cfg.robot,
        outputs=frozenset(names.outputs()),
    )


def camera_keys(cameras: Sequence[str]) -> tuple[str, ...]:
    """observation.images.<camera>: the topic without its image words (/camera/base/
    image_raw -> base), or the whole topic where that leaves two cameras alike."""
    short = []
    for topic in cameras:
        parts = [p for p in topic.split("/") if p]
        while len(parts) > 1 and parts[-1] in IMAGE_WORDS:
            parts.pop()
        if len(parts) > 1 and parts[0] in ("camera", "cameras"):
            parts.pop(0)
        short.append("_".join(parts))
    if len(set(short)) < len(short):
        short = ["_".join(p for p in t.split("/") if p) for t in cameras]
    return tuple(f"observation.images.{name}" for name in short)


def check_topics(bag: Path, src: Sources, action_topic: str | None) -> str | None:
    """The action topic (None: next joint state); ExportError naming the bag and the topic
    when an input is missing, of another type, or the bag is empty."""
    if not (bag / "metadata.yaml").is_file():
        raise ExportError(f"{bag} is not a rosbag2 folder (no metadata.yaml)")
    topics = bag_topics(bag)
    if not topics:
        raise ExportError(f"{bag} holds no topics")
    needed = {camera: ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
              for camera in src.cameras}  # fmt: skip
    needed[src.joint_state] = (JOINT_STATE,)
    if not src.initial_instruction:
        needed[src.instruction] = ("std_msgs/msg/String",)
    if action_topic is not None:
        needed[action_topic] = (TRAJECTORY,)
    for topic, types in needed.items():
        if topic not in topics:
            raise ExportError(f"{bag} has no topic {topic}; it has {sorted(topics)}")
        if topics[topic] not in types:
            raise ExportError(f"{bag} topic {topic} is {topics[topic]}, not {list(types)}")
    if action_topic is not None:
        return action_topic
    found = sorted(t for t, ty in topics.items() if ty == TRAJECTORY and t not in src.outputs)
    if len(found) > 1:
        raise ExportError(f"{bag} has several JointTrajectory topics {found}: name one")
    return found[0] if found else None


def plan_bag(
    bag: Path, src: Sources, action_topic: str | None, fps: int | None
) -> tuple[list[Episode], int]:
    """The episodes of one bag (module docstring) and the fps: given, or the first camera's
    median rate."""
    topics = [*src.cameras, src.joint_state, src.instruction, EPISODE_TOPIC]
    topics += [action_topic] if action_topic else []
    stamps: dict[str, list[int]] = {camera: [] for camera in src.cameras}
    kept: dict[str, list[BagMessage]] = {}
    for message in read_bag(bag, topics):
        if message.topic in stamps:
            msg = from_cdr(message.data, message.msgtype)
            stamps[message.topic].append(message_time(msg, message))
        else:
            kept.setdefault(message.topic, []).append(message)
    for camera, times in stamps.items():
        if not times:
            raise ExportError(f"{bag} topic {camera} holds no messages")
    states, _ = measured_states(kept.get(src.joint_state, []), src.state_names)
    if not states:
        raise ExportError(f"{bag} topic {src.joint_state} holds no usable JointState")
    state = Series.of(states, len(src.state_names))
    if action_topic is not None:
        action, next_state = _trajectories(kept.get(action_topic, []), src.action_names), False
        if not len(action.times):
            raise ExportError(f"{bag} topic {action_topic} holds no usable JointTrajectory")
    else:
        commands, _ = measured_states(kept.get(src.joint_state, []), src.action_names)
        action, next_state = Series.of(commands, len(src.action_names)), True
    ends = sorted(
        message_time(from_cdr(m.data, m.msgtype), m)
        for m in kept.get(EPISODE_TOPIC, [])
        if m.msgtype == EPISODE_OUTCOME
    )
    changes = instructions(
        bag, src.instruction, src.initial_instruction, min(stamps[src.cameras[0]])
    )
    clock = np.asarray(stamps[src.cameras[0]], np.int64)
    if fps is None:
        fps = _median_fps(bag, src.cameras[0], clock)
    return _episodes(src, stamps, state, action, next_state, ends, changes, fps), fps


def _trajectories(messages: Sequence[BagMessage], names: Sequence[str]) -> Series:
    """The first point of every usable trajectory, at its stamp, in `names` order."""
    pairs = []
    for message in messages:
        msg = from_cdr(message.data, message.msgtype)
        if not msg.points:
            continue
        try:
            positions = trajectory_columns(msg.joint_names, msg.points[0].positions, names)
            pairs.append((message_time(msg, message), positions))
        except InputError:
            continue
    return Series.of(pairs, len(names))


def _median_fps(bag: Path, camera: str, clock: np.ndarray) -> int:
    gaps = np.diff(np.sort(clock))
    gaps = gaps[gaps > 0]
    if not len(gaps):
        raise ExportError(f"{bag} topic {camera} has one image stamp: give --fps")
    return max(1, round(NS_PER_S / float(np.median(gaps))))


def _episodes(
    src: Sources,
    stamps: Mapping[str, list[int]],
    state: Series,
    action: Series,
    next_state: bool,
    ends: Sequence[int],
    changes: Sequence[tuple[int, str]],
    fps: int,
) -> list[Episode]:
    """Split the first camera's images into episodes and put each on the fps grid."""
    order = {c: np.argsort(np.asarray(t, np.int64), kind="stable") for c, t in stamps.items()}
    sorted_t = {c: np.asarray(stamps[c], np.int64)[order[c]] for c in stamps}
    clock = sorted_t[src.cameras[0]]
    # inputs of each first-camera image: other cameras, state, action (-1: none)
    pick = [order[src.cameras[0]]]
    usable = np.ones(len(clock), bool)
    for camera in src.cameras[1:]:
        i = np.searchsorted(sorted_t[camera], clock + src.slop_ns, side="right") - 1
        usable &= i >= 0
        pick.append(order[camera][np.maximum(i, 0)])
    s = state.at_or_before(clock)
    a = (
        np.searchsorted(action.times, clock, side="right")
        if next_state
        else action.at_or_before(clock)
    )
    usable &= (s >= 0) & (a >= 0) & (a < len(action.times))
    change_t, end_t = np.asarray([t for t, _ in changes], np.int64), np.asarray(ends, np.int64)
    task_i = np.searchsorted(change_t, clock, side="right") - 1
    usable &= task_i >= 0

    def segment_of(t: np.ndarray) -> np.ndarray:
        """Episode boundaries before t: ends before it, instruction changes at or before."""
        return np.searchsorted(end_t, t, side="left") + np.searchsorted(change_t, t, side="right")

    segment = segment_of(clock)
    # an action from another episode (the reset after its end, a command before its start)
    # is none of this frame's
    usable &= segment_of(action.times[np.clip(a, 0, len(action.times) - 1)]) == segment
    images = np.stack(pick, axis=1)
    period = NS_PER_S / fps
    episodes = []
    for seg in np.unique(segment[usable]):
        rows = np.flatnonzero(usable & (segment == seg))
        times = clock[rows]
        count = round((times[-1] - times[0]) / period) + 1
        grid = times[0] + np.round(np.arange(count) * period).astype(np.int64)
        frames = rows[np.searchsorted(times, grid + round(period / 2), side="right") - 1]
        episodes.append(
            Episode(
                task=changes[task_i[frames[0]]][1],
                images=images[frames],
                state=state.rows[s[frames]],
                action=action.rows[a[frames]],
            )
        )
    return episodes


def camera_frames(bag: Path, camera: str, wanted: np.ndarray) -> Iterator[np.ndarray]:
    """RGB images of `camera`'s messages of the ordinals `wanted`, in that order. Each is
    decoded once and held only until its frames are out: a camera stamps its images in
    the order it sends them, so the wanted order is the bag's and little is held."""
    positions: dict[int, list[int]] = {}
    for position, ordinal in enumerate(wanted.tolist()):
        positions.setdefault(ordinal, []).append(position)
    ready: dict[int, np.ndarray] = {}
    at = 0
    for ordinal, message in enumerate(read_bag(bag, [camera])):
        if at == len(wanted):
            return
        if ordinal not in positions:
            continue
        try:
            image = np.array(image_to_rgb(from_cdr(message.data, message.msgtype)))
        except InputError as error:
            raise ExportError(f"{bag} topic {camera} message {ordinal}: {error}") from None
        ready |= dict.fromkeys(positions.pop(ordinal), image)
        while at in ready:
            yield ready.pop(at)
            at += 1


# --------------------------------------------------------------------------- writing


class VideoFiles:
    """One camera's mp4 files: episodes are appended to the open file until it reaches
    size_mb, then the next file (chunk and file indices as LeRobot counts them)."""

    def __init__(self, root: Path, key: str, fps: int, size_mb: float, crf: int) -> None:
        self._root, self._key, self._fps, self._limit = root, key, fps, size_mb * 2**20
        self._crf = crf
        self._index = (0, 0)  # chunk, file of the open (or next) file
        self._container: Any = None
        self._stream: Any = None
        self._frames = 0  # frames in the open file
        self.shape: tuple[int, int] | None = None  # (height, width) of every frame

    def path(self, chunk: int, file: int) -> Path:
        return self._root / VIDEO_PATH.format(
            video_key=self._key, chunk_index=chunk, file_index=file
        )

    def start_episode(self) -> tuple[int, int, float]:
        """(chunk, file, from_timestamp) of the episode that starts now."""
        if self._container is not None and self.path(*self._index).stat().st_size >= self._limit:
            self._close()
            chunk, file = self._index
            self._index = (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)
        return (*self._index, self._frames / self._fps)

    def add(self, rgb: np.ndarray) -> None:
        if self.shape is None:
            self.shape = rgb.shape[:2]
        elif rgb.shape[:2] != self.shape:
            raise ValueError(f"image {rgb.shape[:2]} differs from the first, {self.shape}")
        if self._container is None:
            path = self.path(*self._index)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._container = av.open(str(path), "w")
            self._stream = self._container.add_stream(
                CODEC, rate=self._fps, options={"g": str(GOP), "crf": str(self._crf)}
            )
            self._stream.height, self._stream.width = self.shape
            self._stream.pix_fmt = PIX_FMT
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self._frames
        self._container.mux(self._stream.encode(frame))
        self._frames += 1

    def close(self) -> None:
        if self._container is not None:
            self._close()

    def _close(self) -> None:
        self._container.mux(self._stream.encode())
        self._container.close()
        self._container = self._stream = None
        self._frames = 0


class Stats:
    """LeRobot's per-feature statistics (min, max, mean, std, count, q01..q99), exact:
    numbers from their values, images per channel in [0, 1] from 256-bin histograms."""

    def __init__(self) -> None:
        self.values: dict[str, list[np.ndarray]] = {}
        self.histograms: dict[str, np.ndarray] = {}
        self.frames: dict[str, int] = {}

    def add_values(self, key: str, rows: np.ndarray) -> None:
        self.values.setdefault(key, []).append(np.asarray(rows).reshape(len(rows), -1))

    def add_image(self, key: str, rgb: np.ndarray) -> None:
        hist = self.histograms.setdefault(key, np.zeros((3, 256), np.int64))
        for c in range(3):
            hist[c] += np.bincount(rgb[:, :, c].ravel(), minlength=256)
        self.frames[key] = self.frames.get(key, 0) + 1

    def result(self) -> dict[str, dict[str, list]]:
        out = {}
        for key, parts in self.values.items():
            data = np.concatenate(parts).astype(np.float64)
            stats = {
                "min": data.min(0),
                "max": data.max(0),
                "mean": data.mean(0),
                "std": data.std(0),
            }
            stats |= {q: np.quantile(data, p, axis=0) for q, p in QUANTILES.items()}
            out[key] = {k: v.tolist() for k, v in stats.items()} | {"count": [len(data)]}
        for key, hist in self.histograms.items():
            levels = np.arange(256) / 255.0
            n = hist.sum(1, keepdims=True)
            mean = (hist * levels).sum(1) / n[:, 0]
            std = np.sqrt((hist * (levels - mean[:, None]) ** 2).sum(1) / n[:, 0])
            cdf = np.cumsum(hist, 1) / n
            stats = {
                "min": levels[np.argmax(hist > 0, 1)],
                "max": levels[255 - np.argmax(hist[:, ::-1] > 0, 1)],
                "mean": mean,
                "std": std,
            }
            stats |= {q: levels[np.argmax(cdf >= p, 1)] for q, p in QUANTILES.items()}
            out[key] = {k: v.reshape(3, 1, 1).tolist() for k, v in stats.items()}
            out[key]["count"] = [self.frames[key]]
        return out


@dataclasses.dataclass
class Summary:
    """What was written, for the command line."""

    out: Path
    fps: int
    episodes: int
    frames: int
    tasks: tuple[str, ...]


def export(
    bags: Sequence[Path],
    out: Path,
    params: Path,
    *,
    fps: int | None = None,
    repo_id: str = "oxygen/bag",
    action_topic: str | None = None,
    data_file_mb: float = DATA_FILE_MB,
    video_file_mb: float = VIDEO_FILE_MB,
    crf: int = CRF,
) -> Summary:
    """Write `bags` (in order) as one LeRobotDataset v3 in `out`, a new folder. Every input
    is checked before anything is written; a failure while writing removes the folder."""
    src = sources(params)
    plans = []
    for bag in map(Path, bags):
        episodes, fps = plan_bag(bag, src, check_topics(bag, src, action_topic), fps)
        plans.append((bag, episodes))
    if not any(episodes for _, episodes in plans):
        raise ExportError(f"{', '.join(map(str, bags))}: no frame has every input")
    out.mkdir(parents=True)  # FileExistsError: never write into an existing dataset
    try:
        writer = _Writer(out, src, fps, video_file_mb, crf)
        for bag, episodes in plans:
            writer.add_bag(bag, episodes)
        return writer.finish(data_file_mb, repo_id)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


class _Writer:
    """The dataset being written: videos as episodes come, tables and metadata at the end."""

    def __init__(self, out: Path, src: Sources, fps: int, video_file_mb: float, crf: int) -> None:
        self.out, self.src, self.fps = out, src, fps
        self.videos = {key: VideoFiles(out, key, fps, video_file_mb, crf) for key in src.keys}
        self.tasks: dict[str, int] = {}
        self.stats = Stats()
        self.rows: list[dict[str, np.ndarray]] = []
        self.meta: list[dict[str, Any]] = []
        self.frames = 0

    def add_bag(self, bag: Path, episodes: Sequence[Episode]) -> None:
        if not episodes:
            return
        ordinals = np.concatenate([e.images for e in episodes])
        cameras = zip(self.src.cameras, self.src.keys, strict=True)
        images = {key: camera_frames(bag, c, ordinals[:, k]) for k, (c, key) in enumerate(cameras)}
        for episode in episodes:
            self._add_episode(bag, episode, images)

    def _add_episode(
        self, bag: Path, episode: Episode, images: Mapping[str, Iterator[np.ndarray]]
    ) -> None:
        n, number, first = len(episode.state), len(self.meta), self.frames
        task = self.tasks.setdefault(episode.task, len(self.tasks))
        columns = {
            "observation.state": episode.state,
            "action": episode.action,
            "timestamp": (np.arange(n) / self.fps).astype(np.float32),
            "frame_index": np.arange(n, dtype=np.int64),
            "episode_index": np.full(n, number, np.int64),
            "index": np.arange(first, first + n, dtype=np.int64),
            "task_index": np.full(n, task, np.int64),
        }
        record: dict[str, Any] = {"episode_index": number, "tasks": [episode.task], "length": n}
        stats = Stats()
        for (key, frames), camera in zip(images.items(), self.src.cameras, strict=True):
            chunk, file, start = self.videos[key].start_episode()
            for _ in range(n):
                rgb = next(frames)
                try:
                    self.videos[key].add(rgb)
                except ValueError as error:
                    raise ExportError(f"{bag} topic {camera}: {error}") from None
                stats.add_image(key, rgb)
                self.stats.add_image(key, rgb)
            record |= {
                f"videos/{key}/chunk_index": chunk,
                f"videos/{key}/file_index": file,
                f"videos/{key}/from_timestamp": start,
                f"videos/{key}/to_timestamp": start + n / self.fps,
            }
        for key, values in columns.items():
            stats.add_values(key, values)
            self.stats.add_values(key, values)
        record |= {"dataset_from_index": first, "dataset_to_index": first + n}
        record |= {
            f"stats/{key}/{name}": value
            for key, feature in stats.result().items()
            for name, value in feature.items()
        }
        self.rows.append(columns)
        self.meta.append(record)
        self.frames += n

    def finish(self, data_file_mb: float, repo_id: str) -> Summary:
        for video in self.videos.values():
            video.close()
        _write_data(self.out, self.rows, self.meta, data_file_mb)
        _write_meta(
            self.out, self.src, self.videos, self.fps, self.tasks, self.meta, self.stats, repo_id
        )
        return Summary(self.out, self.fps, len(self.meta), self.frames, tuple(self.tasks))


def _write_data(
    out: Path, rows: list[dict[str, np.ndarray]], meta: list[dict], size_mb: float
) -> None:
    """data/ parquet files: episodes appended to a file until it holds size_mb."""
    chunk, file, held, tables = 0, 0, 0, []
    for columns, record in zip(rows, meta, strict=True):
        table = _table(columns)
        if tables and held + table.nbytes > size_mb * 2**20:
            _write_table(out, chunk, file, tables)
            chunk, file = (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)
            held, tables = 0, []
        tables.append(table)
        held += table.nbytes
        record["data/chunk_index"], record["data/file_index"] = chunk, file
    _write_table(out, chunk, file, tables)


def _table(columns: Mapping[str, np.ndarray]) -> pa.Table:
    """One episode's frames in LeRobot's column types: vectors as fixed-size float32 lists."""
    arrays = {}
    for key, values in columns.items():
        if values.ndim == 2:
            flat = pa.array(values.astype(np.float32).ravel(), pa.float32())
            arrays[key] = pa.FixedSizeListArray.from_arrays(flat, values.shape[1])
        else:
            arrays[key] = pa.array(values)
    return pa.table(arrays)


def _write_table(out: Path, chunk: int, file: int, tables: list[pa.Table]) -> None:
    path = out / DATA_PATH.format(chunk_index=chunk, file_index=file)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables), path)


def _write_meta(
    out: Path,
    src: Sources,
    videos: Mapping[str, VideoFiles],
    fps: int,
    tasks: Mapping[str, int],
    meta: list[dict],
    stats: Stats,
    repo_id: str,
) -> None:
    """info.json, stats.json, tasks.parquet and the episodes parquet."""
    features: dict[str, Any] = {}
    for key, video in videos.items():
        height, width = video.shape or (0, 0)
        features[key] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": "h264",
                "video.pix_fmt": PIX_FMT,
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    features["observation.state"] = {
        "dtype": "float32", "shape": [len(src.state_names)], "names": list(src.state_names)
    }  # fmt: skip
    features["action"] = {
        "dtype": "float32", "shape": [len(src.action_names)], "names": list(src.action_names)
    }  # fmt: skip
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": src.robot,
        "total_episodes": len(meta),
        "total_frames": meta[-1]["dataset_to_index"],
        "total_tasks": len(tasks),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_FILE_MB,
        "video_files_size_in_mb": VIDEO_FILE_MB,
        "fps": fps,
        "splits": {"train": f"0:{len(meta)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "features": features,
    }
    (out / "meta").mkdir()
    (out / "meta/info.json").write_text(json.dumps(info, indent=4))
    (out / "meta/stats.json").write_text(json.dumps(stats.result(), indent=4))
    (out / "README.md").write_text(_card(repo_id, info))
    # pandas' metadata makes the task string the index, as LeRobot's pd.read_parquet expects
    pandas = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
             "numpy_type": "int64", "metadata": None},
            {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
             "numpy_type": "object", "metadata": None},
        ],
    }  # fmt: skip
    task_table = pa.table(
        {"task_index": pa.array(list(tasks.values()), pa.int64()), "__index_level_0__": list(tasks)}
    ).replace_schema_metadata({b"pandas": json.dumps(pandas).encode()})
    pq.write_table(task_table, out / "meta/tasks.parquet")
    for record in meta:
        record["meta/episodes/chunk_index"], record["meta/episodes/file_index"] = 0, 0
    episodes = out / EPISODES_PATH
    episodes.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(meta), episodes)


def _card(repo_id: str, info: Mapping[str, Any]) -> str:
    """The Hub's dataset card, with the front matter LeRobot's own card carries (its tag,
    robotics, the data files), so the folder can be uploaded as it is."""
    return (
        "---\ntags: [LeRobot]\ntask_categories: [robotics]\nconfigs:\n"
        "- config_name: default\n  data_files: data/*/*.parquet\n---\n\n"
        f"# {repo_id}\n\nWritten by oxygen-bag to-lerobot from rosbag2 recordings: "
        f"{info['total_episodes']} episodes, {info['total_frames']} frames at {info['fps']} "
        "fps. [meta/info.json](meta/info.json) describes the features.\n"
    )


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-bag to-lerobot`."""
    parser = argparse.ArgumentParser(
        prog="oxygen-bag to-lerobot",
        description="Write rosbag2 recordings of the node's topics as one LeRobotDataset "
        "v3 folder (videos, state, action, tasks, episodes) for any LeRobot policy.",
    )
    parser.add_argument("bags", nargs="+", type=Path, metavar="BAG")
    parser.add_argument("--out", type=Path, required=True, help="the dataset folder (new)")
    parser.add_argument(
        "--params", type=Path, default=Path("config/sim.yaml"),
        help="the node's params YAML: cameras, joint state, instruction, joint names",
    )  # fmt: skip
    parser.add_argument(
        "--fps", type=int, help="frame rate (default: the first bag's first camera's rate)"
    )
    parser.add_argument(
        "--repo-id", default="oxygen/bag", help="the dataset's Hub name, in its README.md card"
    )
    parser.add_argument(
        "--action-topic",
        help="JointTrajectory topic of the commands (default: the bag's one that the node "
        "does not publish; none: the next joint state)",
    )
    parser.add_argument(
        "--crf", type=int, default=CRF, choices=range(52), metavar="0..51",
        help=f"H.264 quality, 0 lossless (default {CRF})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.fps is not None and args.fps <= 0:
        parser.error("--fps must be positive")
    try:
        summary = export(
            args.bags, args.out, args.params, fps=args.fps, repo_id=args.repo_id,
            action_topic=args.action_topic, crf=args.crf,
        )  # fmt: skip
    except (ExportError, ConfigError, BagReadError, OSError) as error:
        print(f"oxygen-bag to-lerobot: {error}", file=sys.stderr)
        return 2
    print(
        f"{summary.out}: {summary.episodes} episodes, {summary.frames} frames at "
        f"{summary.fps} fps, {len(summary.tasks)} tasks"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
