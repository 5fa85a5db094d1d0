"""What image-free scripts (oxygen_core.sim.baselines, touch_probe) are built from: the
instruction's fields, what the gripper's stop says it holds, and straight grip-point
courses within the joints' velocity limits, one joint row per control step."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from oxygen_core.sim import arm
from oxygen_core.sim.scene import SceneObject

DT = 0.05  # the control period the courses are timed for (runner.DEFAULT_CONTROL_HZ)
YAW = np.pi / 2  # the fingers close along world y (as at home)
SPEED = 0.4  # grip point speed (m/s); the joints' limits slow it where they bind
JOINT_MARGIN = 0.9  # of each joint's velocity limit, so the chunk gate has nothing to slow
OPEN, SHUT = 0.565, 0.48  # gripper: gap 4.52 cm (over a ball's 4.4), 3.84 (under a block's 4),
# one control step apart at the gripper's speed limit

_INSTRUCTION = re.compile(
    r"^(?P<family>pick up|put|push) the \w+ (?P<shape>block|ball)"
    r"(?: in the \w+ bowl| to the (?P<direction>left|right))?$"
)


def parse_instruction(text: str) -> tuple[str, str, str | None]:
    """(family, target shape, push direction or None) from a task's instruction;
    ValueError for a sentence no task family says."""
    match = _INSTRUCTION.match(text.strip())
    if match is None:
        raise ValueError(f"not a sim task's instruction: {text!r}")
    family = match["family"].split()[0]
    return family, match["shape"], match["direction"]


def held_shape(gripper: float) -> str | None:
    """Which graspable shape the fingers stopped on ("block", "ball"), None when empty:
    a held object keeps the gripper at its width."""
    widths = {s: SceneObject("red", s, np.zeros(3)).width / arm.MAX_GAP for s in ("block", "ball")}
    if gripper < (SHUT + min(widths.values())) / 2:
        return None
    return min(widths, key=lambda s: abs(widths[s] - gripper))


def course(state: np.ndarray, waypoints: Sequence[tuple[np.ndarray, float]]) -> np.ndarray:
    """Joint rows [N, 7], one per control step, from the joints `state` through the
    waypoints (grip point, gripper) in straight lines at SPEED, each segment slowed to
    keep every joint under JOINT_MARGIN of its velocity limit; a waypoint repeating the
    one before holds it one row."""
    q = np.asarray(state, np.float64)
    point, gripper = arm.forward(q).grip, float(q[arm.GRIPPER])
    rows = []
    for goal, grip_goal in waypoints:
        segment = _segment(point, gripper, np.asarray(goal, np.float64), grip_goal, q)
        rows += segment
        q, point, gripper = segment[-1], np.asarray(goal, np.float64), grip_goal
    return np.asarray(rows)


def _segment(
    start: np.ndarray, grip0: float, goal: np.ndarray, grip1: float, q: np.ndarray
) -> list[np.ndarray]:
    """The rows of one straight segment, at least one, as few as the limits allow."""
    steps = max(1, int(np.ceil(np.linalg.norm(goal - start) / (SPEED * DT))))
    for _ in range(8):
        rows = _rows(start, grip0, goal, grip1, q, steps)
        previous = np.asarray([q, *rows[:-1]])
        bound = JOINT_MARGIN * arm.VELOCITY_LIMITS * DT
        ratio = np.max(np.abs(np.asarray(rows) - previous) / bound)
        if ratio <= 1.0:
            return rows
        steps = int(np.ceil(steps * ratio)) + 1
    return rows


def _rows(
    start: np.ndarray, grip0: float, goal: np.ndarray, grip1: float, q: np.ndarray, steps: int
) -> list[np.ndarray]:
    rows, roll = [], float(q[5])
    for f in np.arange(1, steps + 1) / steps:
        gripper = grip0 + f * (grip1 - grip0)
        row = arm.inverse_top_down(start + f * (goal - start), YAW, gripper, roll)
        rows.append(row)
        roll = float(row[5])
    return rows


class Course:
    """Precomputed rows and the control step their first one runs at."""

    def __init__(self, rows: np.ndarray, start: int = 0) -> None:
        self.rows, self.start = rows, start

    def window(self, step: int, rows: int) -> np.ndarray:
        """`rows` rows from `step` on, the last row held past the course's end."""
        index = np.clip(np.arange(step, step + rows) - self.start, 0, len(self.rows) - 1)
        return self.rows[index]
