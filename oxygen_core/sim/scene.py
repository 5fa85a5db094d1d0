"""Objects on the table: colours, shapes, sizes, and seeded non-overlapping placements.

An object is its colour, its shape and a pose (bottom-centre position and yaw). Blocks and
balls can be grasped; bowls are too wide for the gripper and serve as containers, so a task
never asks to pick one up. Placement is rejection sampling inside the reachable workspace
with a clearance between footprints, driven only by the numpy Generator it is handed, so a
seed always gives the same scene.
"""

from __future__ import annotations

import dataclasses

import numpy as np

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (200, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 210),
    "yellow": (230, 200, 40),
}
SHAPES = ("block", "ball", "bowl")
GRASPABLE = ("block", "ball")

BLOCK_SIDE = 0.04
BALL_RADIUS = 0.022
BOWL_RADIUS = 0.065  # radius of the sphere the bowl is cut from
BOWL_HEIGHT = 0.04  # rim above the bowl's bottom
BOWL_RIM = float(np.sqrt(BOWL_RADIUS**2 - (BOWL_RADIUS - BOWL_HEIGHT) ** 2))  # rim radius
BOWL_FLOOR = 0.006  # an object inside rests this far above the bowl's bottom

# The table top (z = 0); an object whose centre leaves it falls to the floor.
TABLE_X, TABLE_Y = (-0.15, 0.75), (-0.45, 0.45)
FLOOR_Z = -0.75

# The region objects are placed in: inside the arm's reach, clear of its base.
WORKSPACE_X = (0.28, 0.54)
WORKSPACE_Y = (-0.24, 0.24)
CLEARANCE = 0.03  # free space between two footprints at placement


@dataclasses.dataclass
class SceneObject:
    """One object; `position` is the bottom centre (z = height of its underside)."""

    colour: str
    shape: str
    position: np.ndarray  # (3,)
    yaw: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"

    @property
    def radius(self) -> float:
        """Footprint radius: a circle that holds the object's outline at any yaw."""
        return {"block": BLOCK_SIDE * np.sqrt(0.5), "ball": BALL_RADIUS, "bowl": BOWL_RIM}[
            self.shape
        ]

    @property
    def height(self) -> float:
        return {"block": BLOCK_SIDE, "ball": 2 * BALL_RADIUS, "bowl": BOWL_HEIGHT}[self.shape]

    @property
    def width(self) -> float:
        """Its size between the fingers of a grasp aligned with its faces."""
        return {"block": BLOCK_SIDE, "ball": 2 * BALL_RADIUS, "bowl": 2 * BOWL_RIM}[self.shape]

    @property
    def centre(self) -> np.ndarray:
        return self.position + np.array([0.0, 0.0, self.height / 2])


def over_table(xy: np.ndarray) -> bool:
    """Whether a point (x, y) lies over the table top."""
    return bool(TABLE_X[0] < xy[0] < TABLE_X[1] and TABLE_Y[0] < xy[1] < TABLE_Y[1])


def sample_position(
    rng: np.random.Generator,
    radius: float,
    placed: list[SceneObject],
    x_range: tuple[float, float] = WORKSPACE_X,
    y_range: tuple[float, float] = WORKSPACE_Y,
    tries: int = 200,
) -> np.ndarray | None:
    """A bottom-centre position on the table clear of every placed object, or None."""
    for _ in range(tries):
        xy = np.array([rng.uniform(*x_range), rng.uniform(*y_range)])
        if all(np.hypot(*(xy - o.position[:2])) >= radius + o.radius + CLEARANCE for o in placed):
            return np.array([xy[0], xy[1], 0.0])
    return None


def footprints_clear(objects: list[SceneObject], clearance: float = CLEARANCE) -> bool:
    """Whether no two footprints come closer than `clearance` (the placement invariant)."""
    for i, a in enumerate(objects):
        for b in objects[i + 1 :]:
            if np.hypot(*(a.position[:2] - b.position[:2])) < a.radius + b.radius + clearance:
                return False
    return True
