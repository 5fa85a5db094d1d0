"""Task families: a seeded scene, an instruction string, and a success check on the world.

    pick  "pick up the <colour> <shape>"                 held with its underside >= LIFT_HEIGHT
    put   "put the <colour> <shape> in the <colour> bowl" grasped, released with its
                                                          underside above the bowl's rim,
                                                          resting inside that bowl
    push  "push the <colour> <shape> to the left|right"  pushed by the fingers, never
                                                          grasped, resting on the table,
                                                          moved >= PUSH_DISTANCE along +-y,
                                                          no object knocked off the table,
                                                          every other object within
                                                          DISTURB_LIMIT of where it stood

Each condition names how the task is done, not only where the target ends up: a put the
fingers slid along the table (the bowl's wall stops it anyway, `contacts`) or a push
done by carrying the target fails, and so does a push that sweeps the table clear: the
instruction names one object, and a script that moves everything in the instructed
direction (never looking) would otherwise solve most push scenes blind. `Task.contacts`
is what the episode's record keeps.

Left and right are the robot's (world +y is left); the base camera faces the robot, so the
robot's left is the image's right. The target is always a block or a ball (bowls receive
objects). Every object in a scene is a distinct (colour, shape) pair, so an instruction
always names exactly one object. `make_task(family, seed)` always returns a solvable scene:
the target and the bowl are placed first inside the reachable workspace, a push target
gets a clear corridor (no other footprint within reach of its path, with room behind it
for the fingers), and only then are the distractors scattered around them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from oxygen_core.sim.scene import (
    BOWL_HEIGHT,
    COLOURS,
    GRASPABLE,
    SHAPES,
    WORKSPACE_X,
    WORKSPACE_Y,
    SceneObject,
    sample_position,
)
from oxygen_core.sim.world import World

FAMILIES = ("pick", "put", "push")
TIME_LIMITS = {"pick": 20.0, "put": 30.0, "push": 25.0}  # sim seconds per episode
LIFT_HEIGHT = 0.08  # m above the table, for "pick up"
PUSH_DISTANCE = 0.08  # m along the instructed direction, for "push"
PUSH_DIRECTIONS = {"left": np.array([0.0, 1.0]), "right": np.array([0.0, -1.0])}
MIN_OBJECTS, MAX_OBJECTS = 3, 6
PUSH_MARGIN = 0.06  # corridor kept free beyond PUSH_DISTANCE, and behind the object
DISTURB_LIMIT = 0.02  # m: how far a push may move any object but its target (a nudge)


@dataclasses.dataclass(frozen=True)
class Task:
    """One episode's definition; `objects` is the initial scene (never mutated)."""

    family: str
    seed: int
    instruction: str
    objects: tuple[SceneObject, ...]
    target: int  # index into objects
    bowl: int | None = None  # "put": the receiving bowl
    direction: str | None = None  # "push": "left" or "right"

    @property
    def time_limit(self) -> float:
        return TIME_LIMITS[self.family]

    def new_world(self) -> World:
        """A fresh world at the initial scene with the arm at home."""
        return World(list(self.objects))

    def succeeded(self, world: World) -> bool:
        """The family's success condition on the current world state."""
        i = self.target
        obj, state = world.objects[i], world.states[i]
        if self.family == "pick":
            return bool(state.held and obj.position[2] >= LIFT_HEIGHT)
        if self.family == "put":
            rim = world.objects[self.bowl].position[2] + BOWL_HEIGHT
            released_above = state.release_height >= rim - 1e-9  # nan (never): False
            in_bowl = world.resting(i) and state.support == self.bowl
            return bool(state.was_grasped and released_above and in_bowl)
        moved = obj.position[:2] - self.objects[i].position[:2]
        along = float(moved @ PUSH_DIRECTIONS[self.direction])
        on_table = world.resting(i) and state.support is None and not world.off_table(i)
        by_fingers = state.finger_pushes > 0 and not state.was_grasped
        all_on = not any(world.off_table(j) for j in range(len(world.objects)))
        undisturbed = self.others_moved(world) <= DISTURB_LIMIT
        return bool(on_table and by_fingers and all_on and undisturbed and along >= PUSH_DISTANCE)

    def others_moved(self, world: World) -> float:
        """How far (m, on the table's plane) the most displaced object but the target moved."""
        moved = [
            float(np.linalg.norm(now.position[:2] - start.position[:2]))
            for j, (now, start) in enumerate(zip(world.objects, self.objects, strict=True))
            if j != self.target
        ]
        return max(moved, default=0.0)

    def contacts(self, world: World) -> Contacts:
        """What the episode did to the target and the scene, for its record."""
        state = world.states[self.target]
        return Contacts(
            grasped=state.was_grasped,
            release_height=state.release_height,
            finger_pushes=state.finger_pushes,
            object_pushes=world.object_pushes,
            off_table=sum(world.off_table(j) for j in range(len(world.objects))),
            others_moved=self.others_moved(world),
        )


@dataclasses.dataclass(frozen=True)
class Contacts:
    """An episode's contacts as its record keeps them (the episode message's fields), so
    a success can be audited: how the target got where it is."""

    grasped: bool  # the fingers held the target at some point
    release_height: float  # the target's underside (m) at its last release; nan: never
    finger_pushes: int  # control steps in which the fingers pushed the target
    object_pushes: int  # pushes of one object by another (any objects)
    off_table: int  # objects that left the table
    others_moved: float  # m: the farthest any object but the target moved on the table


def make_task(family: str, seed: int) -> Task:
    """The seeded episode of a family; the same (family, seed) always gives the same task."""
    if family not in FAMILIES:
        raise ValueError(f"unknown task family {family!r}; choose one of {FAMILIES}")
    rng = np.random.default_rng([int(seed), FAMILIES.index(family)])
    # Placement can fail for an unlucky draw; retrying from the same generator keeps it seeded.
    for _ in range(100):
        task = _draw(family, int(seed), rng)
        if task is not None:
            return task
    raise RuntimeError(f"no {family} scene for seed {seed} after 100 draws")


def _draw(family: str, seed: int, rng: np.random.Generator) -> Task | None:
    pairs = [(c, s) for c in COLOURS for s in SHAPES]
    order = rng.permutation(len(pairs))
    pairs = [pairs[k] for k in order]
    target = next(p for p in pairs if p[1] in GRASPABLE)
    chosen = [target]
    if family == "put":
        chosen.append(next(p for p in pairs if p[1] == "bowl" and p[0] != target[0]))
    count = int(rng.integers(MIN_OBJECTS, MAX_OBJECTS + 1))
    chosen += [p for p in pairs if p not in chosen][: count - len(chosen)]
    objects = [SceneObject(c, s, np.zeros(3), float(rng.uniform(0, np.pi / 2))) for c, s in chosen]

    direction = str(rng.choice(list(PUSH_DIRECTIONS))) if family == "push" else None
    keep_out: list[SceneObject] = []  # placed objects plus ghosts along a push corridor
    for k, obj in enumerate(objects):
        y_range = WORKSPACE_Y
        if k == 0 and direction is not None:
            travel = PUSH_DISTANCE + PUSH_MARGIN
            low, high = WORKSPACE_Y
            y_range = (
                (low + PUSH_MARGIN, high - travel)
                if direction == "left"
                else (
                    low + travel,
                    high - PUSH_MARGIN,
                )
            )
        position = sample_position(rng, obj.radius, keep_out, WORKSPACE_X, y_range)
        if position is None:
            return None
        obj.position = position
        keep_out.append(obj)
        if k == 0 and direction is not None:
            keep_out += _corridor(obj, PUSH_DIRECTIONS[direction])
    return Task(
        family=family,
        seed=seed,
        instruction=_instruction(family, objects, direction),
        objects=tuple(objects),
        target=0,
        bowl=1 if family == "put" else None,
        direction=direction,
    )


def _corridor(obj: SceneObject, direction: np.ndarray) -> list[SceneObject]:
    """Ghost copies of `obj` along its push path (and behind it) that others must clear."""
    steps = np.arange(-PUSH_MARGIN, PUSH_DISTANCE + PUSH_MARGIN + 1e-9, obj.radius)
    return [
        dataclasses.replace(obj, position=obj.position + np.array([*(direction * s), 0.0]))
        for s in steps
    ]


def _instruction(family: str, objects: list[SceneObject], direction: str | None) -> str:
    target = objects[0].name
    if family == "pick":
        return f"pick up the {target}"
    if family == "put":
        return f"put the {target} in the {objects[1].name}"
    return f"push the {target} to the {direction}"
