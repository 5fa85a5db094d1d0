"""Training records (`oxygen_core.train.records.Record`) read from rosbag2 recordings.

A bag recorded around the robot (or by `oxygen-record`) holds what the node saw and
what the robot was commanded; training wants the same pairs as the sim expert's in-process
records, so nothing here interprets a message its own way:

- the observation is the node's own: the messages of the node's topics (its params file,
  `configure.load_settings`) go, in log-time order, into the node's `FrameAssembler`, and
  one record is assembled at each JointState (a control step) once every message logged
  at that time is in (the sim logs a tick's cameras after its joint state). So freshness,
  camera sync, missing cameras and the images at the model's size (`resize_with_pad`,
  which training's `model_images` would apply anyway) are decided as the node decides;
- the action chunk target is what a scored replay compares the node with
  (`score_targets.load_targets`): the commanded trajectory, the chunks a robot ran (an
  ActionChunk topic: Meta-World's expert) or the next joint states, in the node's action
  columns, the commands at the step's stamp and the next H - 1 control periods, the last
  one held past the episode's end, as `records.expert_episode` holds it;
- the narration and memory targets are the latest line of each String topic in the same
  episode at or before the step, "" before the first (`ScoreTargets.reference`).

The topics the node does not read come from the params file's `training.*` keys
(`TRAINING_TOPICS`, defaults matching oxygen-record's bags); "" turns one off (no
episode topic, or no language target: the line is then "").

Episodes end where the instruction changes and at each message of the episode topic (the
sim's /sim/episode EpisodeOutcome, or Meta-World's /metaworld/episode String of JSON with
a `success` key, logged when an episode is over); an episode whose outcome says it failed
is left out (it would teach failure), as the in-process expert source drops its failures.
A bag that cannot train fails in one line naming the bag and the topic (`BagError`): a
topic missing, a JointState the node could not use (a NaN or a missing joint: a broken
recording, not a frame to skip), an outcome that says nothing of success, or no step with
an observation and a command. Steps without a usable observation or command (before the
first image, a gap in the commands) are skipped and counted, by the node's skip reasons,
in a printed line.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.rosbag2 import ReaderError

from oxygen_core.clock import NS_PER_S
from oxygen_core.offline_score import segment_of
from oxygen_core.train.records import Record
from oxygen_ros.convert import stamp_to_ns
from oxygen_ros.inputs import FrameAssembler, Skip
from oxygen_ros.params import Settings, commanded_names
from oxygen_ros.tools.bagio import BagMessage, BagReadError, bag_topics, from_cdr, read_bag
from oxygen_ros.tools.configure import TopicNames, load_settings, params_node
from oxygen_ros.tools.replay_job import instructions
from oxygen_ros.tools.score_targets import STRING, ScoreSpec, ScoreTargets, load_targets

# training.<key>: the topics of the targets, in the params file next to the node's own.
TRAINING_TOPICS = {
    "action_topic": "/sim/expert/joint_trajectory",
    "narration_topic": "/sim/expert/narration",
    "memory_topic": "/sim/expert/memory",
    "episode_topic": "/sim/episode",
}
TEXTS = ("narration", "memory")  # Record fields, each from training.<field>_topic


class BagError(ValueError):
    """A bag that gives no training records; the one-line message names bag and topic."""


@dataclasses.dataclass(frozen=True)
class Sources:
    """Where a bag's records come from: the node's settings and topics, the targets' topics
    (resolved as the node resolves names; "" for one turned off)."""

    params: Path
    settings: Settings
    names: TopicNames
    action: str
    texts: dict[str, str]  # Record field -> topic, only those turned on
    episode: str

    @property
    def action_names(self) -> tuple[str, ...]:
        return commanded_names(self.settings.node, self.settings.robot)


def sources(params: Path) -> Sources:
    """The node's topics from its params file and the `training.*` target topics.

    Raises FileNotFoundError, or params.ConfigError naming a bad parameter."""
    settings, names = load_settings(params)
    topics = _training_topics(params)
    texts = {field: topics[f"{field}_topic"] for field in TEXTS if topics[f"{field}_topic"]}
    if not topics["action_topic"]:
        raise BagError(f"{params}: training.action_topic is empty: records need a command")
    return Sources(params, settings, names, topics["action_topic"], texts, topics["episode_topic"])


def _training_topics(params: Path) -> dict[str, str]:
    """training.* of the params file, resolved as the node resolves its topic names."""
    with params_node(params) as node:
        found = {}
        for key, default in TRAINING_TOPICS.items():
            value = node.declare_parameter(f"training.{key}", default).value
            found[key] = node.resolve_topic_name(value) if value else ""
        return found


def bag_records(
    bag: Path,
    src: Sources,
    horizon: int,
    image_size: int,
    log: Callable[[str], None] = print,
) -> list[Record]:
    """Every usable control step of `bag` as a Record, chunks of `horizon` rows, images at
    `image_size` (the model's); skips and dropped episodes go to `log` in one line each."""
    try:
        return _read(bag, src, horizon, image_size, log)
    except BagReadError as error:  # names the bag already
        raise BagError(str(error)) from None
    except ReaderError as error:
        raise BagError(f"{bag}: not a readable bag: {error}") from None


def _read(
    bag: Path, src: Sources, horizon: int, image_size: int, log: Callable[[str], None]
) -> list[Record]:
    topics = bag_topics(bag)
    cfg, names = src.settings.node, src.names
    named = {*names.cameras, names.joint_state, names.instruction, src.action, src.episode}
    for topic in sorted((named | set(src.texts.values())) - {""}):
        if topic not in topics:
            raise BagError(f"{bag} has no topic {topic} ({src.params}); it has {sorted(topics)}")
    changes = instructions(bag, names.instruction, cfg.instruction, 0)
    ends = read_bag(bag, [src.episode]) if src.episode else ()
    outcomes = [(m.time_ns, _succeeded(bag, m)) for m in ends]
    boundaries = sorted({t for t, _ in changes} | {t for t, _ in outcomes})
    # An outcome closes the episode it is logged after.
    failed = {int(segment_of(t - 1, boundaries)) for t, ok in outcomes if not ok}
    try:
        targets = load_targets(
            bag,
            ScoreSpec(target=src.action, texts=src.texts),
            topics,
            names=src.action_names,
            outputs=(),
            streams=tuple(src.texts),
            period_s=cfg.control_period_s,
            boundaries_ns=boundaries,
            limits=None,
        )
    except ValueError as error:
        raise BagError(str(error)) from None
    if targets.commands is None:
        raise BagError(f"{bag}: no commands: {'; '.join(targets.notes)}")
    for note in targets.notes:
        log(f"{bag}: {note}")
    records, skipped = [], _Skips()
    for step_ns, obs in _observations(bag, src, image_size, skipped):
        segment = int(segment_of(step_ns, boundaries))
        if segment in failed:
            skipped.add("failed_episode", f"{src.episode} says the episode failed")
            continue
        chunk = targets.commands.series.targets(step_ns, segment, horizon, targets.period_ns)
        if chunk is None or not chunk[1].all():
            skipped.add("no_command", f"no command on {src.action} for every chunk row")
            continue
        records.append(
            Record(
                f"{bag}#{segment}",
                obs,
                chunk[0].astype(np.float32),
                *(_line(targets, field, step_ns) for field in TEXTS),
            )
        )
    if skipped.counts:
        steps = skipped.total() + len(records)
        log(f"{bag}: skipped {skipped.total()} of {steps} steps: {skipped}")
    if not records:
        raise BagError(f"{bag}: no step has both an observation and a command: {skipped}")
    return records


def _succeeded(bag: Path, message: BagMessage) -> bool:
    """An episode outcome's success: EpisodeOutcome's field, or the `success` of the JSON
    object a String carries (Meta-World's outcome)."""
    msg = from_cdr(message.data, message.msgtype)
    if message.msgtype != STRING:
        return bool(msg.success)
    try:
        return bool(json.loads(msg.data)["success"])
    except (ValueError, TypeError, KeyError) as error:
        at = f"{bag} topic {message.topic} at log time {message.time_ns} ns"
        raise BagError(f"{at}: not a JSON outcome with 'success' ({error!r})") from None


def _line(targets: ScoreTargets, field: str, step_ns: int) -> str:
    return targets.reference(field, step_ns) if field in targets.references else ""


class _Skips:
    """Skipped steps by reason, each with its first sentence."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.first: dict[str, str] = {}

    def add(self, reason: str, detail: str) -> None:
        self.counts[reason] += 1
        self.first.setdefault(reason, detail)

    def total(self) -> int:
        return sum(self.counts.values())

    def __str__(self) -> str:
        return "; ".join(f"{r} x{n} (first: {self.first[r]})" for r, n in self.counts.items())


def _observations(
    bag: Path, src: Sources, image_size: int, skipped: _Skips
) -> Iterator[tuple[int, Any]]:
    """(stamp of the JointState, the node's Observation) per control step: the node's
    inputs into its FrameAssembler in log-time order, assembled at each JointState's log
    time once every message logged then is in."""
    cfg, names = src.settings.node, src.names
    assembler = FrameAssembler(
        camera_topics=names.cameras,
        joint_names=cfg.joint_names,
        state_dim=len(cfg.joint_names),
        image_size=image_size,
        stale_timeout_s=cfg.stale_timeout_s,
        sync_slop_s=cfg.sync_slop_s,
        missing_camera=cfg.missing_camera,
        max_image_pixels=cfg.max_image_pixels,
        max_instruction_chars=cfg.max_instruction_chars,
        camera_rotations=src.settings.robot.slot_rotations(len(names.cameras)),
    )
    assembler.on_instruction(cfg.instruction)
    slots = {t: [i for i, c in enumerate(names.cameras) if c == t] for t in names.cameras}
    tick: tuple[int, int] | None = None  # (log time, stamp) of the latest JointState

    def step() -> Iterator[tuple[int, Any]]:
        obs = assembler.assemble(tick[0] / NS_PER_S)
        if not isinstance(obs, Skip):
            yield tick[1], obs
        elif obs.reason == "bad_joint_state":
            at = f"at log time {tick[0]} ns"
            raise BagError(f"{bag} topic {names.joint_state} {at}: {obs.detail}")
        else:
            skipped.add(obs.reason, obs.detail)

    for message in read_bag(bag, {*names.cameras, names.joint_state, names.instruction}):
        if tick is not None and message.time_ns > tick[0]:
            yield from step()
            tick = None
        msg = from_cdr(message.data, message.msgtype)
        if message.topic == names.instruction:
            assembler.on_instruction(msg.data)
        if message.topic == names.joint_state:
            assembler.on_joint_state(msg)
            tick = (message.time_ns, _stamp(msg, message))
        for slot in slots.get(message.topic, ()):
            assembler.on_image(slot, msg)
    if tick is not None:
        yield from step()


def _stamp(msg: Any, message: BagMessage) -> int:
    """The header stamp, or the log time for a zero stamp (as score_targets times a
    command)."""
    return stamp_to_ns(msg.header.stamp) or message.time_ns
