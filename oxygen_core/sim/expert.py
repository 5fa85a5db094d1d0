"""The scripted expert: privileged phase machines that solve each task family.

The expert reads the true object poses from the world (it is the reference policy and the
source of training data, not a perception system) and drives the grip point along straight
Cartesian segments at a fixed speed; each control step it turns the moving setpoint into
joint targets with the arm's top-down inverse kinematics. A script is a list of steps:

    Move  a straight segment to a goal latched when the step starts, gripper held at a value;
          done when the setpoint is there and the arm has caught up
    Grip  open or close in place; done when the world shows the sub-goal (held, or resting in
          the bowl), or back to an earlier step when it plainly failed (closed on nothing,
          dropped outside the bowl), so a slip is retried rather than fatal

Every step names what the arm is doing and the target by colour and shape (the narration
target for language training), and a step that completes a sub-goal writes a memory line.
After the last step the expert holds its final targets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from oxygen_core.sim import arm
from oxygen_core.sim.scene import BOWL_HEIGHT, SceneObject
from oxygen_core.sim.tasks import LIFT_HEIGHT, PUSH_DIRECTIONS, PUSH_DISTANCE, Task
from oxygen_core.sim.world import PUSHER_RADIUS, World

SPEED = 0.25  # grip point speed along a segment (m/s)
SLOW = 0.10  # descending onto an object and pushing (m/s)
YAW_SPEED = 1.5  # turning the fingers (rad/s)
HOVER = 0.15  # grip point height when moving across the table
ARRIVED = 0.004  # grip point within this of the goal (m) ...
CAUGHT_UP = 0.02  # ... and every joint within this of its target (rad)
PUSH_HEIGHT = 0.012  # grip point height while pushing: the finger column spans the object
PUSH_OVERSHOOT = 0.02  # push this much past PUSH_DISTANCE
# The target's underside this far above the bowl's rim at release: a put succeeds only if
# released above the rim, and a policy that learns the expert's release point needs room
# for its own error in height.
RELEASE_CLEARANCE = 0.03


@dataclasses.dataclass(frozen=True)
class ExpertStep:
    """One control step of the expert."""

    targets: np.ndarray  # (7,) joint position targets
    narration: str
    memory: str | None = None  # set on the step that completes a sub-goal


@dataclasses.dataclass(frozen=True)
class Move:
    narration: str
    goal: Callable[[World], np.ndarray]  # grip point, evaluated once when the step starts
    gripper: float
    speed: float = SPEED
    align: bool = False  # turn the fingers to the target's faces on the way
    memory: str | None = None
    achieved: Callable[[World], bool] | None = None  # when to write `memory`; None: at the end


@dataclasses.dataclass(frozen=True)
class Grip:
    narration: str
    gripper: float
    done: Callable[[World], bool]
    failed: Callable[[World], bool]
    retry_from: int = 0
    memory: str | None = None
    achieved: Callable[[World], bool] | None = None


class Expert:
    """Joint targets and language targets for one task, one control step at a time."""

    def __init__(self, task: Task, world: World) -> None:
        self.task = task
        self.steps = _script(task)
        self._index = 0
        self._point = world.pose.grip.copy()
        self._yaw = _finger_yaw(world)
        self._gripper = float(world.joints[6])
        self._goal: np.ndarray | None = None
        self._goal_yaw = self._yaw
        self._written: set[str] = set()

    def act(self, world: World, dt: float) -> ExpertStep:
        """The targets for the next control period, given the world now."""
        if self._index >= len(self.steps):  # the script is done: hold
            return ExpertStep(self._targets(world), self.steps[-1].narration)
        step = self.steps[self._index]
        memory = self._memory(step, world)
        if isinstance(step, Move):
            if self._goal is None:
                self._start(step, world)
            self._advance(step.speed, dt)
            targets = self._targets(world)
            if self._arrived(world, targets):
                memory = memory or self._finish(step)
            return ExpertStep(targets, step.narration, memory)
        self._gripper = step.gripper
        targets = self._targets(world)
        if step.done(world):
            memory = memory or self._finish(step)
        elif step.failed(world):
            self._index, self._goal = step.retry_from, None
        return ExpertStep(targets, step.narration, memory)

    def _memory(self, step: Move | Grip, world: World) -> str | None:
        """The step's memory line, once, the first time its sub-goal shows in the world."""
        if step.memory is None or step.achieved is None or step.memory in self._written:
            return None
        if not step.achieved(world):
            return None
        self._written.add(step.memory)
        return step.memory

    def _start(self, step: Move, world: World) -> None:
        self._goal = np.asarray(step.goal(world), np.float64)
        self._gripper = step.gripper
        if step.align:
            self._goal_yaw = _grasp_yaw(world.objects[self.task.target], self._yaw)

    def _advance(self, speed: float, dt: float) -> None:
        offset = self._goal - self._point
        distance = float(np.linalg.norm(offset))
        self._point = (
            self._goal.copy()
            if distance <= speed * dt
            else (self._point + offset * (speed * dt / distance))
        )
        turn = _wrap_half_turn(self._goal_yaw - self._yaw)
        self._yaw += float(np.clip(turn, -YAW_SPEED * dt, YAW_SPEED * dt))

    def _targets(self, world: World) -> np.ndarray:
        return arm.inverse_top_down(self._point, self._yaw, self._gripper, world.joints[5])

    def _arrived(self, world: World, targets: np.ndarray) -> bool:
        # Closing on a held object, the fingers stop at its width: caught up all the same.
        gripper_done = abs(world.joints[6] - self._gripper) < CAUGHT_UP or (
            world.held is not None and self._gripper < world.joints[6]
        )
        return (
            gripper_done
            and np.array_equal(self._point, self._goal)
            and abs(_wrap_half_turn(self._goal_yaw - self._yaw)) < 1e-9
            and float(np.linalg.norm(world.pose.grip - self._goal)) < ARRIVED
            and float(np.max(np.abs(world.joints[:6] - targets[:6]))) < CAUGHT_UP
        )

    def _finish(self, step: Move | Grip) -> str | None:
        """Next step; the finished step's memory line if it is written at completion."""
        self._index += 1
        self._goal = None
        if step.memory is None or step.achieved is not None or step.memory in self._written:
            return None
        self._written.add(step.memory)
        return step.memory


def _finger_yaw(world: World) -> float:
    axis = world.pose.finger_axis
    return float(np.arctan2(axis[1], axis[0]))


def _wrap_half_turn(angle: float) -> float:
    """An angle difference modulo pi (the fingers are symmetric), in [-pi/2, pi/2)."""
    return (angle + np.pi / 2) % np.pi - np.pi / 2


def _grasp_yaw(obj: SceneObject, current: float) -> float:
    """Close along a block's face normal (the one nearest the current yaw); a ball: any."""
    if obj.shape != "block":
        return current
    return current + ((obj.yaw - current + np.pi / 4) % (np.pi / 2) - np.pi / 4)


def _script(task: Task) -> list[Move | Grip]:
    if task.family == "push":
        return _push_script(task)
    i = task.target
    name = task.objects[i].name

    def above_target(w: World) -> np.ndarray:
        return np.array([*w.objects[i].centre[:2], HOVER])

    def at_target(w: World) -> np.ndarray:
        return w.objects[i].centre

    def lifted(w: World) -> np.ndarray:
        return np.array([*w.pose.grip[:2], HOVER])

    pick: list[Move | Grip] = [
        Move(f"moving to the {name}", above_target, 1.0, align=True),
        Move(f"grasping the {name}", at_target, 1.0, speed=SLOW),
        Grip(
            f"grasping the {name}",
            0.0,
            done=lambda w: w.states[i].held,
            failed=lambda w: w.joints[6] <= 1e-9,
        ),
        Move(
            f"lifting the {name}",
            lifted,
            0.0,
            memory=f"picked up the {name}",
            achieved=lambda w: w.states[i].held and w.objects[i].position[2] >= LIFT_HEIGHT,
        ),
    ]
    if task.family == "pick":
        return pick
    b = task.bowl
    bowl = task.objects[b].name

    def above_bowl(w: World) -> np.ndarray:
        return np.array([*w.objects[b].position[:2], HOVER])

    def release_point(w: World) -> np.ndarray:
        rim = w.objects[b].position[2] + BOWL_HEIGHT
        drop = rim + RELEASE_CLEARANCE + w.objects[i].height / 2
        return np.array([*w.objects[b].position[:2], drop])

    def in_bowl(w: World) -> bool:
        return w.resting(i) and w.states[i].support == b

    return pick + [
        Move(f"carrying the {name} to the {bowl}", above_bowl, 0.0),
        Move(f"placing the {name} in the {bowl}", release_point, 0.0, speed=SLOW),
        Grip(
            f"placing the {name} in the {bowl}",
            1.0,
            done=in_bowl,
            failed=lambda w: w.resting(i) and not in_bowl(w),
            memory=f"put the {name} in the {bowl}",
        ),
        Move(f"moving away from the {bowl}", lifted, 1.0),
    ]


def _push_script(task: Task) -> list[Move | Grip]:
    i, start = task.target, task.objects[task.target]
    name, direction = start.name, PUSH_DIRECTIONS[task.direction]
    contact = start.radius + PUSHER_RADIUS  # finger centre to object centre at contact
    behind = start.position[:2] - direction * (contact + 0.015)
    end = start.position[:2] + direction * (PUSH_DISTANCE + PUSH_OVERSHOOT - contact)

    def up(w: World) -> np.ndarray:
        return np.array([*w.pose.grip[:2], HOVER])

    return [
        Move(f"moving behind the {name}", lambda w: np.array([*behind, HOVER]), 0.0),
        Move(f"lowering next to the {name}", lambda w: np.array([*behind, PUSH_HEIGHT]), 0.0),
        Move(
            f"pushing the {name} to the {task.direction}",
            lambda w: np.array([*end, PUSH_HEIGHT]),
            0.0,
            speed=SLOW,
            memory=f"pushed the {name} to the {task.direction}",
            achieved=lambda w: (
                float((w.objects[i].position[:2] - start.position[:2]) @ direction) >= PUSH_DISTANCE
            ),
        ),
        Move(f"moving away from the {name}", up, 0.0),
    ]
