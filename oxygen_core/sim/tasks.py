"""Task families: a seeded scene, an instruction string, and a verdict on the world.

    pick  "pick up the <colour> <shape>"                 the first object lifted with its
                                                          underside >= LIFT_HEIGHT is the
                                                          target
    put   "put the <colour> <shape> in the <colour> bowl" after the first release, once all
                                                          rests: the target was grasped,
                                                          dropped over that bowl's opening
                                                          from above its rim while the bowl
                                                          stood on the table, rests in it,
                                                          and the bowl still stands there
    push  "push the <colour> <shape> to the left|right"  resting on the table, moved >=
                                                          PUSH_DISTANCE the instructed way,
                                                          within PUSH_ANGLE of it, the
                                                          fingers making most of the
                                                          motion, nothing held meanwhile,
                                                          never grasped; no other object
                                                          grasped or moved > DISTURB_LIMIT

In every family an object knocked off the table fails the episode. Each condition names
how the task is done, not only where the target ends up: a put won by pushing the bowl
off the table and the target after it, or by sliding the target along the table, fails;
so does a push done with a held object as a tool, one that goes mostly sideways, or one
that sweeps the table clear (a script that moves everything the instructed way would
otherwise solve most push scenes blind).

An episode is judged once, at its commitment (`Task.verdict`), not at the first instant
some state qualifies: the first lift decides a pick, the first release a put, and a push
is decided by its success or by the first thing that spoils it. With time limits of 3x
the expert's, trying candidate after candidate until one counts (a blind policy probing
objects by touch) does not pay. Half the scenes (TWIN_SHARE) are built with a twin of
each object the instruction names: the same shape, so the same height and width under
the fingers, in another colour; with the distractors drawn at random, about four in five
scenes hold a same-shape object of another colour. Only vision tells the target from its
twin. `Task.contacts` is what the episode's record keeps.

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
# Sim seconds per episode: 3 x the expert's 95th percentile time on training seeds 0-199
# (pick 3.30 s, put 5.65, push 2.80), rounded up: room for a slower policy, none for
# trying object after object (module docstring).
TIME_LIMITS = {"pick": 10.0, "put": 17.0, "push": 9.0}
LIFT_HEIGHT = 0.08  # m above the table, for "pick up"
PUSH_DISTANCE = 0.08  # m along the instructed direction, for "push"
PUSH_DIRECTIONS = {"left": np.array([0.0, 1.0]), "right": np.array([0.0, -1.0])}
MIN_OBJECTS, MAX_OBJECTS = 3, 6
TWIN_SHARE = 0.5  # scenes where each object the instruction names has a twin (module doc)
PUSH_MARGIN = 0.06  # corridor kept free beyond PUSH_DISTANCE, and behind the object
DISTURB_LIMIT = 0.02  # m: how far a push may move any object but its target (a nudge)
PUSH_ANGLE = 30.0  # degrees: the most a push's net motion may turn from the instructed way
PUSH_BY_FINGERS = 0.5  # the share of the target's net motion the fingers must have made


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

    def verdict(self, world: World) -> bool | None:
        """The episode's outcome once it is decided (module docstring): True or False at
        the family's commitment, None while undecided."""
        if any(world.off_table(j) for j in range(len(world.objects))):
            return False
        if self.family == "pick":
            held = world.held
            if held is None or world.objects[held].position[2] < LIFT_HEIGHT:
                return None
            return held == self.target
        if self.family == "put":
            released = any(s.was_grasped and not s.held for s in world.states)
            if not released or not all(world.resting(j) for j in range(len(world.objects))):
                return None
            return self._put_done(world)
        if self._push_done(world):
            return True
        return False if self._push_spoiled(world) else None

    def _put_done(self, world: World) -> bool:
        """The target was grasped, dropped into the bowl from above its rim as the bowl
        stood on the table, and rests in it; the bowl still stands on the table."""
        state = world.states[self.target]
        in_bowl = world.resting(self.target) and state.support == self.bowl
        dropped_in = state.was_grasped and state.released_into == self.bowl
        return bool(dropped_in and in_bowl and world.on_table(self.bowl))

    def _push_done(self, world: World) -> bool:
        """The target rests on the table moved PUSH_DISTANCE the instructed way, within
        PUSH_ANGLE of it, by the fingers for most of the way, with nothing held."""
        i = self.target
        state = world.states[i]
        moved = world.objects[i].position[:2] - self.objects[i].position[:2]
        distance = float(np.hypot(*moved))
        along = float(moved @ PUSH_DIRECTIONS[self.direction])
        straight = along >= distance * np.cos(np.radians(PUSH_ANGLE))
        by_fingers = state.finger_travel >= PUSH_BY_FINGERS * distance
        return bool(
            world.on_table(i) and along >= PUSH_DISTANCE and straight and by_fingers
        ) and not self._push_spoiled(world)

    def _push_spoiled(self, world: World) -> bool:
        """A push that can no longer count: the target grasped or moved while something
        was held, another object grasped or moved more than DISTURB_LIMIT."""
        target = world.states[self.target]
        others = [s for j, s in enumerate(world.states) if j != self.target]
        return (
            target.was_grasped
            or target.moved_while_holding
            or any(s.was_grasped for s in others)
            or self.others_moved(world) > DISTURB_LIMIT
        )

    def others_moved(self, world: World) -> float:
        """How far (m, in 3D) the most displaced object but the target moved."""
        moved = [
            float(np.linalg.norm(now.position - start.position))
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
    if rng.random() < TWIN_SHARE:  # what only colour tells apart: a twin of each named one
        chosen += [next(p for p in pairs if p[1] == c[1] and p not in chosen) for c in list(chosen)]
    count = int(rng.integers(MIN_OBJECTS, MAX_OBJECTS + 1))
    chosen += [p for p in pairs if p not in chosen][: max(0, count - len(chosen))]
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
