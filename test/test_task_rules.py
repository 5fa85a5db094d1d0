"""The tabletop's success rules against the ways a blind or sloppy policy could win them
(oxygen_core.sim.tasks): each exploit is played in an exact scene through the world's own
mechanics (the arm driven along straight grip-point courses), and the verdict refuses it.
The same physical outcome met the rules before them: the tests assert that too, so each
one shows the rule that now stops it."""

from __future__ import annotations

import numpy as np
import pytest

from oxygen_core.sim.scene import BOWL_HEIGHT, FLOOR_Z, SceneObject
from oxygen_core.sim.scripting import course
from oxygen_core.sim.tasks import PUSH_DIRECTIONS, PUSH_DISTANCE, Task
from oxygen_core.sim.world import World

DT = 0.05
OPEN, SHUT, CLOSED = 0.565, 0.48, 0.0  # gap over a ball, under a block; fingers together
GRASP_Z, PUSH_Z = 0.018, 0.012  # grip point heights: inside an object; spanning it


def _obj(colour: str, shape: str, x: float, y: float, z: float = 0.0) -> SceneObject:
    return SceneObject(colour, shape, np.array([x, y, z]))


def _drive(world: World, waypoints: list[tuple[tuple[float, float, float], float]]) -> None:
    """The grip point along the waypoints (point, gripper), then a second to settle."""
    rows = course(world.joints, [(np.array(p), g) for p, g in waypoints])
    for row in [*rows, *[rows[-1]] * 20]:
        world.step(row, DT)


def _grasp(world: World, xy: tuple[float, float], lift_z: float) -> None:
    x, y = xy
    _drive(
        world,
        [
            ((x, y, 0.08), OPEN),
            ((x, y, GRASP_Z), OPEN),
            ((x, y, GRASP_Z), SHUT),
            ((x, y, lift_z), SHUT),
        ],
    )


def _sweep(world: World, start: tuple[float, float], end: tuple[float, float]) -> None:
    """Closed fingers down at `start`, along the table at push height to `end`, up."""
    low = [((*start, PUSH_Z), CLOSED), ((*end, PUSH_Z), CLOSED)]
    _drive(world, [((*start, 0.08), CLOSED), *low, ((*end, 0.08), CLOSED)])


def test_a_put_into_a_bowl_knocked_off_the_table_fails():
    """The bowl pushed over the edge, the target carried at table level over it and let
    go: it lands in the bowl on the floor, released above that bowl's (fallen) rim."""
    block, bowl = _obj("red", "block", 0.40, 0.20), _obj("blue", "bowl", 0.40, 0.38)
    task = Task("put", 0, "put the red block in the blue bowl", (block, bowl), 0, bowl=1)
    world = task.new_world()
    _sweep(world, (0.40, 0.28), (0.40, 0.50))
    assert world.off_table(1) and world.objects[1].position[2] == FLOOR_Z
    _grasp(world, (0.40, 0.20), lift_z=0.03)
    x, y, _ = world.objects[1].position
    _drive(world, [((x, y, 0.03), SHUT), ((x, y, 0.03), 1.0)])
    target = world.states[0]
    assert target.support == 1 and world.resting(0)  # in the bowl, on the floor
    assert target.release_height >= world.objects[1].position[2] + BOWL_HEIGHT
    assert target.released_into is None  # no bowl stood on the table under it
    assert task.verdict(world) is False


def test_a_release_beside_the_opening_fails_even_if_the_target_slides_in():
    block, bowl = _obj("red", "block", 0.40, -0.10), _obj("blue", "bowl", 0.40, 0.10)
    task = Task("put", 0, "put the red block in the blue bowl", (block, bowl), 0, bowl=1)
    world = task.new_world()
    _grasp(world, (0.40, -0.10), lift_z=0.068)  # the underside 1 cm above the rim
    _drive(world, [((0.40, 0.14, 0.068), SHUT), ((0.40, 0.14, 0.068), 1.0)])  # 4 cm off
    assert world.states[0].released_into is None
    assert task.verdict(world) is False
    centred = task.new_world()  # the same drop over the opening's middle counts
    _grasp(centred, (0.40, -0.10), lift_z=0.068)
    _drive(centred, [((0.40, 0.10, 0.068), SHUT), ((0.40, 0.10, 0.068), 1.0)])
    assert centred.states[0].released_into == 1 and task.verdict(centred) is True


def test_a_push_with_a_held_object_as_a_tool_fails():
    """A grasped block shoves the ball 9 cm to the left and is carried away."""
    ball, block = _obj("red", "ball", 0.40, 0.0), _obj("blue", "block", 0.40, -0.10)
    task = Task("push", 0, "push the red ball to the left", (ball, block), 0, direction="left")
    world = task.new_world()
    _grasp(world, (0.40, -0.10), lift_z=0.03)
    _drive(world, [((0.40, 0.05, 0.03), SHUT), ((0.30, -0.20, 0.10), SHUT)])
    moved = world.objects[0].position[:2] - ball.position[:2]
    assert moved @ PUSH_DIRECTIONS["left"] >= PUSH_DISTANCE and world.on_table(0)
    assert world.states[0].moved_while_holding and world.states[0].finger_travel == 0.0
    assert task.verdict(world) is False


def test_a_push_that_goes_mostly_sideways_does_not_count():
    """The fingers push the ball 45 degrees off "left": far enough along it, not its way."""
    ball = _obj("red", "ball", 0.36, -0.05)
    task = Task("push", 0, "push the red ball to the left", (ball,), 0, direction="left")
    world = task.new_world()
    way = np.array([1.0, 1.0]) / np.sqrt(2)
    start, end = ball.position[:2] - 0.05 * way, ball.position[:2] + 0.17 * way
    _sweep(world, tuple(start), tuple(end))
    moved = world.objects[0].position[:2] - ball.position[:2]
    assert moved @ PUSH_DIRECTIONS["left"] >= PUSH_DISTANCE and world.states[0].finger_pushes > 0
    assert task.verdict(world) is None  # undecided: the time limit ends it as a failure


def test_a_straight_finger_push_counts():
    ball = _obj("red", "ball", 0.36, -0.05)
    task = Task("push", 0, "push the red ball to the left", (ball,), 0, direction="left")
    world = task.new_world()
    _sweep(world, (0.36, -0.10), (0.36, 0.08))
    assert task.verdict(world) is True


@pytest.mark.parametrize("family", ["pick", "put"])
def test_lifting_the_twin_of_the_target_decides_the_episode(family):
    """Red and blue balls feel the same to the fingers; lifting the blue one first is the
    episode's verdict, whatever comes after."""
    red, blue = _obj("red", "ball", 0.40, 0.10), _obj("blue", "ball", 0.40, -0.10)
    text = "pick up the red ball" if family == "pick" else "put the red ball in the green bowl"
    bowl = (_obj("green", "bowl", 0.32, 0.0),) if family == "put" else ()
    task = Task(family, 0, text, (red, blue, *bowl), 0, bowl=2 if bowl else None)
    world = task.new_world()
    _grasp(world, (0.40, -0.10), lift_z=0.12)
    assert world.held == 1
    if family == "pick":
        assert task.verdict(world) is False
        return
    x, y, _ = world.objects[2].position
    _drive(world, [((x, y, 0.12), SHUT), ((x, y, 0.12), 1.0)])  # the twin into the bowl
    assert task.verdict(world) is False
