"""The kinematic tabletop world: arm servos, grasping by attachment, falling, pushing.

No physics engine: each `step` moves the joints towards their targets within the limits
(`arm.limit_step`), cut short where the fingertips would go below the table top (a real arm
stops on the table; a policy that pushes down must not end up inside it), then applies
four rules in a fixed order, which is all the tasks need:

1. grasp: a free object lies between the fingertips (its centre within `GRASP_TOLERANCE` of
   the grip point sideways, the grip point inside its vertical extent) and the closing
   fingers reach its width: it is attached, and the fingers stop at its width (so the
   gripper joint reports a held object, as a real gripper's position does);
2. release: the gripper opens wider than the held object: it is detached and falls;
3. fall: a free object above its support drops under gravity and comes to rest on the
   highest support under its centre: the floor of a bowl, the top of a block or ball, or
   the table;
4. push: the closed fingers (a vertical finger column of radius `PUSHER_RADIUS`) overlap a
   resting object's footprint at its height: the object is moved out along the line from
   the fingers to its centre, just far enough to touch. Objects do not push each other.

The world is driven with joint targets at the control rate; sim time advances by dt.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from oxygen_core.sim import arm
from oxygen_core.sim.scene import BOWL_FLOOR, BOWL_RIM, SceneObject

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


class World:
    """The arm and the objects; all state a task's success check reads."""

    def __init__(self, objects: list[SceneObject], joints: np.ndarray = arm.HOME) -> None:
        self.objects = copy.deepcopy(objects)
        self.states = [ObjectState() for _ in objects]
        self.joints = np.array(joints, np.float64)
        self.time = 0.0
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
        self.joints = _stopped_by_table(before, self.pose, arm.limit_step(before, targets, dt))
        held = self.held
        if held is not None:
            # The fingers cannot close through the object they hold.
            self.joints[6] = max(self.joints[6], self.objects[held].width / arm.MAX_GAP)
        self.pose = arm.forward(self.joints)
        if held is None:
            self._try_grasp(before[6])
        elif self.pose.gap > self.objects[held].width + 1e-9:
            self.states[held].held = False
        self._carry()
        self._fall(dt)
        self._push()
        self.time += dt

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

    def support_height(self, index: int) -> tuple[float, int | None]:
        """Where object `index` would rest if dropped now: (height of its underside, support)."""
        obj = self.objects[index]
        best: tuple[float, int | None] = (0.0, None)
        for j, other in enumerate(self.objects):
            if j == index or self.states[j].held or other.position[2] > obj.position[2]:
                continue
            distance = np.hypot(*(obj.position[:2] - other.position[:2]))
            if other.shape == "bowl":
                top = other.position[2] + BOWL_FLOOR if distance < BOWL_RIM else None
            else:
                top = other.position[2] + other.height if distance < other.radius else None
            if top is not None and top > best[0]:
                best = (top, j)
        return best

    def _fall(self, dt: float) -> None:
        for i, (obj, state) in enumerate(zip(self.objects, self.states, strict=True)):
            if state.held:
                continue
            rest, support = self.support_height(i)
            if obj.position[2] <= rest + 1e-9:
                obj.position[2], state.fall_speed, state.support = rest, 0.0, support
                continue
            state.fall_speed += GRAVITY * dt
            obj.position[2] = max(rest, obj.position[2] - state.fall_speed * dt)
            if obj.position[2] == rest:
                state.fall_speed, state.support = 0.0, support

    def resting(self, index: int) -> bool:
        state = self.states[index]
        return not state.held and state.fall_speed == 0.0

    def _push(self) -> None:
        grip = self.pose.grip
        finger_top = grip[2] + arm.FINGER_LENGTH
        for i, (obj, state) in enumerate(zip(self.objects, self.states, strict=True)):
            if state.held or self.pose.gap >= obj.width:
                continue  # open fingers straddle an object instead of pushing it
            if finger_top < obj.position[2] or grip[2] > obj.position[2] + obj.height:
                continue
            offset = obj.position[:2] - grip[:2]
            distance = float(np.hypot(*offset))
            reach = obj.radius + PUSHER_RADIUS
            if distance >= reach:
                continue
            direction = offset / distance if distance > 1e-9 else np.array([1.0, 0.0])
            obj.position[:2] = grip[:2] + direction * reach
            self._drag_contents(i, direction * (reach - distance))

    def _drag_contents(self, index: int, shift: np.ndarray) -> None:
        """Objects resting on a pushed object move with it."""
        for j, state in enumerate(self.states):
            if state.support == index and not state.held:
                self.objects[j].position[:2] += shift
                self._drag_contents(j, shift)


def _stopped_by_table(
    before: np.ndarray, pose: arm.ArmPose, after: np.ndarray, halvings: int = 12
) -> np.ndarray:
    """The arm joints of a servo step from `before` (whose pose is `pose`) cut short where
    the grip point (the fingertips) reaches the table top, by bisection on the fraction of
    the step; the gripper moves as commanded. A step that starts below the top (a world
    built there) is left as it is."""
    if arm.forward(after).grip[2] >= 0.0 or pose.grip[2] < 0.0:
        return after
    low, high = 0.0, 1.0
    for _ in range(halvings):
        mid = (low + high) / 2
        low, high = (
            (mid, high)
            if arm.forward(before + mid * (after - before)).grip[2] >= 0.0
            else (low, mid)
        )
    stopped = before + low * (after - before)
    stopped[arm.ARM_DOF :] = after[arm.ARM_DOF :]
    return stopped
