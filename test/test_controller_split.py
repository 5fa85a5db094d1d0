"""The action joints split over trajectory controllers: every joint in exactly one."""

import numpy as np
import pytest

from oxygen_core.controller.shaping import Shaped
from oxygen_core.controller.split import ControllerJoints, split

ALOHA = ("l1", "l2", "l_grip", "r1", "r2", "r_grip")


def _c(name: str, *joints: str, topic: str | None = None) -> ControllerJoints:
    return ControllerJoints(name, topic or f"/{name}/joint_trajectory", joints)


def test_each_controller_gets_its_joints_columns_in_its_own_order():
    parts = split(
        ALOHA,
        [
            _c("left_arm", "l2", "l1"),
            _c("left_gripper", "l_grip"),
            _c("right", "r1", "r2", "r_grip"),
        ],
    )
    assert [p.columns for p in parts] == [(1, 0), (2,), (3, 4, 5)]
    shaped = Shaped(7, np.array([0.0, 0.1]), np.arange(12.0).reshape(2, 6), -np.ones((2, 6)))
    left = parts[0].of(shaped)
    np.testing.assert_array_equal(left.positions, [[1, 0], [7, 6]])
    assert left.velocities.shape == (2, 2) and left.stamp_ns == 7
    assert parts[1].of(_positions_only(shaped)).velocities is None


def test_a_controller_of_setpoints_alone_gets_positions_only():
    # The grippers have no velocity bound: their controllers run linear segments, which
    # stay between their ends; an arm with a gripper in it keeps its velocities.
    parts = split(
        ALOHA, [_c("left", "l1", "l2", "l_grip"), _c("grip", "r_grip"), _c("r", "r1", "r2")]
    )
    setpoints = np.array([False, False, True, False, False, True])
    shaped = Shaped(7, np.array([0.0, 0.1]), np.arange(12.0).reshape(2, 6), -np.ones((2, 6)))
    left, grip, right = (p.of(shaped, setpoints) for p in parts)
    assert left.velocities.shape == (2, 3) and right.velocities.shape == (2, 2)
    assert grip.velocities is None
    np.testing.assert_array_equal(grip.positions, [[5], [11]])
    assert parts[1].of(shaped).velocities.shape == (2, 1)  # without limits: as shaped


def _positions_only(shaped: Shaped) -> Shaped:
    """`shaped` without velocities (positions only)."""
    return Shaped(shaped.stamp_ns, shaped.times, shaped.positions, None)


@pytest.mark.parametrize(
    ("controllers", "message"),
    [
        ([_c("a", "l1", "l2", "l_grip", "r1", "r2")], r"action joints \['r_grip'\] are in no"),
        ([_c("a", *ALOHA), _c("b", "r2")], r"joint 'r2' is in controllers a and b"),
        ([_c("a", *ALOHA, "head")], r"controllers.a.joints names \['head'\], which the chunk"),
        ([_c("a"), _c("b", *ALOHA)], r"controllers.a.joints is empty"),
        ([_c("a", "l1", topic="/x"), _c("b", *ALOHA[1:], topic="/x")], "a and b share topic /x"),
    ],
)
def test_a_split_that_is_not_a_partition_fails_in_one_line(controllers, message):
    with pytest.raises(ValueError, match=message):
        split(ALOHA, controllers)
