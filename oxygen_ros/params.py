"""ROS parameters of the oxygen node: declared from two dataclasses, read in one place.

Every parameter field of `NodeConfig` (the node's own settings) and of the engine's
`EngineConfig` is one ROS parameter of the same name: one vocabulary from the params YAML
down to the engine, one default per field. A field's metadata (oxygen_core's `parameter`)
holds the description, range and choices that go into the ParameterDescriptor, and the
same metadata is checked when the parameters are read, so `ros2 param describe oxygen ...`
shows exactly what the code enforces.

Language streams are parameters `streams.<name>.<field>` (prompt, max_tokens,
temperature, stop_at_eos, trigger, every_frames) for every name in `stream_names`; they
are declared when the node starts, which is why `stream_names` itself is read-only.

A robot is a preset (`robot: <name>` of ROBOT_PRESETS) or declared in the params YAML under
`robots.<name>` with the fields of `oxygen_core.robot_spec` (its docstring has an example).
The fields `robots.<robot>.<field>` of the robot named at start-up are declared then,
typed but without a value, so a field the YAML leaves out stays unset and the declaration
(or the preset it names as base) decides it.

`read_settings` is the only place that turns parameters into configs. It raises
`ConfigError` naming the parameter, which the node's on_configure turns into FAILURE.
"""

from __future__ import annotations

import array
import dataclasses
import typing
from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter

from oxygen_core import robot_spec
from oxygen_core.config import (
    ACTION_SPACES,
    IMAGE_SLOTS,
    MODEL_PRESETS,
    ROBOT_PRESETS,
    ModelConfig,
    RobotConfig,
)
from oxygen_core.controller.shaping import CONTROLLER_MODELS
from oxygen_core.controller.split import ControllerJoints, Part, split
from oxygen_core.engine.compile_cache import DEFAULT_DIR as COMPILE_CACHE_DIR
from oxygen_core.engine.types import (
    DEFAULT_STREAMS,
    EngineConfig,
    StreamConfig,
    Trigger,
    is_parameter,
    parameter,
)
from oxygen_core.model.checkpoint import NORM_STATS_MISSING
from oxygen_core.safety.gate import POLICIES
from oxygen_core.safety.limits import JointLimits
from oxygen_core.safety.velocity import VelocityCap
from oxygen_ros.convert import DEFAULT_MAX_IMAGE_PIXELS, PILLOW_WARN_PIXELS
from oxygen_ros.inputs import DEFAULT_MAX_INSTRUCTION_CHARS, MISSING_CAMERA_POLICIES
from oxygen_ros.limits_source import declare_limit_parameters, read_limits, read_velocity_cap

_ENGINE = EngineConfig()

# Dynamically typed parameters that take an integer (at least this) or "auto".
_INT_OR_AUTO = {"steps_per_frame": 1, "rtc_delay_steps": 0}


class ConfigError(ValueError):
    """A parameter value the node cannot run with; the message names the parameter."""


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    """Everything the node reads from ROS parameters (one field per parameter)."""

    preset: str = parameter(
        "tiny", "Model preset: the model's shapes.", choices=tuple(MODEL_PRESETS)
    )
    robot: str = parameter(
        "demo",
        f"Robot: a preset ({', '.join(ROBOT_PRESETS)}) or one the params file declares "
        f"under robots.<robot> (fields {', '.join(robot_spec.FIELDS)}: oxygen_core."
        "robot_spec). The fields are parameters of the robot named at start-up only.",
    )
    checkpoint_dir: str = parameter(
        "", "openpi pi0.5 checkpoint folder (Orbax params + assets); empty: random weights."
    )
    tokenizer_path: str = parameter(
        "", "SentencePiece model file; empty: the tokenizer the project ships."
    )
    asset_id: str = parameter(
        "",
        "The checkpoint's norm stats to use: assets/<asset_id>/norm_stats.json (openpi's "
        "asset id, e.g. a LeRobot repo id org/name); empty: the only one there.",
    )
    norm_stats_missing: str = parameter(
        "fail",
        "What a checkpoint without norm stats gets: fail (configure fails) or identity "
        "(only for a checkpoint trained without normalisation).",
        choices=NORM_STATS_MISSING,
    )
    dtype: str = parameter(
        "float32",
        "Compute and KV-cache dtype: float32 on CPU, bfloat16 on a GPU or Jetson.",
        choices=("float32", "bfloat16"),
    )
    compile_cache_dir: str = parameter(
        COMPILE_CACHE_DIR,
        "Folder of JAX's persistent compilation cache (~ expanded), so that a restart reads "
        "the executables configure compiled before; empty: off.",
    )
    camera_topics: tuple[str, ...] = parameter(
        ("/camera/base/image_raw",),
        "Camera topics, mapped to the model's image slots in order (base, left wrist, "
        "right wrist); a topic ending in /compressed is a CompressedImage, others Image.",
    )
    joint_state_topic: str = parameter("/joint_states", "sensor_msgs/JointState topic.")
    joint_names: tuple[str, ...] = parameter(
        (), "Joint names in the order the model expects its state (matched in JointState)."
    )
    action_names: tuple[str, ...] = parameter(
        (),
        "Names of the action columns; empty: joint_names when there are action_dim of them.",
    )
    joint_trajectory: bool = parameter(
        True, "Also publish ~/joint_trajectory (only when actions are joint positions)."
    )
    controller_model: str = parameter(
        "jtc",
        "The controller ~/joint_trajectory drives, which shapes what it gets: jtc "
        "(ros2_control's joint_trajectory_controller of Jazzy and Kilted: rows it cannot "
        "meet dropped, velocities for cubic segments, a stop at the end), jtc_replacement "
        "(its master branch's trajectory replacement), none (rows as released, positions "
        "only, for the user's own code).",
        choices=CONTROLLER_MODELS,
    )
    interpolate_from_desired_state: bool = parameter(
        False,
        "As the trajectory controllers are configured (ros2_controllers' parameter of that "
        "name, jtc): true, each trajectory starts from the controller's last command, which "
        "the node then shapes its trajectories and holds from; false, from the measured "
        "joints. Position-controlled grippers that squeeze what they hold lag their command "
        "by design, and a chunk stream is a reference sent over many messages: true suits "
        "both.",
        read_only=True,
    )
    controller_names: tuple[str, ...] = parameter(
        (),
        "Trajectory controllers the action joints are split over, one trajectory each with "
        "the same stamp; each has controllers.<name>.topic (default /<name>/joint_trajectory, "
        "the controller's own) and controllers.<name>.joints (declared at start-up). Empty: "
        "every action joint on ~/joint_trajectory.",
        read_only=True,
    )
    controller_lead_s: float = parameter(
        0.01,
        "Longest time from publishing a trajectory to the controller's update that takes it "
        "over (transport plus one controller period); jtc drops rows due before then plus "
        "one control period.",
        (0.0, 1.0),
    )
    command_chunk: bool = parameter(
        False,
        "Also publish ~/command_chunk: the chunk for a controller that takes velocities or "
        "end-effector commands, behind ~/enable and the e-stop (a chunk of 0 rows: stop).",
    )
    instruction: str = parameter("", "Task instruction until one arrives on instruction_topic.")
    instruction_topic: str = parameter("~/instruction", "std_msgs/String topic of instructions.")
    control_rate_hz: float = parameter(
        50.0, "Rate at which the robot executes actions.", (0.1, 1000.0)
    )
    action_horizon: int = parameter(
        0, "Action rows published per chunk; 0: the model's whole horizon.", (0, 1024)
    )
    execute_horizon: int = parameter(
        5, "Rows executed before the next chunk; frame period = this / control rate.", (1, 1024)
    )
    stale_timeout_s: float = parameter(
        0.5, "Inputs older than this (node clock) skip the frame.", (0.001, 60.0)
    )
    sync_slop_s: float = parameter(
        0.05, "Largest spread of camera stamps accepted as one frame.", (0.0, 10.0)
    )
    missing_camera: str = parameter(
        "skip",
        "A camera without a fresh image: skip the frame, or leave it blank (zero image).",
        choices=MISSING_CAMERA_POLICIES,
    )
    stream_names: tuple[str, ...] = parameter(
        tuple(s.name for s in _ENGINE.streams),
        "Language streams; each has parameters streams.<name>.* (declared at start-up).",
        read_only=True,
    )
    marker_frame_id: str = parameter("base_link", "TF frame of the narration text markers.")
    autostart: bool = parameter(False, "Configure and activate at start-up.")
    diagnostics_period_s: float = parameter(
        1.0, "Period of /diagnostics messages while active.", (0.05, 60.0)
    )
    qos_deadline_factor: float = parameter(
        1.5,
        "QoS deadline offered on the chunk outputs (~/action_chunk, ~/joint_trajectory, "
        "~/command_chunk), in frame periods: a margin over the period, so timer jitter "
        "raises no DDS deadline event. Misses are counted on the steady clock against one "
        "period, whatever this is.",
        (1.0, 100.0),
    )
    max_image_pixels: int = parameter(
        DEFAULT_MAX_IMAGE_PIXELS,
        "Largest camera image (width x height) decoded; larger ones are bad_image, refused "
        "from their header before decoding. Default: four 1920x1080 frames.",
        (1, PILLOW_WARN_PIXELS),
    )
    max_instruction_chars: int = parameter(
        DEFAULT_MAX_INSTRUCTION_CHARS,
        "Longest instruction accepted; a longer one (or one over the model's prompt "
        "tokens) is refused and the previous instruction kept.",
        (1, 1_000_000),
    )
    robot_description: str = parameter(
        "",
        "The robot's URDF (XML): the position and velocity limits of the commanded joints, "
        "under the joint_limits.<joint>.* parameters.",
    )
    robot_description_file: str = parameter(
        "",
        "A URDF file (a relative path from the working directory, as checkpoint_dir), read "
        "when robot_description is empty.",
    )
    robot_description_topic: str = parameter(
        "",
        "Latched std_msgs/String URDF topic (robot_state_publisher's /robot_description), "
        "waited for at configure when robot_description and robot_description_file are empty.",
    )
    robot_description_timeout_s: float = parameter(
        5.0, "Longest wait for robot_description_topic at configure.", (0.01, 600.0)
    )
    gate_policy: str = parameter(
        "slow",
        "What the chunk gate does with a chunk that breaks a joint limit: clamp its "
        "positions, slow it (retime), reject it; off only to measure what the gate "
        "prevents (an error-level state).",
        choices=(*POLICIES, "off"),
    )
    gate_max_stretch: float = parameter(
        10.0, "Largest factor gate_policy slow may stretch a chunk's duration by.", (1.0, 1000.0)
    )
    gate_seam_easing: float = parameter(
        0.0,
        "Share of each joint's max_acceleration the gate may use to fade a new chunk's "
        "disagreement with the rows the robot runs out over its first rows, before judging "
        "it (oxygen_core.safety.seam); 0: chunks are judged as the model made them.",
        (0.0, 1.0),
    )
    gate_max_rejections: int = parameter(
        3,
        "Rejected chunks in a row after which the node holds the robot and reports ERROR "
        "until a chunk passes.",
        (1, 1_000_000),
    )
    start_enabled: bool = parameter(
        True,
        "Whether chunks reach the robot after activate, before ~/enable says so; never with "
        "random weights (checkpoint_dir empty): they wait for ~/enable.",
    )
    estop_topic: str = parameter(
        "~/estop",
        "std_msgs/Bool topic of the emergency stop (reliable; transient local or volatile "
        "publishers): true = stop.",
    )

    # Filled from controllers.<name>.* (not a parameter itself), as streams are.
    controllers: tuple[ControllerJoints, ...] = ()

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if is_parameter(field):
                _check_field(field, getattr(self, field.name))
        if not self.camera_topics:
            raise ConfigError("camera_topics is empty: the model needs at least one camera")
        for name in ("joint_names", "action_names", "stream_names", "controller_names"):
            values = getattr(self, name)
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise ConfigError(f"{name} lists {repeated} more than once: {list(values)}")

    @property
    def starts_enabled(self) -> bool:
        """start_enabled, unless the weights are random: a forgotten checkpoint_dir must not
        drive a robot with noise; only an explicit ~/enable lets such chunks out."""
        return self.start_enabled and bool(self.checkpoint_dir)

    @property
    def frame_period_s(self) -> float:
        """Time between frames: the robot executes execute_horizon rows per chunk."""
        return self.execute_horizon / self.control_rate_hz

    @property
    def qos_deadline_s(self) -> float:
        """The QoS deadline offered on the action outputs (see qos_deadline_factor)."""
        return self.qos_deadline_factor * self.frame_period_s

    @property
    def control_period_s(self) -> float:
        """Time between two rows of a chunk."""
        return 1.0 / self.control_rate_hz


def _check_field(field: dataclasses.Field, value: Any) -> None:
    """Enforce a field's range and choices (the same ones its descriptor advertises)."""
    span, choices = field.metadata["span"], field.metadata["choices"]
    if span is not None and not span[0] <= value <= span[1]:
        raise ConfigError(f"{field.name}={value!r} is outside [{span[0]}, {span[1]}]")
    if choices and value not in choices:
        raise ConfigError(f"{field.name}={value!r} is not one of {list(choices)}")


# streams.<name>.<field>: (description, range, choices); defaults come from StreamConfig.
_STREAM_FIELDS: dict[str, tuple[str, tuple[float, float] | None, tuple[str, ...]]] = {
    "prompt": ("Stream prompt appended after the shared prefix.", None, ()),
    "max_tokens": ("Tokens after which a request finishes (N).", (1, 4096), ()),
    "temperature": ("Sampling temperature; 0 is greedy.", (0.0, 10.0), ()),
    "stop_at_eos": ("Finish a request at the EOS token.", None, ()),
    "trigger": ("When a frame starts a request.", None, typing.get_args(Trigger)),
    "every_frames": ("Frames between requests for trigger 'every'.", (1, 100_000), ()),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The node's parameters split by owner: the node itself, the engine and the robot,
    the commanded joints' limits (None when no chunk gate runs) and a velocity robot's
    speed bounds (None for other robots)."""

    node: NodeConfig
    engine: EngineConfig
    robot: RobotConfig
    limits: JointLimits | None = None
    velocity_cap: VelocityCap | None = None


def _fields(config: type) -> list[tuple[dataclasses.Field, Any]]:
    """The parameter fields of a config dataclass, with their type hints."""
    hints = typing.get_type_hints(config)
    return [(f, hints[f.name]) for f in dataclasses.fields(config) if is_parameter(f)]


def declare_parameters(node: Node) -> None:
    """Declare every NodeConfig and EngineConfig parameter field and every stream's fields,
    with descriptors."""
    for config in (NodeConfig, EngineConfig):
        for field, hint in _fields(config):
            _declare(node, field.name, field.default, hint, field.metadata)
    names = node.get_parameter("stream_names").value or ()
    for name in dict.fromkeys(names):  # a repeated name fails at configure, with its name
        default = _default_stream(name)
        for key, (doc, span, choices) in _STREAM_FIELDS.items():
            meta = {"doc": doc, "span": span, "choices": choices}
            value = getattr(default, key)
            _declare(node, f"streams.{name}.{key}", value, type(value), meta)
    for name in dict.fromkeys(_read(node, "controller_names", (), None)):
        for key, (doc, default, hint) in _CONTROLLER_FIELDS.items():
            meta = {"doc": doc, "span": None, "choices": ()}
            value = default.format(name=name) if isinstance(default, str) else default
            _declare(node, f"controllers.{name}.{key}", value, hint, meta)
    robot = node.get_parameter("robot").value
    for key, field in robot_spec.FIELDS.items():
        hint = robot_spec.FIELD_TYPES[key]
        # A float field takes an int too (YAML's 1 for 1.0); robot_spec checks the value.
        floats = float in (hint, *typing.get_args(hint))
        meta = {"doc": field.doc, "span": field.span, "choices": field.choices, "dynamic": floats}
        _declare(node, f"robots.{robot}.{key}", None, hint, meta)
    commanded = _read(node, "action_names", (), None) or _read(node, "joint_names", (), None)
    declare_limit_parameters(node, commanded)


def read_settings(node: Node) -> Settings:
    """Read all parameters into configs; raise ConfigError naming a bad parameter."""
    node_values = {f.name: _read(node, f.name, f.default, hint) for f, hint in _fields(NodeConfig)}
    controllers = tuple(_read_controller(node, n) for n in node_values["controller_names"])
    cfg = NodeConfig(**node_values, controllers=controllers)
    engine_values = {
        f.name: _read(node, f.name, f.default, hint) for f, hint in _fields(EngineConfig)
    }
    for field, _ in _fields(EngineConfig):
        _check_field(field, engine_values[field.name])
    for name, least in _INT_OR_AUTO.items():
        value = engine_values[name]
        if value != "auto" and not (
            isinstance(value, int) and not isinstance(value, bool) and value >= least
        ):
            raise ConfigError(f"{name} must be an integer >= {least} or 'auto', got {value!r}")
    buckets = engine_values["batch_buckets"]
    if not buckets or min(buckets) < 1:
        raise ConfigError(f"batch_buckets must be positive sizes, got {buckets}")
    engine = EngineConfig(
        **{**engine_values, "batch_buckets": tuple(sorted(set(buckets)))},
        frame_budget_s=cfg.frame_period_s,
        streams=tuple(_read_stream(node, name) for name in cfg.stream_names),
    )
    robot = _read_robot(node, cfg.robot)
    commanded = commanded_names(cfg, robot)
    try:
        limits = read_limits(node, cfg, commanded)
        velocity_cap = read_velocity_cap(node, cfg, robot, commanded)
    except ValueError as error:  # one line, whatever a parser's message spans
        raise ConfigError(" ".join(str(error).split())) from None
    check_outputs(cfg, robot)
    return Settings(cfg, engine, robot, limits, velocity_cap)


def check_outputs(cfg: NodeConfig, robot: RobotConfig) -> None:
    """Only absolute joint positions may go on ~/joint_trajectory (and so through the
    chunk gate, which only judges what goes there)."""
    if robot.action_space != "position" and cfg.joint_trajectory:
        raise ConfigError(
            f"robot {robot.name!r} commands {ACTION_SPACES[robot.action_space]} (action_space "
            f"{robot.action_space}), which ~/joint_trajectory cannot carry: set "
            f"joint_trajectory: false and command_chunk: true"
        )


@dataclasses.dataclass(frozen=True)
class ChunkLayout:
    """What one published chunk holds: rows and the names of its columns."""

    horizon: int
    action_names: tuple[str, ...]  # empty when the columns have no names
    # One per trajectory controller (controller_names); empty: one trajectory of them all
    parts: tuple[Part, ...] = ()


def fit_to_model(cfg: NodeConfig, model: ModelConfig, robot: RobotConfig) -> ChunkLayout:
    """Check the parameters against the loaded model and robot; the chunk they publish."""
    slots = IMAGE_SLOTS[: len(cfg.camera_topics)]  # what the topics fill, in order
    if len(cfg.camera_topics) > len(robot.cameras):
        raise ConfigError(
            f"camera_topics has {len(cfg.camera_topics)} topics but robot {robot.name!r} "
            f"fills {len(robot.cameras)} image slots {robot.cameras}"
        )
    if robot.cameras[: len(slots)] != slots:
        raise ConfigError(
            f"camera_topics fill the image slots {slots} in order, but robot {robot.name!r} "
            f"has the cameras {robot.cameras}"
        )
    horizon = cfg.action_horizon or model.action_horizon
    if horizon > model.action_horizon:
        raise ConfigError(
            f"action_horizon={horizon} exceeds the model's horizon {model.action_horizon}"
        )
    if cfg.execute_horizon > horizon:
        raise ConfigError(f"execute_horizon={cfg.execute_horizon} exceeds action_horizon={horizon}")
    names = commanded_names(cfg, robot)
    if names and len(names) != robot.action_dim:
        raise ConfigError(
            f"action_names has {len(names)} names but robot {robot.name!r} "
            f"has action_dim {robot.action_dim}"
        )
    if cfg.joint_trajectory and not names:
        raise ConfigError(
            f"joint_trajectory needs action_names: robot {robot.name!r} has action_dim "
            f"{robot.action_dim} but {len(cfg.joint_names)} joint_names"
        )
    try:
        parts = split(names, cfg.controllers) if cfg.joint_trajectory and cfg.controllers else ()
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return ChunkLayout(horizon=horizon, action_names=names, parts=parts)


def commanded_names(cfg: NodeConfig, robot: RobotConfig) -> tuple[str, ...]:
    """The chunk's column names: action_names, else joint_names when there are action_dim
    of them (else none)."""
    if cfg.action_names or len(cfg.joint_names) != robot.action_dim:
        return cfg.action_names
    return cfg.joint_names


def check_delay(cfg: NodeConfig, engine: EngineConfig, model: ModelConfig) -> None:
    """A fixed rtc_delay_steps must leave a chunk that lasts until the next one arrives:
    the rows from d on (the ones published) hold at least execute_horizon rows."""
    delay = engine.rtc_delay_steps
    if engine.chunk_handover == "replace" or delay == "auto":
        return
    if delay + cfg.execute_horizon > model.action_horizon:
        raise ConfigError(
            f"rtc_delay_steps={delay} + execute_horizon={cfg.execute_horizon} exceeds the "
            f"model's horizon {model.action_horizon}: the chunk would run out before the next"
        )


# controllers.<name>.<field>: (description, default, type); "{name}" is the controller's.
_CONTROLLER_FIELDS: dict[str, tuple[str, Any, Any]] = {
    "topic": (
        "Topic of this controller's trajectory_msgs/JointTrajectory input.",
        "/{name}/joint_trajectory",
        str,
    ),
    "joints": ("The action joints this controller owns, in its order.", (), tuple[str, ...]),
}


def _read_controller(node: Node, name: str) -> ControllerJoints:
    """One controller's parameters."""
    prefix = f"controllers.{name}."
    topic = _read(node, prefix + "topic", f"/{name}/joint_trajectory", str)
    joints = _read(node, prefix + "joints", (), tuple)
    if not topic:
        raise ConfigError(f"{prefix}topic is empty")
    return ControllerJoints(name, topic, tuple(joints))


def _default_stream(name: str) -> StreamConfig:
    """The built-in stream of that name, or one whose prompt must be set."""
    builtin = {s.name: s for s in DEFAULT_STREAMS}
    return builtin.get(name, StreamConfig(name, prompt=""))


def _read_stream(node: Node, name: str) -> StreamConfig:
    """One stream's parameters (ROS has enforced their ranges; choices are checked here)."""
    prefix = f"streams.{name}."
    values = {key: node.get_parameter(prefix + key).value for key in _STREAM_FIELDS}
    for key, (_, _, choices) in _STREAM_FIELDS.items():
        if choices and values[key] not in choices:
            raise ConfigError(f"{prefix}{key}={values[key]!r} is not one of {list(choices)}")
    if not values["prompt"].strip():
        raise ConfigError(f"{prefix}prompt is empty")
    return StreamConfig(name=name, **values)


def _read_robot(node: Node, name: str) -> RobotConfig:
    """The robot declared under robots.<name> in the parameters, else the preset `name`."""
    prefix = f"robots.{name}."
    given = {}
    for key, hint in robot_spec.FIELD_TYPES.items():
        if node.has_parameter(prefix + key):  # only the start-up robot's are declared
            value = _read(node, prefix + key, None, hint)
            if value is not None:
                given[key] = value
    if not given and name in ROBOT_PRESETS:
        return ROBOT_PRESETS[name]
    if not given:
        raise ConfigError(
            f"robot={name!r} is neither a preset ({', '.join(ROBOT_PRESETS)}) nor declared "
            f"under robots.{name} in the params file"
        )
    try:
        return robot_spec.declared_robot(name, given, where=f"robots.{name}")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _declare(node: Node, name: str, default: Any, hint: Any, meta: dict) -> None:
    """Declare one parameter with its descriptor; a default of None or () declares its
    type only, so the parameter has no value unless the YAML or a -p override gives one."""
    descriptor = ParameterDescriptor(
        name=name,
        description=meta["doc"],
        read_only=meta.get("read_only", False),
        dynamic_typing=meta.get("dynamic", False),
    )
    if meta["choices"]:
        descriptor.additional_constraints = "one of: " + ", ".join(meta["choices"])
    span = meta["span"]
    if span is not None and hint is int:
        descriptor.integer_range = [IntegerRange(from_value=span[0], to_value=span[1], step=1)]
    elif span is not None and hint is float:
        descriptor.floating_point_range = [
            FloatingPointRange(from_value=span[0], to_value=span[1], step=0.0)
        ]
    # An empty tuple has no element type for rclpy to infer, and None no value; a
    # dynamically typed parameter is declared without a type.
    if descriptor.dynamic_typing and (default is None or default == ()):
        value = None
    else:
        value = _ros_type(hint) if default is None or default == () else _to_ros(default)
    node.declare_parameter(name, value, descriptor)


def _read(node: Node, name: str, default: Any, hint: Any) -> Any:
    """One parameter's value as the dataclass type (lists become tuples)."""
    try:
        value = node.get_parameter(name).value
    except ParameterUninitializedException:
        return default
    if name in _INT_OR_AUTO:
        return _parse_int_or_auto(value)
    if isinstance(value, (list, tuple, array.array)):  # integer arrays come as array("q")
        return tuple(value)
    return value


def _parse_int_or_auto(value: Any) -> int | str:
    """An int-or-'auto' parameter comes as an int, 'auto', or a string of digits from the
    command line."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


def _ros_type(hint: Any) -> Parameter.Type:
    """The ROS parameter type of a field's type hint (a scalar or a tuple of one)."""
    if typing.get_origin(hint) is tuple:
        element = typing.get_args(hint)[0]
        return {
            str: Parameter.Type.STRING_ARRAY,
            int: Parameter.Type.INTEGER_ARRAY,
            float: Parameter.Type.DOUBLE_ARRAY,
        }[element]
    types = {
        str: Parameter.Type.STRING,
        int: Parameter.Type.INTEGER,
        bool: Parameter.Type.BOOL,
        float: Parameter.Type.DOUBLE,
    }
    return types[hint]


def _to_ros(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
