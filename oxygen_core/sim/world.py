"""The kinematic tabletop world: arm servos, grasping by attachment, falling, contacts.

No physics engine (docs/DESIGN.md says why): each `step` moves the joints towards their
targets within the limits (`arm.limit_step`), cut short where the fingertips would go below
what is under them (the table top; the top of an object narrower fingers come down on; a
held object's underside stops at the table), then applies five rules in a fixed order:

1. grasp: a free object lies between the fingertips (its centre within `GRASP_TOLERANCE` of
   the grip point sideways, the grip point inside its vertical extent) and the closing
   fingers reach its width: it is attached, and the fingers stop at its width (so the
   gripper joint reports a held object, as a real gripper's position does);
2. release: the gripper opens wider than the held object: it is detached (its underside
   height is recorded) and falls;
3. carry: a held object moves with the fingers and pushes what it meets on the table;
4. fall: a free object above its support drops under gravity and comes to rest on the
   highest surface under its centre at or below its underside: the floor of a bowl (only
   from above: one straddling the wall tips in or out), the top of a block or ball, the
   table, or the floor beyond the table's edge;
5. push: closed fingers (a vertical finger column of radius `PUSHER_RADIUS`) overlapping a
   resting object's footprint at its height move it out along the line from the fingers
   to its centre, just far enough to touch (fingers inside a bowl push its wall from
   within); open fingers wider than an object go around it. A pushed object pushes the
   objects on the table it meets in turn (`contacts.chain`), and carries what rests on it.

Each object's state records what a success check must not take on trust: whether it was
ever grasped, where it was released (its height, and the bowl on the table whose opening it
was over with its underside above that bowl's rim, if any), how often and how far the
fingers pushed it, and whether it moved while the gripper held something (a tool).

The world is driven with joint targets at the control rate; sim time advances by dt.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import numpy as np

from oxygen_core.sim import arm, contacts
from oxygen_core.sim.scene import (
    BOWL_FLOOR,
    BOWL_HEIGHT,
    BOWL_RIM,
    FLOOR_Z,
    SceneObject,
    over_table,
)

GRASP_TOLERANCE = 0.02  # sideways offset of an object's centre from the grip point (m)
PUSHER_RADIUS = 0.015  # the closed fingers seen from above, as a circle (m)
GRAVITY = 9.81


@dataclasses.dataclass
class ObjectState:
    """What the world tracks per object besides its pose."""

    held: bool = False
    was_grasped: bool = False
    fall_speed: float = 0.0
    support: int | None = None  # index of the object it rests on; None: the table
    release_height: float = float("nan")  # its underside (m) at its last release
    released_into: int | None = None  # the bowl it was dropped into at its last release
    finger_pushes: int = 0  # control steps in which the fingers pushed it
    finger_travel: float = 0.0  # m the fingers moved it, summed over their pushes
    moved_while_holding: bool = False  # pushed while the gripper held another object


class World:
    """The arm and the objects; all state a task's success check reads."""

    def __init__(self, objects: list[SceneObject], joints: np.ndarray = arm.HOME) -> None:
        self.objects = copy.deepcopy(objects)
        self.states = [ObjectState() for _ in objects]
        self.joints = np.array(joints, np.float64)
        self.time = 0.0
        self.object_pushes = 0  # pushes of one object by another, all objects, so far
        self._grip_offset = np.zeros(3)  # held object's bottom centre in the tool frame
        self._held_yaw_offset = 0.0
        self.pose = arm.forward(self.joints)

    @property
    def held(self) -> int | None:
        return next((i for i, s in enumerate(self.states) if s.held), None)

    def step(self, targets: np.ndarray, dt: float) -> None:
        """Advance one control period towards joint `targets` (7,)."""
        targets = np.asarray(targets, np.float64)
        if targets.shape != (arm.NUM_JOINTS,) or not np.all(np.isfinite(targets)):
            raise ValueError(f"joint targets must be {arm.NUM_JOINTS} finite numbers: {targets}")
        before = self.joints
        self.joints = self._stopped(before, arm.limit_step(before, targets, dt))
        held = self.held
        if held is not None:
            # The fingers cannot close through the object they hold.
            self.joints[6] = max(self.joints[6], self.objects[held].width / arm.MAX_GAP)
        self.pose = arm.forward(self.joints)
        if held is None:
            self._try_grasp(before[6])
        elif self.pose.gap > self.objects[held].width + 1e-9:
            self._release(held)
        self._carry()
        self._fall(dt)
        self._push()
        self.time += dt

    def off_table(self, index: int) -> bool:
        """Whether object `index` has left the table (pushed over its edge)."""
        return not self.states[index].held and not over_table(self.objects[index].position[:2])

    def _stopped(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        """The servo step from `before` to `after` cut short where the fingertips meet what
        is under them when it starts: the table (a held object's underside stops there)
        and the objects the finger column is over, each at the height the fingers come
        down to from where they are (a bowl entered from above: its floor throughout)."""
        pose, held = self.pose, self.held
        hang = 0.0 if held is None else pose.grip[2] - self.objects[held].position[2]
        under = []
        for i, obj in enumerate(self.objects):
            stop = contacts.finger_stop(obj, pose.grip[:2], PUSHER_RADIUS)
            if i != held and pose.gap < obj.width and stop is not None:
                if pose.grip[2] >= stop - 1e-9:
                    under.append((obj, stop))

        def floor(grip: np.ndarray) -> float:
            meets = [
                s for o, s in under if contacts.finger_stop(o, grip[:2], PUSHER_RADIUS) is not None
            ]
            return max([max(hang, 0.0), *meets])

        return _stopped_by(before, pose, after, floor)

    def _release(self, index: int) -> None:
        state = self.states[index]
        state.held = False
        state.release_height = float(self.objects[index].position[2])
        state.released_into = self._bowl_below(index)

    def _bowl_below(self, index: int) -> int | None:
        """The bowl standing on the table whose opening object `index` is over (its
        footprint inside the rim) with its underside at or above the rim, if any."""
        obj = self.objects[index]
        for j, bowl in enumerate(self.objects):
            if bowl.shape != "bowl" or not self.on_table(j):
                continue
            inside = np.hypot(*(obj.position[:2] - bowl.position[:2])) <= BOWL_RIM - obj.radius
            if inside and obj.position[2] >= bowl.position[2] + BOWL_HEIGHT - 1e-9:
                return j
        return None

    def on_table(self, index: int) -> bool:
        """Whether object `index` rests on the table top itself (not held, not falling, on
        no other object, not beyond the edge)."""
        return (
            self.resting(index) and self.states[index].support is None and not self.off_table(index)
        )

    def _try_grasp(self, gripper_before: float) -> None:
        gap_before = gripper_before * arm.MAX_GAP
        for obj, state in zip(self.objects, self.states, strict=True):
            if obj.shape == "bowl" or not self._between_fingers(obj):
                continue
            if gap_before >= obj.width > self.pose.gap:
                state.held = state.was_grasped = True
                state.fall_speed, state.support = 0.0, None
                self.joints[6] = obj.width / arm.MAX_GAP
                self.pose = arm.forward(self.joints)
                rot = self.pose.tool_rotation
                self._grip_offset = rot.T @ (obj.position - self.pose.grip)
                self._held_yaw_offset = obj.yaw - self._tool_yaw()
                return

    def _between_fingers(self, obj: SceneObject) -> bool:
        grip = self.pose.grip
        sideways = np.hypot(*(obj.centre[:2] - grip[:2]))
        return sideways <= GRASP_TOLERANCE and obj.position[2] <= grip[2] <= (
            obj.position[2] + obj.height
        )

    def _tool_yaw(self) -> float:
        axis = self.pose.finger_axis
        return float(np.arctan2(axis[1], axis[0]))

    def _carry(self) -> None:
        held = self.held
        if held is None:
            return
        obj = self.objects[held]
        obj.position = self.pose.grip + self.pose.tool_rotation @ self._grip_offset
        obj.yaw = self._tool_yaw() + self._held_yaw_offset
        self._chain([held])

    def support_height(self, index: int) -> tuple[float, int | None]:
        """Where object `index` would rest if dropped now: (height of its underside, support).
        Only surfaces at or below its underside count: nothing is lifted onto a support."""
        obj = self.objects[index]
        best: tuple[float, int | None] = (0.0 if over_table(obj.position[:2]) else FLOOR_Z, None)
        for j, other in enumerate(self.objects):
            if j == index or self.states[j].held:
                continue
            distance = np.hypot(*(obj.position[:2] - other.position[:2]))
            if other.shape == "bowl":
                inside = contacts.inside_bowl(obj, other)
                top = other.position[2] + BOWL_FLOOR if inside else None
            else:
                top = other.position[2] + other.height if distance < other.radius else None
            if top is not None and best[0] < top <= obj.position[2] + 1e-9:
                best = (top, j)
        return best

    def _fall(self, dt: float) -> None:
        for i, (obj, state) in enumerate(zip(self.objects, self.states, strict=True)):
            if state.held:
                continue
            if not self.resting(i):
                self._tip_off_walls(obj)
            rest, support = self.support_height(i)
            if obj.position[2] <= rest + 1e-9:
                obj.position[2], state.fall_speed, state.support = rest, 0.0, support
                continue
            state.fall_speed += GRAVITY * dt
            obj.position[2] = max(rest, obj.position[2] - state.fall_speed * dt)
            if obj.position[2] == rest:
                state.fall_speed, state.support = 0.0, support

    def _tip_off_walls(self, obj: SceneObject) -> None:
        """A falling object straddling a bowl's wall below it tips in or out."""
        for bowl in self.objects:
            if bowl.shape == "bowl" and bowl.position[2] + BOWL_HEIGHT <= obj.position[2] + 1e-9:
                obj.position[:2] += contacts.wall_deflection(obj, bowl)

    def resting(self, index: int) -> bool:
        state = self.states[index]
        return not state.held and state.fall_speed == 0.0

    def _push(self) -> None:
        """Closed fingers move the objects their column overlaps; those push on in turn."""
        grip = self.pose.grip
        finger_top = grip[2] + arm.FINGER_LENGTH
        pushed = []
        for i, (obj, state) in enumerate(zip(self.objects, self.states, strict=True)):
            if state.held or self.pose.gap >= obj.width:
                continue  # open fingers straddle an object instead of pushing it
            if finger_top <= obj.position[2] or grip[2] >= obj.position[2] + obj.height - 1e-9:
                continue
            shift = _finger_shift(obj, grip[:2])
            if shift is None:
                continue
            obj.position[:2] += shift
            state.finger_pushes += 1
            state.finger_travel += float(np.hypot(*shift))
            state.moved_while_holding |= self.held is not None
            self._drag_contents(i, shift)
            pushed.append(i)
        self._chain(pushed)

    def _chain(self, movers: list[int]) -> None:
        """The pushes between objects that `movers` start, with what rests on each."""
        on_table = [self.on_table(i) for i in range(len(self.objects))]
        for _, pushed, shift in contacts.chain(self.objects, on_table, movers, self.held):
            self.object_pushes += 1
            self.states[pushed].moved_while_holding |= self.held is not None
            self._drag_contents(pushed, shift)

    def _drag_contents(self, index: int, shift: np.ndarray) -> None:
        """Objects resting on a pushed object move with it."""
        for j, state in enumerate(self.states):
            if state.support == index and not state.held:
                self.objects[j].position[:2] += shift
                self._drag_contents(j, shift)


def _finger_shift(obj: SceneObject, grip_xy: np.ndarray) -> np.ndarray | None:
    """How far the finger column at `grip_xy` moves `obj` sideways, None where it misses:
    out to touching from outside, or (fingers inside a bowl) its wall out to touching them
    from within."""
    offset = obj.position[:2] - grip_xy
    distance = float(np.hypot(*offset))
    if obj.shape == "bowl" and distance < BOWL_RIM:
        inner = BOWL_RIM - PUSHER_RADIUS
        return contacts.shift_to(offset, inner) if distance > inner else None
    reach = obj.radius + PUSHER_RADIUS
    return contacts.shift_to(offset, reach) if distance < reach else None


def _stopped_by(
    before: np.ndarray,
    pose: arm.ArmPose,
    after: np.ndarray,
    floor: Callable[[np.ndarray], float],
    halvings: int = 12,
) -> np.ndarray:
    """The arm joints of a servo step from `before` (whose pose is `pose`) cut short where
    the grip point (the fingertips) reaches `floor(grip)`, by bisection on the fraction of
    the step; the gripper moves as commanded. A step that starts below its floor (a world
    built there) is left as it is."""

    def clear(q: np.ndarray) -> bool:
        grip = arm.forward(q).grip
        return grip[2] >= floor(grip)

    if clear(after) or pose.grip[2] < floor(pose.grip):
        return after
    low, high = 0.0, 1.0
    for _ in range(halvings):
        mid = (low + high) / 2
        low, high = (mid, high) if clear(before + mid * (after - before)) else (low, mid)
    stopped = before + low * (after - before)
    stopped[arm.ARM_DOF :] = after[arm.ARM_DOF :]
    return stopped
