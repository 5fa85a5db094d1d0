"""What a scored replay compares the node with: the commands and texts a bag recorded.

`oxygen-bag replay` scores the policy's chunks (oxygen_core.offline_score) against what the
robot was commanded, read here from one topic of the input bag:

- a trajectory_msgs/JointTrajectory topic (a controller's command, the sim's
  /sim/expert/joint_trajectory): each point applies at the header stamp (the log time
  when the stamp is zero, "now") plus its time_from_start, and a new trajectory replaces
  the points of earlier ones from its first point on, as a trajectory controller does;
- an oxygen_ros/ActionChunk topic (a chunk a robot runs, Meta-World's expert on
  /metaworld/expert/action_chunk): row k applies at the header stamp plus k of its
  control_period, and a chunk replaces what earlier ones planned as a trajectory does;
- a sensor_msgs/JointState topic: the next joint states as the target. The robot reaches
  a command one control period after it is sent, so the state measured at t is the
  command of t - one period.

Positions are taken in the chunk's columns (the node's action_names), so the comparison
is in the space of the published chunk: joint positions in robot units. Tasks are split
where the instruction changes (oxygen_ros.tools.replay_job.instructions); each command
belongs to the task of the time it was recorded at (its stamp).

Texts: for each language stream, a std_msgs/String topic of reference lines (the sim's
/sim/expert/narration and /sim/expert/memory). A text the node said for a frame is
compared with the latest reference line of the same task at or before that frame's tick,
or "" when the task has none yet (as training's memory target is empty before the first
sub-goal).

Without flags the bag's one JointTrajectory topic is the target and each stream's
reference is the String topic whose last name is the stream's name; named topics that
the bag lacks, or of another type, fail in one line naming the bag and the topic, before
the model loads. A command message that cannot be used (a joint of the chunk missing, a
position not finite) is skipped and counted in the report's warnings.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.offline_score import CommandSeries, gripper_threshold, segment_of
from oxygen_core.safety.limits import JointLimits
from oxygen_core.text import excerpt_list
from oxygen_ros.convert import InputError, action_chunk_rows, joint_positions, stamp_to_ns
from oxygen_ros.tools.bagio import BagMessage, BagReadError, from_cdr, read_bag

TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
JOINT_STATE = "sensor_msgs/msg/JointState"
ACTION_CHUNK = "oxygen_ros/msg/ActionChunk"
STRING = "std_msgs/msg/String"
KINDS = {TRAJECTORY: "trajectory", ACTION_CHUNK: "chunk", JOINT_STATE: "joint_state"}


@dataclasses.dataclass(frozen=True)
class ScoreSpec:
    """What the command line names: the command topic and each stream's reference topic;
    None: found in the bag by type and name (module docstring)."""

    target: str | None = None
    texts: Mapping[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Commands:
    """The recorded commands of the chunk's columns."""

    topic: str
    kind: str  # KINDS: "trajectory", "chunk" or "joint_state"
    series: CommandSeries
    skipped: Mapping[str, int]  # unusable messages by reason (first line of each)


@dataclasses.dataclass(frozen=True)
class Gripper:
    """A gripper column: its open/close threshold and the range it was taken from."""

    threshold: float
    lower: float
    upper: float
    source: str  # "limits" (the node's joint limits) or "commands" (the recorded range)


@dataclasses.dataclass(frozen=True)
class ScoreTargets:
    """Everything a replay of `bag` is scored against."""

    bag: Path
    names: tuple[str, ...]  # the chunk's columns
    period_ns: int  # the control period
    boundaries_ns: tuple[int, ...]  # instruction changes: where tasks start
    commands: Commands | None  # None: the chunks are not scored
    grippers: Mapping[str, Gripper]
    references: Mapping[str, tuple[str, tuple[tuple[int, str], ...]]]  # stream -> (topic, lines)
    notes: tuple[str, ...] = ()  # why something is not scored

    def reference(self, stream: str, time_ns: int) -> str:
        """The reference line of `stream` for a frame at time_ns: the latest of its task at
        or before it, "" when there is none."""
        _, lines = self.references[stream]
        latest = bisect.bisect_right([t for t, _ in lines], time_ns) - 1
        if latest < 0:
            return ""
        task = segment_of(np.asarray([lines[latest][0], time_ns]), self.boundaries_ns)
        return lines[latest][1] if task[0] == task[1] else ""


def load_targets(
    bag: Path,
    spec: ScoreSpec,
    topics: Mapping[str, str],
    *,
    names: Sequence[str],
    outputs: Iterable[str],
    streams: Sequence[str],
    period_s: float,
    boundaries_ns: Sequence[int],
    limits: JointLimits | None,
) -> ScoreTargets:
    """Read the targets of a replay of `bag` (topics: the bag's topic -> type; outputs:
    the node's own topics, never a target). ValueError in one line when a named topic is
    missing or of the wrong type."""
    period_ns = round(period_s * NS_PER_S)
    notes: list[str] = []
    topic = spec.target or _only_trajectory(topics, set(outputs), notes)
    commands = None
    if topic is not None:
        msgtype = _check_topic(bag, topics, topic, tuple(KINDS), "--target")
        if not names:
            notes.append("the chunk's columns have no joint names: chunks not scored")
        else:
            commands = read_commands(bag, topic, msgtype, names, period_ns, boundaries_ns, notes)
            notes += [
                f"{topic}: {reason} ({count} skipped)" for reason, count in commands.skipped.items()
            ]
            if not len(commands.series):
                notes.append(f"{topic} holds no usable command: chunks not scored")
    texts = _text_topics(bag, topics, spec.texts, streams, notes)
    references = {
        stream: (topic, tuple(read_lines(bag, topic, notes))) for stream, topic in texts.items()
    }
    grippers = {} if commands is None else gripper_columns(names, limits, commands.series)
    return ScoreTargets(
        bag,
        tuple(names),
        period_ns,
        tuple(boundaries_ns),
        commands,
        grippers,
        references,
        tuple(notes),
    )


def _only_trajectory(topics: Mapping[str, str], outputs: set[str], notes: list[str]) -> str | None:
    """The bag's one JointTrajectory topic that the node does not publish itself."""
    found = sorted(t for t, ty in topics.items() if ty == TRAJECTORY and t not in outputs)
    if len(found) > 1:
        notes.append(f"the bag has several JointTrajectory topics {found}: name one with --target")
    if not found:
        notes.append("the bag has no JointTrajectory topic: name a command topic with --target")
    return found[0] if len(found) == 1 else None


def _check_topic(
    bag: Path, topics: Mapping[str, str], topic: str, types: Sequence[str], flag: str
) -> str:
    """The topic's type, or ValueError naming bag and topic."""
    if topic not in topics:
        raise ValueError(f"{bag} has no topic {topic} (named by {flag}); it has {sorted(topics)}")
    if topics[topic] not in types:
        raise ValueError(
            f"{bag} topic {topic} (named by {flag}) is {topics[topic]}, not one of {list(types)}"
        )
    return topics[topic]


def _text_topics(
    bag: Path,
    topics: Mapping[str, str],
    named: Mapping[str, str] | None,
    streams: Sequence[str],
    notes: list[str],
) -> dict[str, str]:
    """stream -> reference topic: as named (checked), else the String topic named like it."""
    if named is not None:
        unknown = [s for s in named if s not in streams]
        if unknown:
            raise ValueError(f"--text-target names streams {unknown} the node has not {streams}")
        for topic in named.values():
            _check_topic(bag, topics, topic, (STRING,), "--text-target")
        return dict(named)
    found = {}
    for stream in streams:
        matches = sorted(
            t for t, ty in topics.items() if ty == STRING and t.rsplit("/", 1)[-1] == stream
        )
        if len(matches) == 1:
            found[stream] = matches[0]
        elif matches:
            notes.append(f"several topics could be {stream}'s reference {matches}: name one")
    return found


def read_commands(
    bag: Path,
    topic: str,
    msgtype: str,
    names: Sequence[str],
    period_ns: int,
    boundaries_ns: Sequence[int],
    notes: list[str],
) -> Commands:
    """The commands of `topic` in `names` order (module docstring)."""
    messages = messages_of(bag, topic, notes)
    if msgtype != JOINT_STATE:
        rows_of = _trajectory_rows if msgtype == TRAJECTORY else _chunk_rows
        points, skipped = _planned_points(messages, names, rows_of)
        times = [t for t, _, _ in points]
        recorded = [r for _, _, r in points]
        rows = [p for _, p, _ in points]
    else:
        states, skipped = measured_states(messages, names)
        recorded = [t for t, _ in states]
        times = [t - period_ns for t in recorded]  # the command of one period before
        rows = [p for _, p in states]
    positions = np.asarray(rows, np.float64).reshape(len(rows), len(names))
    series = CommandSeries.of(times, positions, segment_of(np.asarray(recorded), boundaries_ns))
    return Commands(topic, KINDS[msgtype], series, skipped)


def message_time(msg: Any, message: BagMessage) -> int:
    """The header stamp, or the log time for a zero stamp."""
    return stamp_to_ns(msg.header.stamp) or message.time_ns


Rows = list[tuple[int, np.ndarray]]  # (ns after the message's start, positions) per point


def _planned_points(
    messages: Iterable[BagMessage],
    names: Sequence[str],
    rows_of: Callable[[Any, Sequence[str]], Rows],
) -> tuple[list[tuple[int, np.ndarray, int]], dict[str, int]]:
    """(apply time, positions, recorded time) of every point still in force: a trajectory
    (or chunk) replaces what earlier ones planned from its first point on. Unusable
    messages by reason."""
    points: list[tuple[int, np.ndarray, int]] = []
    skipped: dict[str, int] = {}
    for message in messages:
        msg = from_cdr(message.data, message.msgtype)
        start = message_time(msg, message)
        try:
            new = [(start + after, row, start) for after, row in rows_of(msg, names)]
        except InputError as error:
            skipped[str(error)] = skipped.get(str(error), 0) + 1
            continue
        if not new:
            continue
        new.sort(key=lambda p: p[0])
        while points and points[-1][0] >= new[0][0]:
            points.pop()
        points += new
    return points, skipped


def _trajectory_rows(msg: Any, names: Sequence[str]) -> Rows:
    """A JointTrajectory's points, each at its time_from_start."""
    return [
        (stamp_to_ns(p.time_from_start), trajectory_columns(msg.joint_names, p.positions, names))
        for p in msg.points
    ]


def _chunk_rows(msg: Any, names: Sequence[str]) -> Rows:
    """An ActionChunk's rows (H x D row-major), row k at k control periods."""
    width = len(msg.joint_names)
    if msg.action_dim != width or len(msg.actions) != msg.horizon * width:
        raise InputError(
            f"ActionChunk has {len(msg.actions)} values for {msg.horizon} rows of {width} joints"
        )
    rows = action_chunk_rows(msg)
    period = stamp_to_ns(msg.control_period)
    return [
        (k * period, trajectory_columns(msg.joint_names, row, names, "ActionChunk"))
        for k, row in enumerate(rows)
    ]


def trajectory_columns(
    joint_names: Sequence[str],
    positions: Sequence[float],
    names: Sequence[str],
    kind: str = "JointTrajectory",
) -> np.ndarray:
    """A trajectory point's (or a `kind` message's row's) positions in `names` order
    (InputError when one is missing or not finite)."""
    index = {name: i for i, name in enumerate(joint_names)}
    missing = [n for n in names if n not in index]
    if missing:
        raise InputError(f"{kind} lacks joints {excerpt_list(missing)}")
    if len(positions) != len(joint_names):
        raise InputError(
            f"{kind} point has {len(positions)} positions for {len(joint_names)} joints"
        )
    row = np.asarray([positions[index[n]] for n in names], np.float64)
    if not np.isfinite(row).all():
        raise InputError(f"{kind} point positions are not finite")
    return row


def measured_states(
    messages: Iterable[BagMessage], names: Sequence[str]
) -> tuple[list[tuple[int, np.ndarray]], dict[str, int]]:
    """(measured time, positions) of every usable JointState; unusable ones by reason."""
    states, skipped = [], {}
    for message in messages:
        msg = from_cdr(message.data, message.msgtype)
        try:
            states.append((message_time(msg, message), joint_positions(msg, names)))
        except InputError as error:
            skipped[str(error)] = skipped.get(str(error), 0) + 1
    return states, skipped


def read_lines(bag: Path, topic: str, notes: list[str]) -> list[tuple[int, str]]:
    """(log time, text) of every String of `topic`."""
    return [
        (m.time_ns, from_cdr(m.data, m.msgtype).data.strip())
        for m in messages_of(bag, topic, notes)
    ]


def messages_of(bag: Path, topic: str, notes: list[str]) -> Iterator[BagMessage]:
    """The messages of `topic` up to the damage in a corrupt bag, noted (the replay
    reports the damage itself)."""
    try:
        yield from read_bag(bag, [topic])
    except BagReadError as error:
        notes.append(f"{topic} read up to the damage: {error}")


def gripper_columns(
    names: Sequence[str], limits: JointLimits | None, series: CommandSeries
) -> dict[str, Gripper]:
    """The gripper columns (named "gripper" in any case) and their thresholds: the middle
    of the joint's position limits where the node has finite ones, else of the range the
    recorded commands span."""
    grippers = {}
    for k, name in enumerate(names):
        if "gripper" not in name.lower():
            continue
        bounds = _limit_range(limits, name)
        if bounds is None and len(series):
            column = series.positions[:, k]
            bounds = (float(column.min()), float(column.max()), "commands")
        if bounds is not None:
            lower, upper, source = bounds
            grippers[name] = Gripper(gripper_threshold(lower, upper), lower, upper, source)
    return grippers


def _limit_range(limits: JointLimits | None, name: str) -> tuple[float, float, str] | None:
    if limits is None or name not in limits.names:
        return None
    k = limits.names.index(name)
    lower, upper = float(limits.lower[k]), float(limits.upper[k])
    return (lower, upper, "limits") if np.isfinite([lower, upper]).all() else None
