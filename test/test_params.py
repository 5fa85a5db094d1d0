"""ROS parameters of the node: declared from NodeConfig, read into configs in one place.

Every robot YAML under config/ goes through rcl's own parameter-file parser here and is
checked against its model preset, so a typo in a config fails this test, not the robot.
A robot declared in the YAML (robots.<name>, oxygen_core.robot_spec) is read by the same
code: every preset written out as a declaration reads back equal.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import rclpy
import yaml
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

from oxygen_core.config import IMAGE_SLOTS, ROBOT_PRESETS, RobotConfig, model_preset, robot_preset
from oxygen_core.engine.types import EngineConfig
from oxygen_ros.params import (
    ConfigError,
    NodeConfig,
    check_delay,
    declare_parameters,
    fit_to_model,
    read_settings,
)

pytestmark = pytest.mark.ros

CONFIG = Path(__file__).resolve().parents[1] / "config"
ROBOT_YAMLS = sorted(CONFIG.glob("*.yaml"))


@pytest.fixture(scope="module", autouse=True)
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


def _node(params_file: Path | None = None, **overrides) -> Node:
    args = ["--ros-args"]
    if params_file is not None:
        args += ["--params-file", str(params_file)]
    node = Node(
        "oxygen",
        cli_args=args,
        parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
    )
    declare_parameters(node)
    return node


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["/**"]["ros__parameters"]


def test_there_is_a_config_per_robot():
    names = {p.stem for p in ROBOT_YAMLS}
    assert {"tiny", "libero", "droid", "aloha", "humanoid_thor"} <= names


@pytest.mark.parametrize("path", ROBOT_YAMLS, ids=lambda p: p.stem)
def test_robot_yaml_reads_into_configs_that_fit_its_model(path):
    raw = _yaml(path)
    settings = read_settings(_node(path))
    cfg, engine = settings.node, settings.engine
    assert cfg.camera_topics == tuple(raw["camera_topics"])
    assert cfg.joint_names == tuple(raw["joint_names"])
    assert cfg.frame_period_s == pytest.approx(raw["execute_horizon"] / raw["control_rate_hz"])
    assert engine.frame_budget_s == pytest.approx(cfg.frame_period_s)
    assert engine.steps_per_frame == raw["steps_per_frame"]
    handover = (engine.chunk_handover, engine.rtc_max_guidance, engine.rtc_delay_steps)
    assert handover == (raw["chunk_handover"], raw["rtc_max_guidance"], raw["rtc_delay_steps"])
    assert [s.name for s in engine.streams] == raw["stream_names"]
    for stream in engine.streams:
        for key, value in raw["streams"][stream.name].items():
            assert getattr(stream, key) == value, (stream.name, key)
    robot = settings.robot
    assert robot.name == raw["robot"]
    layout = fit_to_model(cfg, robot.apply(model_preset(cfg.preset)), robot)
    assert layout.horizon == raw["action_horizon"]
    assert len(cfg.joint_names) == robot.state_dim
    if cfg.joint_trajectory:
        assert len(layout.action_names) == robot.action_dim
    # Each controller of the split gets its own joints (aloha: two arms and two grippers).
    owned = {p.controller.name: p.controller.joints for p in layout.parts}
    expected = raw.get("controllers", {})
    assert owned == {
        name: tuple(expected[name]["joints"]) for name in raw.get("controller_names", ())
    }
    assert {p.controller.topic for p in layout.parts} == {c["topic"] for c in expected.values()}
    assert sorted(j for p in layout.parts for j in p.controller.joints) == (
        sorted(layout.action_names) if layout.parts else []
    )


def test_tiny_yaml_maps_onto_the_engine_config():
    engine = read_settings(_node(CONFIG / "tiny.yaml")).engine
    assert (engine.steps_per_frame, engine.max_active_requests, engine.batch_buckets) == (
        2,
        8,
        (1, 2, 4, 8),
    )
    assert engine.frame_budget_s == pytest.approx(0.1)
    assert [(s.name, s.prompt, s.max_tokens, s.trigger) for s in engine.streams] == [
        ("narration", "Narrate:", 12, "every"),
        ("memory", "Remember:", 12, "instruction_change"),
    ]


def test_every_field_is_a_described_parameter_with_its_range():
    node = _node()
    engine_fields = [f for f in dataclasses.fields(EngineConfig) if "doc" in f.metadata]
    assert {"chunk_handover", "rtc_max_guidance", "rtc_delay_steps"} <= {
        f.name for f in engine_fields
    }
    node_fields = [f for f in dataclasses.fields(NodeConfig) if "doc" in f.metadata]
    assert {f.name for f in dataclasses.fields(NodeConfig)} - {f.name for f in node_fields} == {
        "controllers"  # filled from controllers.<name>.*, as EngineConfig.streams
    }
    for field in [*node_fields, *engine_fields]:
        descriptor = node.describe_parameter(field.name)
        assert descriptor.description, field.name
        span = field.metadata["span"]
        ranges = [*descriptor.integer_range, *descriptor.floating_point_range]
        if span is None:
            assert ranges == [], field.name
        else:
            assert (ranges[0].from_value, ranges[0].to_value) == span, field.name
    assert node.describe_parameter("streams.narration.max_tokens").integer_range[0].to_value > 1
    assert node.describe_parameter("pool_full_policy").additional_constraints == (
        "one of: queue, skip, evict_oldest"
    )
    assert node.describe_parameter("chunk_handover").additional_constraints == (
        "one of: replace, blend, rtc"
    )
    assert node.describe_parameter("rtc_delay_steps").dynamic_typing


def test_out_of_range_values_are_refused_by_ros():
    node = _node()
    names = (
        "control_rate_hz",
        "denoise_steps",
        "streams.narration.max_tokens",
        "rtc_max_guidance",
    )
    results = node.set_parameters(
        [
            Parameter(names[0], value=5000.0),
            Parameter(names[1], value=0),
            Parameter(names[2], value=0),
            Parameter(names[3], value=0.0),
        ]
    )
    assert [r.successful for r in results] == [False, False, False, False]
    assert all(name in r.reason for name, r in zip(names, results, strict=True))
    with pytest.raises(InvalidParameterValueException, match="execute_horizon"):
        _node(execute_horizon=0)  # a bad override fails when the node declares it


@pytest.mark.parametrize(("value", "expected"), [("auto", "auto"), (3, 3), ("4", 4)])
def test_steps_per_frame_takes_an_int_or_auto(value, expected):
    assert read_settings(_node(steps_per_frame=value)).engine.steps_per_frame == expected


@pytest.mark.parametrize(("value", "expected"), [("auto", "auto"), (0, 0), (3, 3), ("2", 2)])
def test_rtc_delay_steps_takes_an_int_or_auto(value, expected):
    engine = read_settings(_node(rtc_delay_steps=value, chunk_handover="rtc")).engine
    assert (engine.rtc_delay_steps, engine.chunk_handover) == (expected, "rtc")


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"steps_per_frame": "fast"}, "steps_per_frame"),
        ({"steps_per_frame": 0}, "steps_per_frame"),
        ({"rtc_delay_steps": -1}, "rtc_delay_steps must be an integer >= 0 or 'auto'"),
        ({"rtc_delay_steps": "soon"}, "rtc_delay_steps"),
        ({"chunk_handover": "smooth"}, "chunk_handover"),
        ({"pool_full_policy": "drop"}, "pool_full_policy"),
        ({"missing_camera": "zero"}, "missing_camera"),
        ({"engine_mode": "turbo"}, "engine_mode"),
        ({"batch_buckets": [0, 4]}, "batch_buckets"),
        ({"streams.memory.trigger": "sometimes"}, r"streams\.memory\.trigger"),
        ({"joint_names": ["a", "b", "a"]}, r"joint_names lists \['a'\] more than once"),
        ({"action_names": ["x", "x"]}, r"action_names lists \['x'\] more than once"),
        ({"stream_names": ["memory", "memory"]}, r"stream_names lists \['memory'\] more than once"),
    ],
)
def test_bad_values_raise_config_error_naming_the_parameter(overrides, named):
    with pytest.raises(ConfigError, match=named):
        read_settings(_node(**overrides))


def test_a_new_stream_needs_its_prompt():
    node = _node(stream_names=["narration", "safety"])
    with pytest.raises(ConfigError, match=r"streams\.safety\.prompt is empty"):
        read_settings(node)
    node.set_parameters([Parameter("streams.safety.prompt", value="Hazards:")])
    streams = read_settings(node).engine.streams
    assert [(s.name, s.prompt) for s in streams] == [
        ("narration", "Narrate:"),
        ("safety", "Hazards:"),
    ]


def _fit(robot_cfg: RobotConfig | None = None, /, **changes):
    """fit_to_model of tiny.yaml's parameters with `changes`, for robot_cfg (default: the
    preset of the changed `robot` parameter)."""
    base = read_settings(_node(CONFIG / "tiny.yaml")).node
    cfg = dataclasses.replace(base, **changes)
    robot = robot_cfg or robot_preset(cfg.robot)
    return fit_to_model(cfg, robot.apply(model_preset(cfg.preset)), robot)


def test_fit_defaults_to_the_model_horizon_and_joint_names():
    layout = _fit(action_horizon=0)
    assert layout.horizon == model_preset("tiny").action_horizon
    assert layout.action_names == tuple(f"joint_{i}" for i in range(1, 8))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"action_horizon": 5}, "action_horizon=5 exceeds the model's horizon 4"),
        ({"execute_horizon": 4, "action_horizon": 3}, "execute_horizon=4 exceeds"),
        ({"action_names": ("a", "b")}, "action_names has 2 names"),
        (
            {"robot": "libero", "joint_names": tuple("abcdefgh"), "camera_topics": ("/c",)},
            "joint_trajectory needs action_names",
        ),
        ({"robot": "libero", "joint_names": tuple("abcdefgh")}, "camera_topics has 3 topics"),
    ],
)
def test_fit_refuses_parameters_the_model_cannot_serve(changes, message):
    with pytest.raises(ConfigError, match=message):
        _fit(**changes)


def test_fit_refuses_cameras_the_topics_do_not_fill_in_order():
    """Topics fill the image slots from the first: a robot without the left wrist camera
    cannot take two topics."""
    robot = RobotConfig("arm", (IMAGE_SLOTS[0], IMAGE_SLOTS[2]), 7, 7)
    with pytest.raises(ConfigError, match="camera_topics fill the image slots"):
        _fit(robot, camera_topics=("/a", "/b"))
    assert _fit(robot, camera_topics=("/a",)).horizon == 4


# ------------------------------------------------------------------ robots in the YAML


def _declared(folder: Path, name: str, fields: dict, **params) -> Path:
    """config/tiny.yaml with `robot: name` declared under robots.<name> as `fields`; for a
    robot whose commands are no joint positions, without trajectories and joint limits."""
    raw = yaml.safe_load((CONFIG / "tiny.yaml").read_text())
    if fields.get("action_space", "position") != "position":
        params = {"joint_trajectory": False, **params}
        del raw["/**"]["ros__parameters"]["joint_limits"]
    raw["/**"]["ros__parameters"].update({"robot": name, "robots": {name: fields}, **params})
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("name", sorted(ROBOT_PRESETS))
def test_every_preset_declared_in_a_yaml_reads_back_equal(tmp_path, name):
    """The presets are robots of the YAML schema: each one written out in full (no base)."""
    preset = ROBOT_PRESETS[name]
    fields = {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in dataclasses.asdict(preset).items()
        if key != "name" and value is not None
    }
    robot = read_settings(_node(_declared(tmp_path, "copy", fields))).robot
    assert robot == dataclasses.replace(preset, name="copy")


def test_a_declared_robot_starts_from_its_base_and_changes_the_fields_given(tmp_path):
    fields = {"base": "sim_plan", "action_horizon": 20, "plan_tokens": 6}
    node = _node(_declared(tmp_path, "long_plan", fields))
    expected = dataclasses.replace(
        ROBOT_PRESETS["sim_plan"], name="long_plan", action_horizon=20, plan_tokens=6
    )
    assert read_settings(node).robot == expected
    space = node.describe_parameter("robots.long_plan.space")
    assert space.description and space.additional_constraints == "one of: robot, aloha, grip"
    assert node.describe_parameter("robots.long_plan.plan_tokens").integer_range[0].from_value == 1


@pytest.mark.parametrize(
    ("name", "fields", "message"),
    [
        ("arm", {"base": "franka"}, r"robots\.arm\.base='franka' is not one of \['libero'"),
        ("arm", {"cameras": ["base_0_rgb"], "action_dim": 7}, r"robots\.arm: state_dim missing"),
        ("arm", {"base": "demo", "delta_actions": [7]}, r"robots\.arm: delta_actions \(7,\)"),
        ("arm", {"base": "demo", "cameras": ["wrist"]}, r"robots\.arm: cameras \['wrist'\]"),
        ("arm", {"base": "demo", "space": "aloha"}, r"robots\.arm: space 'aloha' needs"),
        ("arm", {"base": "demo", "space": "ur5"}, r"robots\.arm\.space='ur5' is not one of"),
        ("demo", {"action_horizon": 8}, r"robots\.demo: 'demo' is a robot preset"),
    ],
)
def test_a_bad_declared_robot_is_one_line_naming_its_parameter(tmp_path, name, fields, message):
    with pytest.raises(ConfigError, match=message) as error:
        read_settings(_node(_declared(tmp_path, name, fields)))
    assert "\n" not in str(error.value)


def test_a_robot_neither_preset_nor_declared_names_both_choices(tmp_path):
    path = _declared(tmp_path, "arm", {"base": "demo"}, robot="franka")
    with pytest.raises(ConfigError, match=r"robot='franka' is neither a preset \(libero, "):
        read_settings(_node(path))


def test_a_declared_field_out_of_range_or_mistyped_is_refused_by_ros(tmp_path):
    with pytest.raises(InvalidParameterValueException, match=r"robots\.arm\.plan_tokens"):
        _node(_declared(tmp_path, "arm", {"base": "demo", "plan_tokens": 0}))
    with pytest.raises(InvalidParameterTypeException, match=r"robots\.arm\.action_dim"):
        _node(_declared(tmp_path, "arm", {"base": "demo", "action_dim": 7.0}))


@pytest.mark.parametrize(
    ("handover", "delay", "refused"),
    [("rtc", 2, False), ("rtc", 3, True), ("blend", 3, True), ("replace", 3, False),
     ("rtc", "auto", False)],
)  # fmt: skip
def test_a_fixed_delay_must_leave_a_chunk_that_lasts_the_frame(handover, delay, refused):
    """tiny: horizon 4, 2 rows per frame. Rows from d on are published: d <= 4 - 2."""
    settings = read_settings(_node(CONFIG / "tiny.yaml"))
    engine = dataclasses.replace(settings.engine, chunk_handover=handover, rtc_delay_steps=delay)
    model = model_preset("tiny")
    if not refused:
        check_delay(settings.node, engine, model)
        return
    with pytest.raises(ConfigError, match=f"rtc_delay_steps={delay} \\+ execute_horizon=2"):
        check_delay(settings.node, engine, model)


def test_a_robot_whose_commands_are_not_positions_cannot_publish_trajectories(tmp_path):
    node = _node(_declared(tmp_path, "velocities", {"base": "droid"}))
    with pytest.raises(ConfigError) as error:
        read_settings(node)
    assert str(error.value) == (
        "robot 'velocities' commands joint velocities (rad/s after velocity_scale) "
        "(action_space velocity), which ~/joint_trajectory cannot carry: set "
        "joint_trajectory: false and command_chunk: true"
    )


def test_an_unknown_controller_model_fails_in_one_line():
    with pytest.raises(ConfigError, match=r"controller_model='ros1' is not one of \['jtc', "):
        NodeConfig(camera_topics=("/cam",), controller_model="ros1")
