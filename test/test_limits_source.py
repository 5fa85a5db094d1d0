"""Joint limits from the node's parameters: URDF (string, file or latched topic), then the
joint_limits block, read by a real rclpy node; every configure error is one line naming
the joint and the parameter. The sim's URDF states exactly what the sim enforces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rclpy
import yaml
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import String

from oxygen_core.safety.limits import urdf_bounds
from oxygen_core.sim import arm
from oxygen_ros.params import ConfigError, commanded_names, declare_parameters, read_settings

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
SIM_URDF = ROOT / "config" / "robots" / "sim_arm.urdf"
JOINTS = ["joint_1", "joint_2"]
URDF = """<robot name="two"><link name="a"/><link name="b"/><link name="c"/>
<joint name="joint_1" type="revolute"><parent link="a"/><child link="b"/>
<limit lower="-1.0" upper="1.0" velocity="2.0" effort="1"/></joint>
<joint name="joint_2" type="continuous"><parent link="b"/><child link="c"/>
<limit velocity="3.0" effort="1"/></joint></robot>"""
FULL = {"max_acceleration": 10.0, "max_jump": 0.2}


class _Plain(yaml.SafeDumper):
    """rcl's parameter-file parser refuses YAML aliases: write repeated values out."""

    def ignore_aliases(self, data) -> bool:
        return True


@pytest.fixture(scope="module", autouse=True)
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


def _settings(tmp_path: Path, block: dict | None = None, **params):
    """read_settings of a node started on a params file with these joints and values."""
    values = {"robot": "demo", "joint_names": JOINTS, "action_names": JOINTS, **params}
    if block is not None:
        values["joint_limits"] = block
    path = tmp_path / "params.yaml"
    path.write_text(yaml.dump({"/**": {"ros__parameters": values}}, Dumper=_Plain))
    node = Node("oxygen", cli_args=["--ros-args", "--params-file", str(path)])
    try:
        declare_parameters(node)
        return read_settings(node)
    finally:
        node.destroy_node()


def _refused(tmp_path: Path, block: dict | None = None, **params) -> str:
    with pytest.raises(ConfigError) as error:
        _settings(tmp_path, block, **params)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_urdf_then_block_on_top(tmp_path):
    block = {
        "joint_1": {**FULL, "max_velocity": 1.5},
        "joint_2": {"max_acceleration": 4, "max_jump": 0.1},
    }
    limits = _settings(tmp_path, block, robot_description=URDF).limits
    assert limits.names == tuple(JOINTS)
    assert limits.velocity.tolist() == [1.5, 3.0]  # the block wins, integers read as numbers
    assert limits.lower.tolist() == [-1.0, -np.inf]  # continuous: no position range
    assert limits.acceleration.tolist() == [10.0, 4.0]
    assert limits.source == "robot_description + joint_limits"


def test_a_block_alone_and_a_urdf_file(tmp_path):
    full = {"min_position": -1.0, "max_position": 1.0, "max_velocity": 1.0, **FULL}
    assert _settings(tmp_path, {j: full for j in JOINTS}).limits.source == "joint_limits"
    urdf = tmp_path / "two.urdf"
    urdf.write_text(URDF)
    limits = _settings(tmp_path, {j: FULL for j in JOINTS}, robot_description_file=str(urdf))
    assert limits.limits.upper[0] == 1.0


@pytest.mark.parametrize(
    ("block", "params", "named"),
    [
        ({"joint_9": FULL}, {}, "joint_limits names 'joint_9'"),
        ({"joint_1": {**FULL, "min_position": 2.0}}, {}, "min_position 2.0 > max_position"),
        ({"joint_1": FULL}, {}, "joint 'joint_2' has no max_acceleration"),
        ({"joint_1": {"max_velocty": 1.0}}, {}, "joint_limits.joint_1.max_velocty: unknown key"),
        ({"joint_1": {"max_jump": -1.0}}, {}, "joint_limits.joint_1.max_jump must be > 0"),
        ({"joint_1": {"has_jump_limits": "no"}}, {}, "has_jump_limits must be true or false"),
    ],
)
def test_bad_limits_fail_in_one_line_naming_joint_and_parameter(tmp_path, block, params, named):
    message = _refused(tmp_path, block, robot_description=URDF, **params)
    assert named in message


def test_a_missing_bound_without_a_urdf_names_the_joint(tmp_path):
    assert "joint 'joint_1' has no min_position" in _refused(tmp_path, {"joint_1": FULL})


def test_robot_description_must_be_a_urdf(tmp_path):
    assert _refused(tmp_path, robot_description="<html/>").startswith(
        "robot_description: not a readable URDF"
    )
    missing = _refused(tmp_path, robot_description_file=str(tmp_path / "none.urdf"))
    assert missing.startswith(f"robot_description_file {tmp_path / 'none.urdf'}: cannot read")


def test_a_commanded_joint_outside_the_state_is_judged_by_its_own_limits(tmp_path):
    """ALOHA commands the gripper joint and reads the finger joint as its state: the gate
    judges the commanded joint (read by name from the JointState) by the limits given."""
    message = _refused(
        tmp_path, {"joint_1": FULL}, action_names=["joint_1", "joint_3"], robot_description=URDF
    )
    assert "joint 'joint_3' has no min_position" in message
    block = {
        "joint_1": FULL,
        "joint_3": {**FULL, "min_position": -1.0, "max_position": 1.0, "max_velocity": 2.0},
    }
    settings = _settings(
        tmp_path, block, action_names=["joint_1", "joint_3"], robot_description=URDF
    )
    assert settings.limits.names == ("joint_1", "joint_3")


def test_no_limits_are_read_without_a_gate(tmp_path):
    assert _settings(tmp_path, gate_policy="off").limits is None
    assert _settings(tmp_path, joint_trajectory=False).limits is None


def test_the_urdf_arrives_on_a_latched_topic(tmp_path):
    """A transient-local publisher that sent before configure subscribed, as
    robot_state_publisher does."""
    latched = QoSProfile(
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )
    publisher_node = Node("robot_state_publisher")
    publisher = publisher_node.create_publisher(String, "/test_limits/robot_description", latched)
    publisher.publish(String(data=URDF))
    try:
        limits = _settings(
            tmp_path,
            {j: FULL for j in JOINTS},
            robot_description_topic="/test_limits/robot_description",
            robot_description_timeout_s=10.0,
        ).limits
    finally:
        publisher_node.destroy_node()
    assert limits.velocity.tolist() == [2.0, 3.0]
    assert limits.source == "robot_description_topic /test_limits/robot_description + joint_limits"


def test_no_urdf_on_the_topic_times_out_naming_it(tmp_path):
    message = _refused(
        tmp_path,
        robot_description_topic="/test_limits/nobody",
        robot_description_timeout_s=0.3,
    )
    assert message.startswith("robot_description_topic /test_limits/nobody: no URDF within")


def test_the_sim_urdf_states_the_sims_limits():
    bounds = urdf_bounds(SIM_URDF.read_text(), str(SIM_URDF))
    assert list(bounds) == list(arm.JOINT_NAMES)
    for name, (low, high), velocity in zip(
        arm.JOINT_NAMES, arm.POSITION_LIMITS, arm.VELOCITY_LIMITS, strict=True
    ):
        assert bounds[name] == {"min_position": low, "max_position": high, "max_velocity": velocity}


def test_joint_limit_parameters_are_declared_for_every_commanded_joint():
    node = Node(
        "oxygen",
        parameter_overrides=[Parameter("joint_names", value=JOINTS)],
    )
    try:
        declare_parameters(node)
        described = node.describe_parameter("joint_limits.joint_2.max_jump")
        assert "measured position" in described.description
        assert described.dynamic_typing
    finally:
        node.destroy_node()


@pytest.mark.parametrize(
    "name", ["aloha", "humanoid_thor", "sim", "sim_demo", "tiny", "custom_arm"]
)
def test_every_shipped_joint_position_config_limits_every_commanded_joint(name):
    from oxygen_ros.tools.configure import load_settings

    settings, _ = load_settings(ROOT / "config" / f"{name}.yaml")
    assert settings.limits.names == commanded_names(settings.node, settings.robot)


def _velocity_robot(tmp_path: Path, block: dict | None, **params):
    """A DROID-like robot (7 velocity joints and a gripper) on ~/command_chunk."""
    joints = [f"j{i}" for i in range(7)] + ["finger"]
    robots = {"vel": {"base": "droid"}}
    return _settings(
        tmp_path,
        block,
        robot="vel",
        robots=robots,
        joint_names=joints,
        action_names=joints,
        joint_trajectory=False,
        command_chunk=True,
        camera_topics=["/a", "/b"],
        **params,
    )


def test_a_velocity_robot_is_capped_at_its_joints_max_velocity(tmp_path):
    block = {f"j{i}": {"max_velocity": 2.0 + i} for i in range(7)}
    block["finger"] = {"max_velocity": 0.1}  # a gripper's bound: its command is a position
    cap = _velocity_robot(tmp_path, block).velocity_cap
    np.testing.assert_array_equal(cap.bounds, [2, 3, 4, 5, 6, 7, 8, np.inf])
    del block["j3"]
    with pytest.raises(ConfigError) as error:
        _velocity_robot(tmp_path, block)
    assert str(error.value).startswith("joint_limits: joint 'j3' has no max_velocity")
    assert _settings(tmp_path, gate_policy="off").velocity_cap is None  # a position robot
