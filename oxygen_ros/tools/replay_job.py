"""One replay job: a bag, the node's settings for it, its frame ticks, where outputs go.

Time. A node activated before playback starts its frame timer on a simulated clock that
reads 0, and rcl keeps a timer's phase across clock jumps, so it ticks at whole
multiples of the frame period on the bag clock (`timer_grid`). A replay ticks on that
grid, from the last multiple at or before the bag's first message to its last message,
and so does the node when `--live` plays the bag to it with /clock (a node that lags
its clock ticks late; the stamps of its chunks say when).

Outputs of a replay, offline or live, go to an `OutputSink`: the output bag (mcap) and
the report's `Recording`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import ReaderError

from oxygen_core.clock import NS_PER_S
from oxygen_ros.params import Settings, commanded_names
from oxygen_ros.tools.bagio import (
    BagMessage,
    BagReadError,
    BagWriter,
    bag_span_ns,
    bag_topics,
    from_cdr,
    read_bag,
)
from oxygen_ros.tools.configure import TopicNames, load_settings
from oxygen_ros.tools.report import Recording, RunInfo, warmup_frames
from oxygen_ros.tools.score_targets import ScoreSpec, ScoreTargets, load_targets

OUTPUT_BAG = "output_bag"  # the output bag's folder in a job's output folder


@dataclasses.dataclass(frozen=True)
class Job:
    """One replay: which bag, with which parameters, into which folder."""

    bag: Path
    params: Path
    settings: Settings
    names: TopicNames
    out: Path
    targets: ScoreTargets | None = None  # what the run is scored against; None: not scored

    @classmethod
    def load(
        cls,
        bag: Path,
        params: Path,
        out: Path,
        overrides: Mapping[str, object] | None = None,
        score: ScoreSpec | None = None,
    ) -> Job:
        """Read the parameters (see load_settings), check the bag and the output folder,
        and with `score` read what the run is scored against (tools.score_targets), so a
        mistake fails here, before the model loads (ValueError / OSError)."""
        bag, out = Path(bag), Path(out)
        if not bag.exists():
            raise FileNotFoundError(f"{bag} does not exist")
        if not (bag / "metadata.yaml").is_file():
            raise FileNotFoundError(f"{bag} is not a rosbag2 folder (no metadata.yaml)")
        if (out / OUTPUT_BAG).exists():
            raise FileExistsError(f"{out / OUTPUT_BAG} exists: choose a new --out folder")
        settings, names = load_settings(params, overrides)
        check_bag(bag, names, settings.node.missing_camera)
        job = cls(bag, Path(params), settings, names, out)
        if score is None:
            return job
        return dataclasses.replace(job, targets=job.score_targets(score))

    def score_targets(self, spec: ScoreSpec) -> ScoreTargets:
        """The commands and reference texts of the bag (tools.score_targets), tasks split
        where the instruction changes."""
        cfg = self.settings.node
        return load_targets(
            self.bag,
            spec,
            bag_topics(self.bag),
            names=commanded_names(cfg, self.settings.robot),
            outputs=self.names.outputs(),
            streams=cfg.stream_names,
            period_s=cfg.control_period_s,
            boundaries_ns=[t for t, _ in self.info("offline").instructions],
            limits=self.settings.limits,
        )

    def span_ns(self) -> tuple[int, int]:
        return bag_span_ns(self.bag)

    def ticks(self) -> range:
        """The node's frame ticks over the bag (see the module docstring)."""
        return timer_grid(self.span_ns(), period_ns(self.settings.node.frame_period_s))

    def info(self, source: str) -> RunInfo:
        cfg, origin = self.settings.node, self.ticks()[0]
        return RunInfo(
            source=source,
            bag=str(self.bag),
            params=str(self.params),
            mode=self.settings.engine.engine_mode,
            seed=self.settings.engine.seed,
            frame_period_s=cfg.frame_period_s,
            warmup_frames=warmup_frames(self.settings.engine),
            origin_ns=origin,
            instructions=instructions(self.bag, self.names.instruction, cfg.instruction, origin),
        )


def check_bag(bag: Path, names: TopicNames, missing_camera: str) -> None:
    """The bag opens and has messages, and every frame could be assembled from its topics:
    the joint state and the cameras (all of them unless missing_camera is "blank")."""
    try:
        topics, (first, last) = bag_topics(bag), bag_span_ns(bag)
    except (ReaderError, KeyError) as error:
        raise ValueError(f"{bag} cannot be read: {error}") from None
    if last < first:
        raise ValueError(f"{bag} holds no messages")
    cameras = [t for t in names.cameras if t not in topics]
    needed = cameras if missing_camera == "skip" or len(cameras) == len(names.cameras) else []
    missing = needed + ([names.joint_state] if names.joint_state not in topics else [])
    if missing:
        raise ValueError(
            f"{bag} lacks the input topics {missing} named by the params, so every frame "
            f"would skip; it has {sorted(topics)}"
        )


def instructions(
    bag: Path, topic: str, initial: str, origin_ns: int
) -> tuple[tuple[int, str], ...]:
    """(bag time, text) of the instruction parameter at origin_ns, then wherever the
    bag's instruction topic changes it; up to the damage in a corrupt bag (the replay
    reports that damage itself)."""
    current = initial.strip()
    changes = [(origin_ns, current)] if current else []
    try:
        for message in read_bag(bag, [topic]):
            text = from_cdr(message.data, message.msgtype).data.strip()
            if text and text != current:
                changes.append((message.time_ns, text))
            current = text
    except BagReadError:
        pass
    return tuple(changes)


def period_ns(seconds: float) -> int:
    """A timer period in nanoseconds, converted as rclpy's create_timer converts it."""
    return int(float(seconds) * NS_PER_S)


def timer_grid(span_ns: tuple[int, int], period: int) -> range:
    """Ticks of a timer started at time 0: multiples of `period` over the span.

    The first is the last multiple at or before the span's start (a tick that sees no
    input yet); the last is at or before the span's end.
    """
    return range(span_ns[0] // period * period, span_ns[1] + 1, period)


class OutputSink:
    """Where a replay's outputs go: the output bag and the report's recording.

    One caller at a time: the offline loop, or the live recorder's callbacks, which
    share one mutually exclusive callback group.
    """

    def __init__(self, writer: BagWriter) -> None:
        self.recording = Recording()
        self._writer = writer

    def message(self, topic: str, time_ns: int, msg: Any) -> None:
        """An rclpy message the frame produced (offline)."""
        self._writer.write_ros(topic, time_ns, msg)
        self.recording.add(msg)

    def raw(self, message: BagMessage) -> Any:
        """CDR bytes a subscription received (live); the decoded message."""
        msg = from_cdr(message.data, message.msgtype)
        self._writer.write(message)
        self.recording.add(msg)
        return msg
