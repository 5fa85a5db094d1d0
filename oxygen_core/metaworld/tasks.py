"""The MT10 tasks in words: one plain-English instruction per task, and the narration and
memory lines an episode earns as it goes.

The lines are derived from the env's state after each step (the tool centre between the
fingertips, the fingers' opening, the task's object, the success flag), not from a scripted
policy's branches, so they narrate any policy's episode, the oxygen policy's as well as the
scripted expert's, whose phases they follow (seeds 0-2 of every MT10 task). A task has a
target, the object its scripted policy moves the hand to (Meta-World's observation[4:7],
the task's first object; for reach, the goal at observation[-3:]), and a kind that orders
its phases the way the scripted policies do:

    reach    reaching the goal -> done
    contact  reaching the handle/button/drawer -> acting on it (tool centre within NEAR_M of
             the target) -> done
    grasp    reaching the object -> grasping it (within NEAR_M) -> carrying it (within
             NEAR_M, fingers closed below GRASPED_OPENING and the object LIFTED_M above where
             it started) -> done

"done" is the benchmark's own success flag. Phases only move forward within an episode (in
the order above): a scripted policy pulls a handle past where it was grabbed, or lifts the
hand off a pushed drawer, and is still doing the task. The narration line is the current
phase's; a memory line is written when a phase after reaching is entered ("reached the
puck", "grasped the puck", "drawer opened").
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

MT10_TASKS = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
)
PHASES = ("reaching", "grasping", "acting", "carrying", "done")  # in the order they come
NEAR_M = 0.06  # tool centre to target: the hand is at the object
GRASPED_OPENING = 0.8  # fingers' opening (0..1) below which they hold something
LIFTED_M = 0.01  # object height above its start that says it is carried


@dataclasses.dataclass(frozen=True)
class TaskText:
    """One task's instruction and the words its narration is built from."""

    instruction: str
    target: str  # what the hand goes to
    kind: str  # reach, contact or grasp (the module docstring)
    acting: str  # narration once at the target (contact) or carrying it (grasp)
    done: str  # narration and memory once the benchmark says success


TASK_TEXTS: dict[str, TaskText] = {
    "reach-v3": TaskText("reach the goal", "goal", "reach", "", "goal reached"),
    "push-v3": TaskText(
        "push the puck to the goal", "puck", "contact", "pushing the puck to the goal",
        "puck pushed to the goal",
    ),
    "pick-place-v3": TaskText(
        "pick up the puck and place it at the goal", "puck", "grasp",
        "carrying the puck to the goal", "puck placed at the goal",
    ),
    "door-open-v3": TaskText(
        "open the door", "door handle", "contact", "pulling the door open", "door opened"
    ),
    "drawer-open-v3": TaskText(
        "open the drawer", "drawer handle", "contact", "pulling the drawer open",
        "drawer opened",
    ),
    "drawer-close-v3": TaskText(
        "close the drawer", "drawer", "contact", "pushing the drawer closed", "drawer closed"
    ),
    "button-press-topdown-v3": TaskText(
        "press the button from the top", "button", "contact", "pressing the button down",
        "button pressed",
    ),
    "peg-insert-side-v3": TaskText(
        "insert the peg into the hole from the side", "peg", "grasp",
        "carrying the peg into the hole", "peg inserted",
    ),
    "window-open-v3": TaskText(
        "open the window", "window handle", "contact", "sliding the window open",
        "window opened",
    ),
    "window-close-v3": TaskText(
        "close the window", "window handle", "contact", "sliding the window closed",
        "window closed",
    ),
}  # fmt: skip


class Observed(Protocol):
    """What the narration reads of an observation (env.Observation has it)."""

    state: np.ndarray
    tcp: np.ndarray
    success: bool
    raw: np.ndarray


def instruction(task: str) -> str:
    """The task's instruction (KeyError for a task outside MT10)."""
    return TASK_TEXTS[task].instruction


@dataclasses.dataclass(frozen=True)
class Line:
    """What one step adds to the episode's language: its narration, and a memory line when
    a phase is first reached (else None)."""

    narration: str
    memory: str | None


class Narrator:
    """One episode's phases, read from each observation in turn."""

    def __init__(self, task: str) -> None:
        self.text = TASK_TEXTS[task]
        self._start_z: float | None = None
        self._phase = PHASES[0]

    def update(self, obs: Observed) -> Line:
        """The narration for `obs`, with a memory line when its phase is new."""
        phase = max(self._phase, self.phase(obs), key=PHASES.index)
        memory = self._memory(phase) if phase != self._phase else None
        self._phase = phase
        return Line(self._narration(phase), memory)

    def phase(self, obs: Observed) -> str:
        """The phase `obs` shows by itself (see the module docstring); `update` keeps the
        episode's furthest."""
        target = obs.raw[-3:] if self.text.kind == "reach" else obs.raw[4:7]
        if self._start_z is None:
            self._start_z = float(target[2])
        if obs.success:
            return "done"
        near = float(np.linalg.norm(obs.tcp - target)) < NEAR_M
        if not near or self.text.kind == "reach":
            return "reaching"
        if self.text.kind == "contact":
            return "acting"
        lifted = float(target[2]) - self._start_z > LIFTED_M
        return "carrying" if lifted and obs.state[3] < GRASPED_OPENING else "grasping"

    def _narration(self, phase: str) -> str:
        t = self.text
        return {
            "reaching": f"reaching the {t.target}",
            "grasping": f"grasping the {t.target}",
            "acting": t.acting,
            "carrying": t.acting,
            "done": t.done,
        }[phase]

    def _memory(self, phase: str) -> str:
        t = self.text
        return {
            "grasping": f"reached the {t.target}",
            "acting": f"reached the {t.target}",
            "carrying": f"grasped the {t.target}",
            "done": t.done,
        }[phase]
