"""Grounding rows: where-is questions about the scene, answered from the sim's state.

The flow loss alone gives a tabletop policy one lesson per episode on which object the
instruction means (every step of an episode reaches for the same target), and a few hundred
episodes do not teach a small vision tower to bind "blue ball" to a blob in the image: the
policy then reaches for whatever the wrist camera shows. pi0.5 co-trains on object
localisation for the same reason; here each step adds two text rows, trained with the
same next-token loss as the node's streams but never asked for by the node:

    "Find the <colour> <shape>:"  -> "<cell>"               a random object of the scene
    "Target:"                    -> "<cell>"               the instructed object
                                    "<cell> to <cell>"     ... and its bowl ("put")

A cell is the object's current table position on a coarse grid, rows from the robot
outwards and columns from the robot's right to its left: "r2 c5". The "Target:" row can
only be answered by reading the instruction in the prefix and finding its object in the
images, which is the binding the action expert needs.
"""

from __future__ import annotations

import numpy as np

from oxygen_core.sim.scene import WORKSPACE_X, WORKSPACE_Y
from oxygen_core.sim.tasks import Task
from oxygen_core.sim.world import World

ROWS, COLUMNS = 4, 6  # grid cells over the workspace (about 6.5 x 8 cm each)
TARGET_PROMPT = "Target:"
KINDS = ("find", "target")  # the rows of a step, in order
COUNT = len(KINDS)


def find_prompt(name: str) -> str:
    return f"Find the {name}:"


def cell(xy: np.ndarray) -> str:
    """The grid cell of a table position; positions off the workspace take the edge cell."""
    row = _bin(xy[0], WORKSPACE_X, ROWS)
    column = _bin(xy[1], WORKSPACE_Y, COLUMNS)
    return f"r{row} c{column}"


def _bin(value: float, span: tuple[float, float], count: int) -> int:
    frac = (value - span[0]) / (span[1] - span[0])
    return int(np.clip(np.floor(frac * count), 0, count - 1)) + 1


def rows(task: Task, world: World, rng: np.random.Generator) -> tuple[tuple[str, str], ...]:
    """This step's (prompt, answer) rows: one random object of the scene, then the target."""
    pick = int(rng.integers(len(world.objects)))
    found = cell(world.objects[pick].position[:2])
    return (find_prompt(world.objects[pick].name), found), (TARGET_PROMPT, target(task, world))


def target(task: Task, world: World) -> str:
    """The "Target:" answer now: the instructed object's cell, and its bowl's for "put"."""
    where = cell(world.objects[task.target].position[:2])
    if task.bowl is None:
        return where
    return f"{where} to {cell(world.objects[task.bowl].position[:2])}"
