"""Open-loop scores of a policy's action chunks against what the robot was commanded.

The arithmetic of scored replay (`oxygen-bag replay`, oxygen_ros.tools.score_targets) and of
the in-process open-loop check (oxygen_core.train.grounding), so that a figure from a bag
and one from the sim's episodes are the same definition. No ROS here: times are integer
nanoseconds, commands and chunks plain arrays in the chunk's space (robot units, the
columns the chunk names).

Row convention: row i of a chunk is the command for time t0 + i control periods, where t0
is the time its row 0 stands for (the node's chunk: its frame's tick, the stamp a chunk
without hand-over delay is published with, oxygen_ros/msg/ActionChunk.msg; a training
record: its step, whose command is row 0). The robot reaches a command one period later,
so measured joint states are the commands of one period before (`CommandSeries`).

Which command a row is scored against (`CommandSeries.targets`): the recorded command
within half a control period of the row's time, in the row's task (a segment: the time
between two instruction changes). Past the task's last command that command holds (the
robot stays there, as training's chunk targets repeat an episode's last command,
oxygen_core.train.records); a row with no command near it (a gap in the recording) is not
scored, and neither is a chunk whose t0 comes after its task's last command (the task or
the recording ended).

What is scored (`score_chunks`), over the scored rows: per joint and horizon step the
mean absolute error (MAE) and mean squared error (MSE); the MAE at each chunk's first
executed row (the row the robot runs first: d rows in with a hand-over delay d); and per
gripper joint the open/close agreement, the share of rows where prediction and command
lie on the same side of the joint's threshold, the midpoint of its position range (a
gripper is commanded to open or close; the midpoint splits the range into the two).

Texts (`text_score`): exact-match rate (after stripping surrounding white space) and the
mean word-level F1 (`word_f1`).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


# --------------------------------------------------------------------------- targets


@dataclasses.dataclass(frozen=True)
class CommandSeries:
    """Recorded commands sorted by (segment, time): when each applies, its positions in the
    chunk's columns, the task (segment) it belongs to."""

    times_ns: np.ndarray  # int64 [M]
    positions: np.ndarray  # float64 [M, D]
    segments: np.ndarray  # int64 [M]

    @classmethod
    def of(
        cls, times_ns: Sequence[int], positions: np.ndarray, segments: Sequence[int]
    ) -> CommandSeries:
        """The series of these commands in any order."""
        times = np.asarray(times_ns, np.int64)
        seg = np.asarray(segments, np.int64)
        order = np.lexsort((times, seg))
        rows = np.asarray(positions, np.float64).reshape(len(times), -1)
        return cls(times[order], rows[order], seg[order])

    def __len__(self) -> int:
        return len(self.times_ns)

    def targets(
        self, t0_ns: int, segment: int, rows: int, period_ns: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The commands [rows, D] for a chunk whose row 0 is at t0_ns in `segment`, and
        which rows have one [rows] (module docstring); None when the chunk is not scored
        (no command of its segment at or after t0)."""
        lo, hi = np.searchsorted(self.segments, [segment, segment + 1])
        times, positions = self.times_ns[lo:hi], self.positions[lo:hi]
        half = period_ns / 2
        if not len(times) or t0_ns >= times[-1] + half:
            return None
        want = t0_ns + period_ns * np.arange(rows, dtype=np.int64)
        right = np.clip(np.searchsorted(times, want), 0, len(times) - 1)
        left = np.clip(right - 1, 0, len(times) - 1)
        nearest = np.where(np.abs(times[right] - want) < np.abs(times[left] - want), right, left)
        held = want >= times[-1] + half
        nearest[held] = len(times) - 1
        valid = held | (np.abs(times[nearest] - want) < half)
        return positions[nearest], valid


def segment_of(times_ns: np.ndarray | int, boundaries_ns: Sequence[int]) -> np.ndarray:
    """The segment of each time: how many boundaries (instruction changes) lie at or
    before it (a change at t starts the new task at t)."""
    return np.searchsorted(np.asarray(boundaries_ns, np.int64), times_ns, side="right")


# --------------------------------------------------------------------------- chunks


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One chunk to score: its rows and the time its row 0 stands for."""

    t0_ns: int
    actions: np.ndarray  # float [H, D], the chunk's columns
    first: int = 0  # the row the robot executes first (a hand-over delay's d)


@dataclasses.dataclass(frozen=True)
class GripperScore:
    """Open/close agreement of one gripper joint."""

    threshold: float  # the midpoint of its range: above it is one state, else the other
    agreement: float  # share of the scored rows on the same side, over every step
    by_step: tuple[float | None, ...]  # per horizon step (None: no row scored)


@dataclasses.dataclass(frozen=True)
class ChunkScore:
    """Errors of chunks against their commands, in the chunks' units (module docstring)."""

    names: tuple[str, ...]  # the chunk's columns
    chunks: int  # chunks with at least one row scored
    rows: np.ndarray  # int [H]: rows scored per horizon step
    mae: np.ndarray  # float64 [H, D], NaN where no row was scored
    mse: np.ndarray  # float64 [H, D]
    first_mae: np.ndarray  # float64 [D]: at each chunk's first executed row
    grippers: Mapping[str, GripperScore]

    def mean(self, table: np.ndarray, columns: Sequence[int] | None = None) -> float:
        """The mean of `table` (mae or mse) over every scored row, of `columns` (default
        all): steps weighted by their rows, so it is the plain mean over the rows."""
        cols = list(range(len(self.names))) if columns is None else list(columns)
        seen = self.rows > 0
        if not seen.any() or not cols:
            return float("nan")
        weights = self.rows[seen]
        return float(np.average(table[seen][:, cols].mean(axis=1), weights=weights))


def score_chunks(
    pred: np.ndarray,
    target: np.ndarray,
    valid: np.ndarray,
    names: Sequence[str],
    first: np.ndarray | None = None,
    grippers: Mapping[str, float] | None = None,
) -> ChunkScore:
    """pred, target [N, H, D]; valid bool [N, H] (the rows with a command); first [N]: each
    chunk's first executed row (default 0); grippers: gripper column name -> threshold."""
    pred, target = np.asarray(pred, np.float64), np.asarray(target, np.float64)
    valid = np.asarray(valid, bool)
    n, horizon, dim = pred.shape
    if target.shape != pred.shape or valid.shape != (n, horizon) or len(names) != dim:
        raise ValueError(
            f"chunks {pred.shape}, targets {target.shape}, valid {valid.shape} and "
            f"{len(names)} names do not fit together"
        )
    first = np.zeros(n, int) if first is None else np.minimum(np.asarray(first, int), horizon - 1)
    error = np.where(valid[..., None], pred - target, np.nan)
    rows = valid.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):  # a step without rows stays NaN
        mae = np.nansum(np.abs(error), axis=0) / rows[:, None]
        mse = np.nansum(error**2, axis=0) / rows[:, None]
        at_first = error[np.arange(n), first]
        kept = valid[np.arange(n), first]
        first_mae = np.abs(at_first[kept]).sum(axis=0) / kept.sum()
    scores = {
        name: _gripper_score(pred[..., names.index(name)], target[..., names.index(name)], valid, t)
        for name, t in (grippers or {}).items()
    }
    return ChunkScore(tuple(names), int(valid.any(axis=1).sum()), rows, mae, mse, first_mae, scores)


def score_against(
    chunks: Sequence[Chunk],
    commands: CommandSeries,
    boundaries_ns: Sequence[int],
    period_ns: int,
    names: Sequence[str],
    grippers: Mapping[str, float] | None = None,
) -> tuple[ChunkScore, list[tuple[Chunk, np.ndarray, np.ndarray]]]:
    """Chunks against the recorded commands (`CommandSeries.targets`, tasks split at
    `boundaries_ns`); the score and the scored chunks with their commands and valid rows."""
    if not chunks:
        raise ValueError("no chunks to score")
    scored = []
    for chunk in chunks:
        found = commands.targets(
            chunk.t0_ns, int(segment_of(chunk.t0_ns, boundaries_ns)), len(chunk.actions), period_ns
        )
        if found is not None and found[1].any():
            scored.append((chunk, *found))
    dim = len(names)
    horizon = max((len(c.actions) for c in chunks), default=0)
    pred = np.asarray([c.actions for c, _, _ in scored], np.float64).reshape(-1, horizon, dim)
    target = np.asarray([t for _, t, _ in scored], np.float64).reshape(pred.shape)
    valid = np.asarray([v for _, _, v in scored], bool).reshape(pred.shape[:2])
    first = np.asarray([c.first for c, _, _ in scored], int)
    return score_chunks(pred, target, valid, names, first, grippers), scored


def _gripper_score(
    pred: np.ndarray, target: np.ndarray, valid: np.ndarray, threshold: float
) -> GripperScore:
    same = (pred > threshold) == (target > threshold)
    per_step = [
        float(same[valid[:, i], i].mean()) if valid[:, i].any() else None
        for i in range(same.shape[1])
    ]
    total = float(same[valid].mean()) if valid.any() else float("nan")
    return GripperScore(float(threshold), total, tuple(per_step))


def gripper_threshold(lower: float, upper: float) -> float:
    """The open/close threshold of a gripper whose positions run over [lower, upper]."""
    return (float(lower) + float(upper)) / 2


# --------------------------------------------------------------------------- texts


@dataclasses.dataclass(frozen=True)
class TextScore:
    """Said texts against reference texts."""

    texts: int
    exact: float  # share of texts equal to their reference (surrounding white space aside)
    word_f1: float  # mean `word_f1`


def words(text: str) -> list[str]:
    """Lower-case runs of letters and digits: punctuation and case do not count."""
    return _WORD.findall(text.lower())


def word_f1(said: str, reference: str) -> float:
    """Word-level F1: the harmonic mean of precision (shared words / said words) and recall
    (shared words / reference words), words counted with multiplicity (a word said twice
    is shared at most as often as the reference has it). Two empty texts agree (1); one
    empty text against a non-empty one scores 0."""
    a, b = words(said), words(reference)
    if not a or not b:
        return float(a == b)
    shared = sum((collections.Counter(a) & collections.Counter(b)).values())
    if not shared:
        return 0.0
    precision, recall = shared / len(a), shared / len(b)
    return 2 * precision * recall / (precision + recall)


def text_score(pairs: Iterable[tuple[str, str]]) -> TextScore:
    """(said, reference) pairs -> exact-match rate and mean word F1 (NaN without pairs)."""
    pairs = list(pairs)
    if not pairs:
        return TextScore(0, float("nan"), float("nan"))
    exact = np.mean([s.strip() == r.strip() for s, r in pairs])
    return TextScore(len(pairs), float(exact), float(np.mean([word_f1(s, r) for s, r in pairs])))
