"""Joint limits from a URDF (ROS's own parser) and a joint_limits block, and their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oxygen_core.safety.limits import block_bounds, resolve, urdf_bounds

URDF = """<robot name="two_joint">
  <link name="base"/><link name="upper"/><link name="lower"/><link name="tool"/>
  <joint name="shoulder" type="revolute">
    <parent link="base"/><child link="upper"/>
    <limit lower="-1.5" upper="2.0" velocity="1.2" effort="30"/>
  </joint>
  <joint name="wrist" type="continuous">
    <parent link="upper"/><child link="lower"/>
    <limit velocity="3.0" effort="5"/>
  </joint>
  <joint name="flange" type="fixed"><parent link="lower"/><child link="tool"/></joint>
</robot>"""
BLOCK = {
    "shoulder": {"max_acceleration": 4.0, "max_jump": 0.2, "max_effort": 30},
    "wrist": {"max_acceleration": 8, "max_jump": 0.3, "max_velocity": 2.5},
}


def test_the_urdf_gives_positions_and_velocities_of_movable_joints():
    bounds = urdf_bounds(URDF, "robot_description")
    assert bounds == {
        "shoulder": {"min_position": -1.5, "max_position": 2.0, "max_velocity": 1.2},
        "wrist": {"min_position": -math.inf, "max_position": math.inf, "max_velocity": 3.0},
    }


def test_the_block_adds_what_the_urdf_lacks_and_overrides_it():
    limits = resolve(
        ["wrist", "shoulder"],
        urdf_bounds(URDF, "robot_description"),
        block_bounds(BLOCK, "robot.yaml"),
        "robot.yaml",
    )
    assert limits.names == ("wrist", "shoulder")
    np.testing.assert_array_equal(limits.lower, [-np.inf, -1.5])
    np.testing.assert_array_equal(limits.upper, [np.inf, 2.0])
    np.testing.assert_array_equal(limits.velocity, [2.5, 1.2])  # the block wins for wrist
    np.testing.assert_array_equal(limits.acceleration, [8.0, 4.0])
    np.testing.assert_array_equal(limits.jump, [0.3, 0.2])


def test_a_false_flag_switches_a_bound_off():
    block = {
        "j": {
            "has_position_limits": False,
            "max_velocity": 1,
            "max_acceleration": 2,
            "has_jump_limits": False,
        }
    }
    limits = resolve(["j"], None, block_bounds(block, "p.yaml"), "p.yaml")
    assert (limits.lower[0], limits.upper[0], limits.jump[0]) == (-np.inf, np.inf, np.inf)


@pytest.mark.parametrize(
    ("names", "block", "message"),
    [
        (
            ["shoulder"],
            {"elbow": {"max_jump": 1}},
            "p.yaml: joint_limits names 'elbow', which is not a commanded joint",
        ),
        (
            ["shoulder"],
            {"shoulder": {"max_jump": 0.2}},
            "p.yaml: joint 'shoulder' has no max_acceleration (give it in joint_limits, or switch "
            "it off with has_acceleration_limits: false)",
        ),
        (["knee"], {}, "p.yaml: joint 'knee' has no min_position"),
        (
            ["shoulder"],
            {"shoulder": {"max_acceleration": 1, "max_jump": 1, "min_position": 3}},
            "p.yaml: joint 'shoulder' has min_position 3.0 > max_position 2.0",
        ),
    ],
)
def test_resolve_errors_name_the_joint_and_the_file(names, block, message):
    with pytest.raises(ValueError) as err:
        resolve(names, urdf_bounds(URDF, "u"), block_bounds(block, "p.yaml"), "p.yaml")
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"j": {"max_speed": 1}}, "p.yaml: joint_limits.j.max_speed: unknown key"),
        ({"j": {"max_velocity": 0}}, "p.yaml: joint_limits.j.max_velocity must be > 0"),
        ({"j": {"max_velocity": "fast"}}, "must be a finite number, got 'fast'"),
        ({"j": {"max_jump": float("nan")}}, "must be a finite number"),
        ({"j": {"has_velocity_limits": 1}}, "must be true or false, got 1"),
        ({"j": 3}, "p.yaml: joint_limits.j must be a mapping"),
    ],
)
def test_block_errors_name_the_key(block, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        block_bounds(block, "p.yaml")


def test_a_broken_urdf_is_one_line_naming_its_source():
    with pytest.raises(ValueError, match="^robot_description: not a readable URDF"):
        urdf_bounds("<robot><link", "robot_description")


def test_limits_compare_by_value():
    block = block_bounds(BLOCK, "p.yaml")
    a = resolve(["wrist", "shoulder"], urdf_bounds(URDF, "u"), block, "p.yaml")
    b = resolve(["wrist", "shoulder"], urdf_bounds(URDF, "u"), block, "p.yaml")
    assert a == b and {"x": a} == {"x": b}
    faster = {**BLOCK, "wrist": {**BLOCK["wrist"], "max_velocity": 9.0}}
    assert a != resolve(
        ["wrist", "shoulder"], urdf_bounds(URDF, "u"), block_bounds(faster, "p.yaml"), "p.yaml"
    )
