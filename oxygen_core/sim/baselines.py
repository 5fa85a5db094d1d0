"""Policies without a model or images: the floor a trained policy's success must clear.

A success rate means little alone: a family a blind script solves half the time says
nothing about vision at 60 %. Each baseline turns the measured joints (and, for the blind
one, the instruction text) into action chunks of joint targets, as the model does, and
runs through the same closed loop (oxygen_core.train.rollout); none reads the images or
the world.

    hold    holds the joints it measures: what doing nothing scores (0 in every family)
    random  a new random grip point in the workspace (random height, gripper opening)
            every second, reached in a straight line: motion without intent
    blind   reads the family, the target's shape and the push direction from the
            instruction (never its colour, never an image), and knows the task
            distribution's geometry (the workspace, the push corridor):
            push  closed fingers raster the workspace in rows a push reach apart
                  (object radius + finger radius, from the shape), every row swept
                  toward the instructed side at push height and returned above the
                  objects. A row pushes an object straight only near its line and deflects
                  the others sideways by exactly one reach, onto the next row's line,
                  which then pushes them straight: every target gets a straight push.
            pick  grasp attempts on a grid 3.5 cm apart (the 2 cm grasp tolerance
                  around the nodes covers 9/10 of the workspace), fingers barely wider
                  than a ball at grasp height, closing just past a block; the gripper
                  joint tells whether it holds something and which shape (it stops at
                  the object's width): the instructed shape is lifted and held, another
                  is let go.
            put   pick's search, then the object is carried to the workspace's centre
                  (where a bowl is likeliest to be) and released above it.
    touch   reads what blind reads and probes by touch: closed fingers lowered onto the
            table tell the height of what is under them, which finds and tells apart
            balls, blocks and bowls; it then acts on the first object of the instructed
            shape it found (oxygen_core.sim.touch_probe).
"""

from __future__ import annotations

import zlib
from typing import Protocol

import numpy as np

from oxygen_core.sim import arm
from oxygen_core.sim.scene import WORKSPACE_X, WORKSPACE_Y, SceneObject
from oxygen_core.sim.scripting import OPEN, SHUT, Course, course, held_shape, parse_instruction
from oxygen_core.sim.tasks import PUSH_DIRECTIONS, PUSH_DISTANCE, PUSH_MARGIN
from oxygen_core.sim.touch_probe import TouchProbe
from oxygen_core.sim.world import PUSHER_RADIUS

ABOVE = 0.06  # grip point height clear of every object's top (balls are 4.4 cm)
HOVER = 0.15  # carrying height
PUSH_HEIGHT = 0.012  # as the expert pushes: the finger column spans the object
GRASP_HEIGHT = 0.018  # inside every graspable object's height
GRID = 0.035  # grasp attempts this far apart: 2 cm discs cover 9/10 of the lattice
SHUT_ROWS = 3  # rows the gripper is commanded shut per attempt: frames see it settled
RANDOM_EVERY = 20  # control steps between the random baseline's targets
NAMES = ("hold", "random", "blind", "touch")


class Baseline(Protocol):
    """An image-free policy: per episode `reset`, then one chunk per frame."""

    def reset(self, instruction: str) -> None: ...

    def chunk(self, state: np.ndarray, step: int, rows: int) -> np.ndarray:
        """float [rows, 7] joint targets from control step `step` on, given the joints."""
        ...


def make_baseline(name: str) -> Baseline:
    """The baseline called `name` (one of NAMES); ValueError for another."""
    if name == "hold":
        return HoldStill()
    if name == "random":
        return RandomTargets()
    if name == "blind":
        return Blind()
    if name == "touch":
        return TouchProbe()
    raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(NAMES)}")


class HoldStill:
    """Every row is the joints measured now."""

    def reset(self, instruction: str) -> None:
        pass

    def chunk(self, state: np.ndarray, step: int, rows: int) -> np.ndarray:
        return np.repeat(np.asarray(state, np.float64)[None], rows, axis=0)


class RandomTargets:
    """Every RANDOM_EVERY steps a straight course to a random point; seeded from the
    instruction, so an episode is the same whatever ran before it."""

    def __init__(self) -> None:
        self._course = Course(np.empty((0, arm.NUM_JOINTS)))
        self._rng = np.random.default_rng(0)

    def reset(self, instruction: str) -> None:
        self._rng = np.random.default_rng(zlib.crc32(instruction.encode()))
        self._course = Course(np.empty((0, arm.NUM_JOINTS)))

    def chunk(self, state: np.ndarray, step: int, rows: int) -> np.ndarray:
        if step >= self._course.start + RANDOM_EVERY or not len(self._course.rows):
            x, y = self._rng.uniform(*WORKSPACE_X), self._rng.uniform(*WORKSPACE_Y)
            point = np.array([x, y, self._rng.uniform(0.0, HOVER)])
            waypoints = [(point, float(self._rng.uniform(0.0, 1.0)))]
            self._course = Course(course(state, waypoints), step)
        return self._course.window(step, rows)


class Blind:
    """The strongest image-free script here (module docstring): push rasters, pick and put
    search by grasping."""

    def __init__(self) -> None:
        self._family, self._shape, self._direction = "pick", "block", None
        self._course = Course(np.empty((0, arm.NUM_JOINTS)))
        self._probe = np.zeros(0, bool)
        self._holding = False

    def reset(self, instruction: str) -> None:
        self._family, self._shape, self._direction = parse_instruction(instruction)
        self._course = Course(np.empty((0, arm.NUM_JOINTS)))
        self._holding = False

    def chunk(self, state: np.ndarray, step: int, rows: int) -> np.ndarray:
        if not len(self._course.rows):
            self._start(state, step)
        elif not self._holding and self._grasped(state, step):
            self._holding = True
            self._course = Course(course(state, self._carry(state)), step)
        return self._course.window(step, rows)

    def _start(self, state: np.ndarray, step: int) -> None:
        if self._family == "push":
            waypoints = push_raster(self._shape, self._direction)
        else:
            waypoints = grasp_search()
        rows = course(state, waypoints)
        self._probe = rows[:, arm.GRIPPER] == SHUT
        self._course = Course(rows, step)

    def _grasped(self, state: np.ndarray, step: int) -> bool:
        """The instructed shape is between the fingers: the gripper was commanded shut the
        step before and stopped at that shape's width."""
        i = step - 1 - self._course.start
        if not 0 <= i < len(self._probe) or not self._probe[i]:
            return False
        held = held_shape(float(state[arm.GRIPPER]))
        return held == self._shape

    def _carry(self, state: np.ndarray) -> list[tuple[np.ndarray, float]]:
        """Lift (and for put: carry to the workspace's centre and let go above it)."""
        grip = arm.forward(np.asarray(state, np.float64)).grip
        lifted = [(np.array([grip[0], grip[1], HOVER]), SHUT)]
        if self._family == "pick":
            return lifted
        centre = np.array([np.mean(WORKSPACE_X), np.mean(WORKSPACE_Y), HOVER])
        return [*lifted, (centre, SHUT), (centre, 1.0), (centre + [0, 0, 0.05], 1.0)]


def push_raster(shape: str, direction: str | None) -> list[tuple[np.ndarray, float]]:
    """Waypoints (grip point, gripper) of the push raster for a target of `shape`: rows one
    push reach apart over every x a target's centre can take, each swept from behind the
    push corridor's far end to past where a target at its near end has moved far enough."""
    if direction not in PUSH_DIRECTIONS:
        raise ValueError(f"a push needs a direction (left or right), got {direction!r}")
    radius = SceneObject("red", shape, np.zeros(3)).radius
    reach = radius + PUSHER_RADIUS
    sign = float(PUSH_DIRECTIONS[direction][1])
    low, high = WORKSPACE_Y
    nearest = (low if sign > 0 else -high) + PUSH_MARGIN  # the corridor, signed along the push
    farthest = (high if sign > 0 else -low) - PUSH_DISTANCE - PUSH_MARGIN
    y0 = sign * (nearest - reach - 0.01)
    y1 = sign * (farthest + PUSH_DISTANCE + 0.02 - reach)
    first = WORKSPACE_X[0] + radius - 0.002
    count = int(np.ceil((WORKSPACE_X[1] - radius - first) / reach)) + 1
    waypoints = []
    for x in first + reach * np.arange(count):
        waypoints += [
            (np.array([x, y0, ABOVE]), 0.0),
            (np.array([x, y0, PUSH_HEIGHT]), 0.0),
            (np.array([x, y1, PUSH_HEIGHT]), 0.0),
            (np.array([x, y1, ABOVE]), 0.0),
        ]
    return waypoints


def grasp_search() -> list[tuple[np.ndarray, float]]:
    """Waypoints of the grasp search: a snake over a GRID lattice of the workspace, at
    each node shut (SHUT_ROWS rows) and open again."""
    margin = SceneObject("red", "ball", np.zeros(3)).radius
    xs = np.arange(WORKSPACE_X[0] + margin, WORKSPACE_X[1] - margin + 1e-9, GRID)
    ys = np.arange(WORKSPACE_Y[0] + margin, WORKSPACE_Y[1] - margin + 1e-9, GRID)
    waypoints = [(np.array([xs[0], ys[0], ABOVE]), OPEN)]
    for k, x in enumerate(xs):
        for y in ys if k % 2 == 0 else ys[::-1]:
            node = np.array([x, y, GRASP_HEIGHT])
            waypoints += [(node, OPEN), *[(node, SHUT)] * SHUT_ROWS, (node, OPEN)]
    return waypoints
