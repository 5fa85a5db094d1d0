"""Contacts in the tabletop world, with exact scenes: the two ways a put was won without a
grasp now fail, objects push each other, a bowl is entered only over its rim, and what
is under the fingers stops them."""

import numpy as np
import pytest

from oxygen_core.sim import arm
from oxygen_core.sim.scene import BALL_RADIUS, BLOCK_SIDE, BOWL_FLOOR, BOWL_RIM, SceneObject
from oxygen_core.sim.tasks import Task, make_task
from oxygen_core.sim.world import PUSHER_RADIUS, World

DT = 0.05
BLOCK_R = BLOCK_SIDE * np.sqrt(0.5)  # a block's footprint radius


def _objects(*specs):
    return [SceneObject(c, s, np.array(p, float)) for c, s, p in specs]


def _drive(world, point, gripper, steps=40):
    """Move the grip point along a straight line (5 mm a step), then hold there."""
    start = world.pose.grip.copy()
    pieces = max(1, int(np.ceil(np.linalg.norm(np.array(point) - start) / 0.005)))
    for k in range(1, pieces + steps + 1):
        waypoint = start + min(k / pieces, 1.0) * (np.array(point) - start)
        world.step(arm.inverse_top_down(waypoint, np.pi / 2, gripper, world.joints[5]), DT)


def _push_along_y(world, x, y_from, y_to, height=0.012):
    _drive(world, (x, y_from, 0.15), 0.0)
    _drive(world, (x, y_from, height), 0.0)
    _drive(world, (x, y_to, height), 0.0)


def test_pushing_the_target_into_the_bowl_pushes_the_bowl_and_the_put_fails():
    objects = _objects(("red", "block", (0.4, 0.0, 0.0)), ("blue", "bowl", (0.4, 0.12, 0.0)))
    task = Task("put", 0, "", tuple(objects), target=0, bowl=1)
    world = task.new_world()
    _push_along_y(world, 0.4, -0.06, 0.2)
    # Fingers at y 0.2 touch the block, which touches the bowl's wall from outside.
    block_y = 0.2 + PUSHER_RADIUS + BLOCK_R
    np.testing.assert_allclose(world.objects[0].position, [0.4, block_y, 0.0], atol=1e-9)
    bowl_y = block_y + BLOCK_R + BOWL_RIM
    np.testing.assert_allclose(world.objects[1].position, [0.4, bowl_y, 0.0], atol=1e-9)
    assert world.states[0].support is None and world.object_pushes > 0
    assert task.verdict(world) is not True
    record = task.contacts(world)
    assert not record.grasped and np.isnan(record.release_height) and record.finger_pushes > 0


def test_pushing_the_bowl_over_the_target_pushes_the_target_and_the_put_fails():
    objects = _objects(("green", "ball", (0.4, 0.12, 0.0)), ("blue", "bowl", (0.4, 0.0, 0.0)))
    task = Task("put", 0, "", tuple(objects), target=0, bowl=1)
    world = task.new_world()
    _push_along_y(world, 0.4, -0.08, 0.1)
    bowl_y = 0.1 + PUSHER_RADIUS + BOWL_RIM
    np.testing.assert_allclose(world.objects[1].position, [0.4, bowl_y, 0.0], atol=1e-9)
    ball_y = bowl_y + BOWL_RIM + BALL_RADIUS
    np.testing.assert_allclose(world.objects[0].position, [0.4, ball_y, 0.0], atol=1e-9)
    assert world.states[0].support is None
    assert task.verdict(world) is not True


@pytest.mark.parametrize("with_neighbour", [False, True])
def test_a_push_that_shoves_another_object_along_fails(with_neighbour):
    """The instruction names one object: pushing it into another, which moves on, is not
    the push asked for (a blind sweep of the table does exactly that)."""
    specs = [("red", "block", (0.4, 0.0, 0.0))]
    specs += [("green", "ball", (0.4, 0.2, 0.0))] if with_neighbour else []
    task = Task("push", 0, "", tuple(_objects(*specs)), target=0, direction="left")
    world = task.new_world()
    _push_along_y(world, 0.4, -0.06, 0.14)
    block_y = 0.14 + PUSHER_RADIUS + BLOCK_R
    assert world.objects[0].position[1] == pytest.approx(block_y)
    record = task.contacts(world)
    if with_neighbour:  # the ball sits against the block, 6.7 cm on
        assert record.others_moved == pytest.approx(block_y + BLOCK_R + BALL_RADIUS - 0.2)
        assert record.object_pushes > 0 and task.verdict(world) is not True
    else:
        assert record.others_moved == 0.0 and task.verdict(world) is True


def test_a_pushed_object_pushes_the_next_one_in_line():
    world = World(
        _objects(
            ("red", "block", (0.4, 0.0, 0.0)),
            ("green", "ball", (0.4, 0.06, 0.0)),
            ("blue", "block", (0.4, 0.25, 0.0)),
        )
    )
    _push_along_y(world, 0.4, -0.06, 0.06)
    block_y = 0.06 + PUSHER_RADIUS + BLOCK_R
    ball_y = block_y + BLOCK_R + BALL_RADIUS
    np.testing.assert_allclose(world.objects[0].position[:2], [0.4, block_y], atol=1e-9)
    np.testing.assert_allclose(world.objects[1].position[:2], [0.4, ball_y], atol=1e-9)
    np.testing.assert_allclose(world.objects[2].position[:2], [0.4, 0.25], atol=1e-12)
    assert world.states[0].finger_pushes > 0 and world.states[1].finger_pushes == 0


def test_a_carried_object_pushes_what_it_meets_on_the_table():
    world = World(_objects(("red", "block", (0.4, 0.0, 0.0)), ("green", "ball", (0.4, 0.1, 0.0))))
    _drive(world, (0.4, 0.0, 0.02), 1.0)
    _drive(world, (0.4, 0.0, 0.02), 0.0)
    assert world.held == 0
    _drive(world, (0.4, 0.1, 0.02), 0.0)  # carried low, sideways into the ball
    ball_y = 0.1 + BLOCK_R + BALL_RADIUS
    np.testing.assert_allclose(world.objects[1].position[:2], [0.4, ball_y], atol=1e-9)


@pytest.mark.parametrize(
    ("offset", "inside"),
    [(BOWL_RIM - 0.01, True), (BOWL_RIM + 0.01, False), (0.02, True)],
)
def test_an_object_dropped_on_a_bowl_wall_tips_to_the_side_of_its_centre(offset, inside):
    world = World(
        _objects(("green", "ball", (0.4, offset, 0.1)), ("blue", "bowl", (0.4, 0.0, 0.0)))
    )
    for _ in range(40):
        world.step(world.joints, DT)
    ball = world.objects[0]
    assert world.resting(0)
    if inside:
        assert world.states[0].support == 1 and ball.position[2] == pytest.approx(BOWL_FLOOR)
        assert ball.position[1] == pytest.approx(min(offset, BOWL_RIM - BALL_RADIUS))
    else:
        assert world.states[0].support is None and ball.position[2] == 0.0
        assert ball.position[1] == pytest.approx(BOWL_RIM + BALL_RADIUS)


def test_closed_fingers_come_down_on_a_block_and_open_ones_around_it():
    world = World(_objects(("red", "block", (0.4, 0.0, 0.0))))
    _drive(world, (0.4, 0.0, 0.15), 0.0)
    _drive(world, (0.4, 0.0, 0.0), 0.0)
    assert BLOCK_SIDE <= world.pose.grip[2] < BLOCK_SIDE + 0.002  # on its top
    np.testing.assert_array_equal(world.objects[0].position, [0.4, 0.0, 0.0])
    _drive(world, (0.4, 0.0, 0.15), 1.0)
    _drive(world, (0.4, 0.0, 0.0), 1.0)
    assert world.pose.grip[2] < 0.002  # open fingers straddle it down to the table


def test_a_held_object_stops_at_the_table():
    world = World(_objects(("red", "block", (0.4, 0.0, 0.0))))
    _drive(world, (0.4, 0.0, 0.03), 1.0)
    _drive(world, (0.4, 0.0, 0.03), 0.0)
    assert world.held == 0
    _drive(world, (0.4, 0.1, 0.0), 0.0)  # down and along: the block slides on the table
    assert 0.0 <= world.objects[0].position[2] < 0.002
    # Grasped 3 cm above its underside, so the grip point stays 3 cm up.
    assert world.pose.grip[2] == pytest.approx(0.03 + world.objects[0].position[2])


def test_a_put_over_the_rim_succeeds_and_records_the_release():
    objects = _objects(("red", "block", (0.4, 0.0, 0.0)), ("blue", "bowl", (0.4, 0.15, 0.0)))
    task = Task("put", 0, "", tuple(objects), target=0, bowl=1)
    world = task.new_world()
    _drive(world, (0.4, 0.0, 0.02), 1.0)
    _drive(world, (0.4, 0.0, 0.02), 0.0)
    _drive(world, (0.4, 0.0, 0.1), 0.0)
    _drive(world, (0.4, 0.15, 0.1), 0.0)
    _drive(world, (0.4, 0.15, 0.08), 0.0)
    _drive(world, (0.4, 0.15, 0.08), 1.0)
    assert task.verdict(world) is True
    record = task.contacts(world)
    assert record.grasped and record.release_height == pytest.approx(0.06)
    assert record.object_pushes == 0 and record.off_table == 0


def _slide(world, start_xy, end_xy):
    """Closed fingers lowered at `start_xy` and slid along the table to `end_xy`."""
    _drive(world, (*start_xy, 0.15), 0.0, steps=5)
    _drive(world, (*start_xy, 0.012), 0.0, steps=5)
    _drive(world, (*end_xy, 0.012), 0.0, steps=5)


@pytest.mark.parametrize("seed", range(400_000, 400_006))
def test_neither_put_exploit_wins_on_real_scenes(seed):
    """The two scripted exploits of the old world, on dev scenes: closed fingers slide the
    target at the bowl's centre, or the bowl over the target; neither ends in a put."""
    task = make_task("put", seed)
    target, bowl = (task.objects[k].position[:2] for k in (task.target, task.bowl))
    way = (bowl - target) / np.linalg.norm(bowl - target)
    reach = task.objects[task.target].radius + PUSHER_RADIUS + 0.02
    slides = [
        (target - way * reach, bowl + way * 0.02),
        (bowl + way * (BOWL_RIM + PUSHER_RADIUS + 0.02), target - way * 0.02),
    ]
    for start, end in slides:
        world = task.new_world()
        _slide(world, start, end)
        assert world.states[task.target].support is None
        assert world.object_pushes > 0 and task.verdict(world) is not True
