"""The sim's arm, world rules, scenes and success checks, with hand-made exact cases."""

import numpy as np
import pytest

from oxygen_core import kinematics
from oxygen_core.config import robot_preset
from oxygen_core.sim import arm
from oxygen_core.sim.scene import BOWL_FLOOR, CLEARANCE, SceneObject, footprints_clear
from oxygen_core.sim.tasks import FAMILIES, LIFT_HEIGHT, PUSH_DISTANCE, Task, make_task
from oxygen_core.sim.world import World

DT = 0.05


def test_joint_names_match_the_demo_robot():
    demo = robot_preset("demo")
    assert len(arm.JOINT_NAMES) == demo.action_dim == demo.state_dim == 7


@pytest.mark.parametrize("point", [(0.28, -0.24, 0.0), (0.54, 0.24, 0.02), (0.4, 0.1, 0.3)])
@pytest.mark.parametrize("yaw", [0.0, 1.0, -2.0])
def test_inverse_kinematics_round_trip(point, yaw):
    q = arm.inverse_top_down(np.array(point), yaw, 0.5)
    pose = arm.forward(q)
    np.testing.assert_allclose(pose.grip, point, atol=1e-9)
    np.testing.assert_allclose(pose.tool_rotation[:, 2], [0, 0, -1], atol=1e-9)  # tool down
    axis = np.arctan2(pose.finger_axis[1], pose.finger_axis[0])
    assert abs((axis - yaw + np.pi / 2) % np.pi - np.pi / 2) < 1e-9  # fingers close along yaw
    assert pose.gap == 0.5 * arm.MAX_GAP


def test_inverse_kinematics_keeps_roll_continuous_and_rejects_unreachable():
    point = np.array([0.4, 0.0, 0.1])  # base yaw 0: joint_6 = pi/2 - yaw (mod pi)

    def roll(yaw, near):
        return arm.inverse_top_down(point, yaw, 1.0, roll_near=near)[5]

    assert roll(np.pi / 2 - 1.0, 2.5) == pytest.approx(1.0, abs=1e-12)
    assert roll(np.pi / 2 - 1.0, -2.0) == pytest.approx(1.0 - np.pi, abs=1e-12)
    # The nearest turn (2 - 2 pi) is past the -2.8 stop: the other one is taken.
    assert roll(np.pi / 2 - 2.0, -3.0) == pytest.approx(2.0 - np.pi, abs=1e-12)
    with pytest.raises(arm.Unreachable, match="out of the arm's reach"):
        arm.inverse_top_down(np.array([1.0, 0.0, 0.0]), 0.0, 1.0)


def test_batched_kinematics_match_the_single_pose_ones():
    rng = np.random.default_rng(4)
    joints = rng.uniform(arm.POSITION_LIMITS[:, 0], arm.POSITION_LIMITS[:, 1], (2, 5, 7))
    expected = [[arm.forward(q).grip for q in row] for row in joints]
    np.testing.assert_allclose(kinematics.grip_points(joints), expected, atol=1e-12)
    points = np.array([(0.28, -0.24, 0.0), (0.54, 0.24, 0.02), (0.4, 0.1, 0.3)])
    singles = np.array([arm.inverse_top_down(p, 1.0, 0.3) for p in points])
    batch = kinematics.top_down_joints(points, singles[:, 5], np.full(3, 0.3))
    np.testing.assert_allclose(batch, singles, atol=1e-12)


def test_batched_inverse_kinematics_stretches_toward_a_point_out_of_reach():
    """A policy's command never raises: out of reach the arm points at it, fully stretched."""
    far = np.array([[2.0, 1.0, 0.1]])
    q = kinematics.top_down_joints(far, np.zeros(1), np.ones(1))[0]
    assert np.all(np.isfinite(q))
    assert q[0] == pytest.approx(np.arctan2(1.0, 2.0)) and q[2] == pytest.approx(0.0)
    grip = arm.forward(q).grip
    assert np.arctan2(grip[1], grip[0]) == pytest.approx(np.arctan2(1.0, 2.0))


def test_servo_step_enforces_velocity_and_position_limits():
    start = np.zeros(7)
    target = np.array([10.0, -10.0, 0.01, 0.0, 0.0, 0.0, 5.0])
    step = arm.limit_step(start, target, DT)
    expected = [1.2 * DT, -1.2 * DT, 0.01, 0.0, 0.0, 0.0, 2.0 * DT]
    np.testing.assert_allclose(step, expected, atol=1e-12)
    q = start
    for _ in range(200):
        q = arm.limit_step(q, target, DT)
    np.testing.assert_allclose(q, [2.8, -0.8, 0.01, 0.0, 0.0, 0.0, 1.0], atol=1e-12)


def test_the_table_stops_the_fingertips_and_the_gripper_still_moves():
    world = World([])
    below = arm.inverse_top_down(np.array([0.4, 0.05, -0.1]), np.pi / 2, 0.0)
    for _ in range(200):
        world.step(below, DT)
    # The arm reaches down onto the table top (not through it, not short of it) and the
    # gripper closes as commanded.
    assert 0.0 <= world.pose.grip[2] < 0.002
    assert world.joints[6] == 0.0
    above = arm.inverse_top_down(np.array([0.4, 0.05, 0.1]), np.pi / 2, 1.0)
    for _ in range(60):
        world.step(above, DT)
    np.testing.assert_allclose(world.pose.grip, [0.4, 0.05, 0.1], atol=1e-6)


def _world_with(*objects):
    return World([SceneObject(c, s, np.array(p, float)) for c, s, p in objects])


def _drive(world, point, gripper, steps=80, yaw=np.pi / 2):
    """Move the grip point along a straight line (5 mm a step), then hold there."""
    start = world.pose.grip.copy()
    pieces = max(1, int(np.ceil(np.linalg.norm(np.array(point) - start) / 0.005)))
    for k in range(1, pieces + steps + 1):
        waypoint = start + min(k / pieces, 1.0) * (np.array(point) - start)
        world.step(arm.inverse_top_down(waypoint, yaw, gripper, world.joints[5]), DT)


def test_grasp_attaches_and_release_drops_onto_the_table():
    world = _world_with(("red", "block", (0.4, 0.0, 0.0)))
    _drive(world, (0.4, 0.0, 0.02), 1.0)  # open, around the block's centre
    assert world.held is None
    _drive(world, (0.4, 0.0, 0.02), 0.0)  # close
    assert world.held == 0 and world.states[0].was_grasped
    assert world.joints[6] == pytest.approx(0.04 / arm.MAX_GAP)  # fingers stop at the block
    _drive(world, (0.4, 0.0, 0.2), 0.0)
    np.testing.assert_allclose(world.objects[0].position, [0.4, 0.0, 0.18], atol=1e-9)
    _drive(world, (0.4, 0.0, 0.2), 1.0)  # open: it falls back to the table
    assert world.held is None and world.resting(0)
    np.testing.assert_allclose(world.objects[0].position, [0.4, 0.0, 0.0], atol=1e-9)


def test_closing_beside_an_object_grasps_nothing():
    world = _world_with(("red", "block", (0.4, 0.0, 0.0)))
    _drive(world, (0.4, 0.03, 0.02), 1.0)  # 3 cm off: outside the grasp tolerance
    _drive(world, (0.4, 0.03, 0.02), 0.0)
    assert world.held is None and world.joints[6] == 0.0


def test_release_above_a_bowl_lands_inside_it():
    world = _world_with(("red", "ball", (0.4, 0.0, 0.0)), ("blue", "bowl", (0.4, 0.15, 0.0)))
    _drive(world, (0.4, 0.0, 0.022), 1.0)
    _drive(world, (0.4, 0.0, 0.022), 0.0)
    _drive(world, (0.4, 0.15, 0.12), 0.0)
    _drive(world, (0.4, 0.15, 0.12), 1.0)
    assert world.resting(0) and world.states[0].support == 1
    assert world.objects[0].position[2] == pytest.approx(BOWL_FLOOR)


def test_closed_fingers_push_an_object_along():
    world = _world_with(("green", "ball", (0.4, 0.0, 0.0)))
    _drive(world, (0.4, -0.08, 0.15), 0.0)
    _drive(world, (0.4, -0.08, 0.012), 0.0)
    _drive(world, (0.4, 0.05, 0.012), 0.0, steps=120)
    # Pushed until the finger column (r 0.015) touches the ball (r 0.022): 0.037 ahead.
    np.testing.assert_allclose(world.objects[0].position, [0.4, 0.087, 0.0], atol=1e-9)
    assert not world.states[0].was_grasped


def test_world_rejects_bad_targets():
    world = _world_with(("red", "block", (0.4, 0.0, 0.0)))
    with pytest.raises(ValueError, match="7 finite numbers"):
        world.step(np.full(7, np.nan), DT)
    with pytest.raises(ValueError, match="7 finite numbers"):
        world.step(np.zeros(6), DT)


def _task(family, objects, **kwargs):
    return Task(family, 0, "", tuple(objects), target=0, **kwargs)


def test_pick_is_decided_by_the_first_object_held_above_the_lift_height():
    objects = [
        SceneObject("red", "block", np.array([0.4, 0.0, 0.0])),
        SceneObject("blue", "block", np.array([0.4, 0.2, 0.0])),
    ]
    task = _task("pick", objects)
    world = task.new_world()
    assert task.verdict(world) is None
    world.objects[0].position[2] = LIFT_HEIGHT + 0.01  # up but not held: it is falling
    assert task.verdict(world) is None
    world.states[0].held = True
    assert task.verdict(world) is True
    world.objects[0].position[2] = LIFT_HEIGHT - 0.01  # held below the lift height
    assert task.verdict(world) is None
    world.states[0].held = False
    world.states[1].held = True
    world.objects[1].position[2] = LIFT_HEIGHT  # the other block lifted: decided, wrong
    assert task.verdict(world) is False


def test_put_is_decided_once_a_release_has_come_to_rest_in_that_bowl():
    objects = [
        SceneObject("red", "block", np.array([0.4, 0.0, 0.0])),
        SceneObject("blue", "bowl", np.array([0.4, 0.15, 0.0])),
        SceneObject("green", "bowl", np.array([0.4, -0.15, 0.0])),
    ]
    task = _task("put", objects, bowl=1)
    # (bowl dropped into, grasped, release height, verdict)
    cases = ((1, True, 0.1, True), (2, True, 0.1, False), (1, False, 0.1, None))
    cases += ((1, True, 0.03, False),)  # released below the rim (0.04)
    for bowl, grasped, released, expected in cases:
        world = task.new_world()
        world.objects[0].position = world.objects[bowl].position + [0.0, 0.0, released]
        world.states[0].was_grasped = grasped
        world.states[0].release_height = released
        world.states[0].released_into = world._bowl_below(0)
        world.step(world.joints, DT)
        if released > 0.05:
            assert task.verdict(world) is None  # still falling
        for _ in range(40):
            world.step(world.joints, DT)
        assert world.states[0].support == bowl
        assert task.verdict(world) is expected


@pytest.mark.parametrize(
    ("direction", "shift", "expected"),
    [
        ("left", +PUSH_DISTANCE, True),
        ("left", -PUSH_DISTANCE, None),
        ("right", -PUSH_DISTANCE, True),
        ("right", +PUSH_DISTANCE, None),
        ("left", +PUSH_DISTANCE - 0.001, None),
    ],
)
def test_push_success_is_displacement_in_the_instructed_direction(direction, shift, expected):
    task = _task(
        "push", [SceneObject("green", "ball", np.array([0.4, 0.0, 0.0]))], direction=direction
    )
    world = task.new_world()
    world.objects[0].position[1] += shift
    world.states[0].finger_travel = abs(shift)
    assert task.verdict(world) is expected


def test_a_grasped_target_spoils_a_push():
    task = _task(
        "push", [SceneObject("green", "ball", np.array([0.4, 0.0, 0.0]))], direction="left"
    )
    world = task.new_world()
    world.objects[0].position[1] += 0.1
    world.states[0].finger_travel = 0.1
    assert task.verdict(world) is True
    world.states[0].was_grasped = True
    assert task.verdict(world) is False


def test_push_success_needs_the_fingers_and_every_object_on_the_table():
    objects = [
        SceneObject("green", "ball", np.array([0.4, 0.0, 0.0])),
        SceneObject("red", "block", np.array([0.3, -0.2, 0.0])),
    ]
    task = _task("push", objects, direction="left")
    world = task.new_world()
    world.objects[0].position[1] += 0.1
    world.states[0].finger_travel = 0.04  # the fingers made less than half of the motion
    assert task.verdict(world) is None
    world.states[0].finger_travel = 0.06
    assert task.verdict(world) is True
    world.objects[1].position[:2] = [0.3, -0.5]  # beyond the table's edge (y -0.45)
    world.step(world.joints, DT)
    assert world.off_table(1) and world.objects[1].position[2] < 0.0
    assert task.verdict(world) is False
    assert task.contacts(world).off_table == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_scenes_are_seeded_solvable_and_non_overlapping(family):
    for seed in range(30):
        task = make_task(family, seed)
        again = make_task(family, seed)
        assert task.instruction == again.instruction
        for a, b in zip(task.objects, again.objects, strict=True):
            assert (a.colour, a.shape, a.yaw) == (b.colour, b.shape, b.yaw)
            np.testing.assert_array_equal(a.position, b.position)
        assert 3 <= len(task.objects) <= 6
        assert footprints_clear(list(task.objects), CLEARANCE)
        names = [o.name for o in task.objects]
        assert len(set(names)) == len(names)  # the instruction names exactly one object
        target = task.objects[task.target]
        assert target.shape in ("block", "ball") and target.name in task.instruction
        if family == "put":
            bowl = task.objects[task.bowl]
            assert bowl.shape == "bowl" and bowl.colour != target.colour
            assert task.instruction == f"put the {target.name} in the {bowl.name}"
    assert make_task(family, 0).instruction != make_task(family, 1).instruction or (
        not np.array_equal(
            make_task(family, 0).objects[0].position, make_task(family, 1).objects[0].position
        )
    )


def test_unknown_family_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task family 'stack'"):
        make_task("stack", 0)
