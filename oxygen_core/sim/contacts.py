"""Contacts on the tabletop: footprints that cannot overlap, a bowl's wall, and what the
fingers come down on.

Seen from above every object is a circle (`SceneObject.radius`); a bowl's circle is its
wall at the rim. This is all the tasks' contacts need, so the world stays kinematic (no
physics engine; docs/DESIGN.md says why):

- **push chains**: when an object moves (the fingers pushed it, or it is carried low),
  every object resting on the table whose footprint it now overlaps at its height is moved
  out along the line between their centres just far enough to touch, and pushes others in
  turn. An object on the table is never inside a bowl (the bowl's bottom would be on it),
  so a bowl pushed over an object pushes the object, and an object pushed at a bowl pushes
  the bowl: nothing enters a bowl sideways.
- **the wall from above**: an object falling onto a bowl whose wall its footprint
  straddles tips to the side its centre is on: inside (it then lies within the wall) or
  outside (it then touches the wall from outside).
- **what stops the fingers**: fingers closed narrower than an object come down on its top
  (a bowl: its rim over the wall, its floor inside); open wider, they go around it.
"""

from __future__ import annotations

import numpy as np

from oxygen_core.sim.scene import BOWL_FLOOR, BOWL_HEIGHT, BOWL_RIM, SceneObject

MAX_PUSHES = 4  # per object per step: an object wedged between others is left, not looped


def footprint_gap(a: SceneObject, b: SceneObject) -> float:
    """Centre distance minus both radii: negative where the footprints overlap."""
    return float(np.hypot(*(a.position[:2] - b.position[:2]))) - a.radius - b.radius


def vertical_overlap(a: SceneObject, b: SceneObject) -> bool:
    """Whether their vertical extents overlap (one resting on the other's top does not)."""
    eps = 1e-9
    top_a, top_b = a.position[2] + a.height, b.position[2] + b.height
    return a.position[2] < top_b - eps and b.position[2] < top_a - eps


def inside_bowl(obj: SceneObject, bowl: SceneObject) -> bool:
    """Whether obj's footprint lies within the bowl's wall (it can only have come in from
    above)."""
    distance = float(np.hypot(*(obj.position[:2] - bowl.position[:2])))
    return distance + obj.radius <= BOWL_RIM + 1e-9


def touches(mover: SceneObject, other: SceneObject, mover_held: bool) -> bool:
    """Whether `mover` presses on `other` (resting on the table). A held object lowered
    into a bowl from above is inside its wall and does not touch it."""
    if not vertical_overlap(mover, other) or footprint_gap(mover, other) >= 0.0:
        return False
    return not (mover_held and other.shape == "bowl" and inside_bowl(mover, other))


def shift_to(offset: np.ndarray, reach: float) -> np.ndarray:
    """The shift (2,) along `offset` (from a centre to a point) that puts the point `reach`
    from the centre; a point on the centre moves along +x. Every contact rule moves an
    object this way: out to touching, or in to fit."""
    distance = float(np.hypot(*offset))
    direction = offset / distance if distance > 1e-9 else np.array([1.0, 0.0])
    return direction * (reach - distance)


def push_apart(mover: SceneObject, other: SceneObject) -> np.ndarray:
    """The sideways shift (2,) that moves `other` out of `mover`'s footprint to touch it."""
    return shift_to(other.position[:2] - mover.position[:2], mover.radius + other.radius)


def chain(
    objects: list[SceneObject],
    on_table: list[bool],
    movers: list[int],
    held: int | None,
) -> list[tuple[int, int, np.ndarray]]:
    """Resolve the pushes the objects `movers` start, moving each pushed object; returns
    (pusher, pushed, shift) in the order they happened, so the caller can move what rests
    on a pushed object and count contacts. Only objects resting on the table are pushed."""
    pushes: list[tuple[int, int, np.ndarray]] = []
    counts = [0] * len(objects)
    queue = list(movers)
    while queue:
        i = queue.pop(0)
        for j, other in enumerate(objects):
            if j == i or not on_table[j] or counts[j] >= MAX_PUSHES:
                continue
            if touches(objects[i], other, mover_held=i == held):
                shift = push_apart(objects[i], other)
                other.position[:2] += shift
                counts[j] += 1
                pushes.append((i, j, shift))
                queue.append(j)
    return pushes


def wall_deflection(obj: SceneObject, bowl: SceneObject) -> np.ndarray:
    """The sideways shift (2,) of a falling object straddling a bowl's wall: it tips in or
    out by where its centre is; zero where it clears the wall."""
    offset = obj.position[:2] - bowl.position[:2]
    distance = float(np.hypot(*offset))
    if distance + obj.radius <= BOWL_RIM or distance >= BOWL_RIM + obj.radius:
        return np.zeros(2)
    return shift_to(offset, BOWL_RIM - obj.radius if distance < BOWL_RIM else BOWL_RIM + obj.radius)


def finger_stop(obj: SceneObject, grip_xy: np.ndarray, pusher_radius: float) -> float | None:
    """The height closed fingers at `grip_xy` come down to on `obj`, None where the finger
    column misses it. A bowl: its rim over the wall, its floor inside it."""
    distance = float(np.hypot(*(grip_xy - obj.position[:2])))
    if distance >= obj.radius + pusher_radius:
        return None
    if obj.shape == "bowl" and distance <= BOWL_RIM - pusher_radius:
        return float(obj.position[2] + BOWL_FLOOR)
    return float(obj.position[2] + (BOWL_HEIGHT if obj.shape == "bowl" else obj.height))
