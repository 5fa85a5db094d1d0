"""The checks of `oxygen-doctor` (tools/doctor.py says what it reports and why).

None decides anything itself; each asks the module that decides it for the node:

- params: tools.configure.load_settings (the node's own reading of the YAML), then
  params.fit_to_model and check_delay against the preset as the robot applies it, and a
  FrameAssembler built from them (its configure-time checks: joint_names per state dim);
- checkpoint: model.checkpoint (stored_arrays, find_norm_stats, check_horizon,
  check_image_slots, check_vocabulary) and weights.check_shapes, fed shape-only stand-ins
  for the arrays;
- limits: Settings.limits and velocity_cap (limits_source resolved them); ~/enable:
  NodeConfig.starts_enabled; the cache: where compile_cache.use_compile_cache writes;
- joint states: convert.joint_positions (how the assembler reads them by name) and the
  robot's state check (robot_io.gripper_problem); cameras: convert.image_to_rgb (what the
  assembler decodes), router.camera_msg_class (which type a topic carries);
- controller outputs: configure.TopicNames and topics.CONTROLLER_OUTPUTS; the e-stop:
  node.ESTOP_QOS against each publisher's QoS, by rclpy's own compatibility rule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from rclpy.exceptions import NameValidationException, ParameterException
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSCompatibility, QoSProfile, qos_check_compatible, qos_profile_sensor_data
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool

from oxygen_core import robot_io
from oxygen_core.config import IMAGE_SLOTS, ModelConfig, model_preset
from oxygen_core.engine.compile_cache import DEFAULT_DIR
from oxygen_core.model import weights
from oxygen_core.model.checkpoint import (
    TOKENIZER_FILE,
    ArrayInfo,
    asset_ids,
    check_horizon,
    check_image_slots,
    check_vocabulary,
    find_norm_stats,
    stored_arrays,
    trained_horizon,
    trained_image_slots,
)
from oxygen_core.model.tokenizer import load_tokenizer
from oxygen_ros import topics
from oxygen_ros.convert import (
    InputError,
    image_to_rgb,
    joint_positions,
    joint_velocities,
    msgtype,
)
from oxygen_ros.node import ESTOP_QOS
from oxygen_ros.params import NodeConfig, Settings, check_delay, commanded_names, fit_to_model
from oxygen_ros.pipeline import frame_assembler
from oxygen_ros.router import camera_msg_class
from oxygen_ros.tools.configure import TopicNames, load_settings, own_node
from oxygen_ros.tools.doctor_findings import Finding

# What reading the params raises: ConfigError (a ValueError), FileNotFoundError, rcl's
# RCLError (a RuntimeError); a value of the wrong type or outside its range is rclpy's
# ParameterException, at declaration: the node would not even start.
_PARAMS_ERRORS = (OSError, ValueError, RuntimeError, ParameterException, NameValidationException)


@dataclasses.dataclass(frozen=True)
class Setup:
    """What the node would run with: its settings, its resolved topics, its model's shapes."""

    settings: Settings
    names: TopicNames
    model: ModelConfig


def diagnose(
    params: Path, overrides: Mapping[str, str], allow_random: bool, listen_s: float | None
) -> list[Finding]:
    """Every finding after the platform's, in the order to fix them (doctor.py)."""
    with contextlib.ExitStack() as stack:
        # The graph is joined first: DDS discovery, seconds on a loaded machine, then runs
        # while the offline checks do, not inside the listen.
        node = None if listen_s is None else stack.enter_context(own_node("oxygen_doctor"))
        found, setup = read_params(params, overrides)
        if setup is None:
            return [found]
        cfg = setup.settings.node
        findings = [found, jax_backend(cfg.dtype), *checkpoint(setup, allow_random)]
        findings += [limits(setup.settings), enable(setup), compile_cache(cfg.compile_cache_dir)]
        if node is not None and listen_s is not None:
            heard = listen(node, setup.names, listen_s)
            findings += [joint_state(setup, heard), *cameras(setup, heard)]
            findings += [*controllers(setup, heard), estop(setup, heard)]
        return findings


# --------------------------------------------------------------------------- offline


def read_params(params: Path, overrides: Mapping[str, str]) -> tuple[Finding, Setup | None]:
    """The params as the node reads them, checked against the model as configure checks
    them; without a Setup when configure would fail on them."""
    try:
        settings, names = load_settings(params, overrides)
        cfg, robot = settings.node, settings.robot
        model = robot.apply(model_preset(cfg.preset))
        layout = fit_to_model(cfg, model, robot)
        check_delay(cfg, settings.engine, model)
        frame_assembler(settings, model, layout)
    except _PARAMS_ERRORS as error:
        fix = f"fix {params} (or the -p override) as the message says"
        return Finding("FAIL", "params", str(error), fix), None
    what = (
        f"{params}: preset {cfg.preset}, robot {robot.name}, {len(cfg.camera_topics)} "
        f"camera(s), a frame every {cfg.frame_period_s * 1e3:.0f} ms"
    )
    return Finding("ok", "params", what), Setup(settings, names, model)


def jax_backend(dtype: str) -> Finding:
    """JAX's devices, and whether `dtype` suits them (NodeConfig.dtype's advice)."""
    try:
        devices = jax.devices()
    except RuntimeError as error:  # a requested platform (JAX_PLATFORMS) that is not there
        return Finding(
            "FAIL", "jax", str(error), "install JAX for this machine or unset JAX_PLATFORMS"
        )
    backend = jax.default_backend()
    what = f"backend {backend} ({', '.join(map(str, devices))}), dtype {dtype}"
    if backend == "cpu" and dtype == "bfloat16":
        return Finding(
            "warn", "jax", f"{what}: bfloat16 is very slow on a CPU", "set dtype: float32"
        )
    if backend != "cpu" and dtype == "float32":
        what += ": float32 takes twice the memory and bandwidth of bfloat16"
        return Finding("warn", "jax", what, "set dtype: bfloat16")
    return Finding("ok", "jax", what)


def checkpoint(setup: Setup, allow_random: bool) -> list[Finding]:
    """The weights' folder, its norm stats and horizon, and the tokenizer, from metadata."""
    cfg = setup.settings.node
    if not cfg.checkpoint_dir:
        what = "random weights: the node will start disabled and must not drive a robot"
        fix = "set checkpoint_dir to a trained checkpoint before it drives a robot"
        random = (
            Finding("warn", "checkpoint", what, fix)
            if allow_random
            else Finding("FAIL", "checkpoint", what, f"{fix} (--allow-random: demo or sim)")
        )
        return [random, tokenizer(cfg, None, None)]
    ckpt = Path(cfg.checkpoint_dir)
    if not ckpt.is_dir():
        what = f"checkpoint_dir {ckpt} does not exist (seen from {Path.cwd()})"
        fix = (
            "set checkpoint_dir to the folder of params/ and assets/ (relative: to the node's cwd)"
        )
        return [Finding("FAIL", "checkpoint", what, fix)]
    try:
        arrays = stored_arrays(ckpt)
        weights.check_shapes(weights.unflatten(_stand_ins(arrays)), setup.model)
    except Exception as error:  # Orbax raises many types for a folder that is no checkpoint
        fix = "set checkpoint_dir or preset to match (oxygen-info --checkpoint says what it holds)"
        return [Finding("FAIL", "checkpoint", f"{ckpt}: {error}", fix)]
    count = sum(int(np.prod(info.shape)) for info in arrays.values())
    dtypes = ", ".join(sorted({info.dtype for info in arrays.values()}))
    what = (
        f"{ckpt}: {count:,} parameters ({dtypes}) fit preset {cfg.preset} "
        "(metadata only: configure loads the weights)"
    )
    found = Finding("ok", "checkpoint", what)
    return [
        found,
        norm_stats(cfg, ckpt),
        horizon(setup, ckpt),
        image_slots(setup, ckpt),
        tokenizer(cfg, ckpt, arrays),
    ]


def _stand_ins(arrays: Mapping[str, ArrayInfo]) -> dict[str, np.ndarray]:
    """Arrays of the stored shapes that take no memory (one broadcast element): the
    checks that take arrays only read their shapes."""
    return {path: np.broadcast_to(np.float32(0), info.shape) for path, info in arrays.items()}


def norm_stats(cfg: NodeConfig, ckpt: Path) -> Finding:
    try:
        stats = find_norm_stats(ckpt, cfg.asset_id or None, cfg.norm_stats_missing)
    except (OSError, ValueError, KeyError) as error:
        fix = "set asset_id as the message says (oxygen-info --checkpoint lists the ids)"
        return Finding("FAIL", "norm_stats", str(error), fix)
    if stats is None:
        what = f"{ckpt} has no norm stats: identity (norm_stats_missing: identity)"
        fix = "right only for a checkpoint trained without normalisation"
        return Finding("warn", "norm_stats", what, fix)
    asset = cfg.asset_id or asset_ids(ckpt)[0]
    sizes = f"state {stats.state.q01.shape[-1]}, actions {stats.actions.q01.shape[-1]}"
    return Finding("ok", "norm_stats", f"asset id {asset} ({sizes})")


def horizon(setup: Setup, ckpt: Path) -> Finding:
    robot, model = setup.settings.robot, setup.model
    try:
        check_horizon(ckpt, model, robot.name)
    except ValueError as error:
        fix = f"give robot {robot.name} the trained action_horizon (robots.{robot.name}.*)"
        return Finding("FAIL", "horizon", str(error), fix)
    trained = trained_horizon(ckpt)
    if trained is None:
        what = f"{ckpt} records no horizon: {model.action_horizon} (the robot's) is unchecked"
        return Finding("ok", "horizon", what)
    return Finding("ok", "horizon", f"trained and run at action_horizon {trained}")


def image_slots(setup: Setup, ckpt: Path) -> Finding:
    robot, model = setup.settings.robot, setup.model
    try:
        check_image_slots(ckpt, model, robot.name)
    except ValueError as error:
        fix = f"run it with the preset and the cameras robot {robot.name} was trained with"
        return Finding("FAIL", "image_slots", str(error), fix)
    trained = trained_image_slots(ckpt)
    if trained is None:
        what = f"{ckpt} records no image slots: {model.num_images} (the preset's) is unchecked"
        return Finding("ok", "image_slots", what)
    return Finding("ok", "image_slots", f"trained and run with {trained} image slots")


def tokenizer(
    cfg: NodeConfig, ckpt: Path | None, arrays: Mapping[str, ArrayInfo] | None
) -> Finding:
    """The tokenizer the node loads, against the checkpoint's embedding rows and the
    tokenizer a checkpoint trained here ships (TOKENIZER_FILE)."""
    own = ckpt / TOKENIZER_FILE if ckpt is not None else None
    has_own = own is not None and own.is_file()
    fix = (
        f"set tokenizer_path: {own}"
        if has_own
        else "set tokenizer_path to the SentencePiece model the checkpoint was trained with"
    )
    try:
        tok = load_tokenizer(cfg.tokenizer_path or None)
        if ckpt is not None and arrays is not None:
            check_vocabulary(_stand_ins(arrays), tok, ckpt / "params")
    except (OSError, RuntimeError, ValueError) as error:  # sentencepiece: RuntimeError
        return Finding("FAIL", "tokenizer", str(error), fix)
    if has_own and not cfg.tokenizer_path:
        what = f"{own} goes unused (tokenizer_path is empty): the shipped one gives other ids"
        return Finding("warn", "tokenizer", what, fix)
    return Finding("ok", "tokenizer", f"{tok.name} ({tok.vocab_size} pieces)")


def limits(settings: Settings) -> Finding:
    """Whether the commanded joints are bounded where the node bounds them: the chunk gate
    over Settings.limits, or a velocity robot's cap. A commanded joint without a bound
    never gets here: resolving the limits refused it (a params FAIL naming the joint)."""
    cfg, robot, bounds = settings.node, settings.robot, settings.limits
    names = commanded_names(cfg, robot)
    if bounds is None and settings.velocity_cap is not None:
        return Finding("ok", "limits", f"velocity commands capped per joint of {list(names)}")
    if bounds is None and cfg.joint_trajectory:  # fit_to_model saw to the names
        what = "gate_policy off: no chunk is judged against the joints' limits"
        return Finding("FAIL", "limits", what, "set gate_policy: slow (or clamp, reject)")
    if bounds is None:
        what = f"robot {robot.name}'s {robot.action_space} commands: no joint limits bound them"
        return Finding("warn", "limits", what, "make sure the controller enforces its own limits")
    kinds = ("lower", "upper", "velocity", "acceleration", "jump")
    off = [
        f"{n}.{k}"
        for k in kinds
        for n, v in zip(bounds.names, getattr(bounds, k), strict=True)
        if np.isinf(v)
    ]
    unbounded = f" (switched off: {', '.join(off)})" if off else ""
    return Finding("ok", "limits", f"{len(names)} joints bounded by {bounds.source}{unbounded}")


def enable(setup: Setup) -> Finding:
    cfg, service = setup.settings.node, setup.names.enable
    if cfg.starts_enabled:
        return Finding("ok", "enable", "chunks reach the controller once the node is active")
    why = "start_enabled is false" if cfg.checkpoint_dir else "random weights"
    fix = f"ros2 service call {service} std_srvs/srv/SetBool '{{data: true}}' when it may move"
    return Finding("warn", "enable", f"{why}: chunks stay a dry run until {service}", fix)


def compile_cache(directory: str) -> Finding:
    """Whether use_compile_cache can create and fill `directory` ("" is off)."""
    if not directory:
        what = "compile_cache_dir is empty: every start compiles the engine again"
        return Finding("warn", "compile_cache", what, f"set compile_cache_dir: {DEFAULT_DIR}")
    path = Path(directory).expanduser().resolve()
    there = next(p for p in (path, *path.parents) if p.exists())
    writable = there.is_dir() and os.access(there, os.W_OK | os.X_OK)
    fix = "set compile_cache_dir to a folder this user can write ('' turns it off)"
    if there != path and not writable:  # mkdir fails: so does configure
        return Finding("FAIL", "compile_cache", f"{path} cannot be created in {there}", fix)
    if not there.is_dir():
        return Finding("FAIL", "compile_cache", f"{path} is not a folder", fix)
    if not writable:
        what = f"{path} is not writable: nothing compiled is kept, every start compiles again"
        return Finding("warn", "compile_cache", what, fix)
    return Finding("ok", "compile_cache", f"{path} is writable")


# --------------------------------------------------------------------------- live


@dataclasses.dataclass
class Arrivals:
    """One camera's messages during the listen: how many, when (monotonic s), and the
    latest only (a camera sends megabytes a second)."""

    count: int = 0
    first_s: float = 0.0
    last_s: float = 0.0
    latest: Any = None

    def add(self, msg: Any) -> None:
        now = time.monotonic()
        if not self.count:
            self.first_s = now
        self.count += 1
        self.last_s, self.latest = now, msg

    @property
    def rate_hz(self) -> float:
        span = self.last_s - self.first_s
        return (self.count - 1) / span if span > 0 else 0.0


@dataclasses.dataclass
class Heard:
    """What the listen took in, and the graph at its end (TopicEndpointInfo lists)."""

    listen_s: float
    joint_states: dict[tuple[str, ...], Any]  # the latest JointState of each list of names
    cameras: dict[str, Arrivals]
    publishers: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    subscribers: dict[str, list[Any]] = dataclasses.field(default_factory=dict)


def listen(node: Node, names: TopicNames, listen_s: float) -> Heard:
    """The node's inputs as it subscribes to them (sensor-data QoS, the camera's type by
    its topic name) for listen_s, then who publishes the inputs and the e-stop and who
    subscribes to the controller outputs."""
    heard = Heard(listen_s, {}, {topic: Arrivals() for topic in names.cameras})
    keep = heard.joint_states.__setitem__
    node.create_subscription(
        JointState,
        names.joint_state,
        lambda msg: keep(tuple(msg.name), msg),
        qos_profile_sensor_data,
    )
    for topic, arrivals in heard.cameras.items():
        node.create_subscription(
            camera_msg_class(topic), topic, arrivals.add, qos_profile_sensor_data
        )
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        deadline = time.monotonic() + listen_s
        while (left := deadline - time.monotonic()) > 0:
            executor.spin_once(timeout_sec=min(left, 0.1))
    finally:
        executor.shutdown()
    watched = (names.joint_state, *names.cameras, names.estop)
    heard.publishers = {topic: node.get_publishers_info_by_topic(topic) for topic in watched}
    heard.subscribers = {
        t.topic: node.get_subscriptions_info_by_topic(t.topic) for t in _controller_topics(names)
    }
    return heard


def joint_state(setup: Setup, heard: Heard) -> Finding:
    """Every joint the node reads (state and commanded), as it reads them, from each kind
    of JointState that arrived (a split publisher fails every other frame)."""
    topic = setup.names.joint_state
    if not heard.joint_states:
        silence = _silence(heard, topic, JointState)
        what = f"no JointState on {topic} in {heard.listen_s:g} s ({silence})"
        fix = "start the robot's joint state publisher, or set joint_state_topic to its topic"
        return Finding("FAIL", "joint_state", what, fix)
    for msg in heard.joint_states.values():
        problem = _state_problem(setup, msg)
        if problem is not None:
            return Finding("FAIL", "joint_state", f"{topic}: {problem[0]}", problem[1])
    inside = ", inside their limits" if setup.settings.limits is not None else ""
    commanded = commanded_names(setup.settings.node, setup.settings.robot)
    if setup.settings.node.joint_trajectory and any(
        joint_velocities(msg, commanded) is None for msg in heard.joint_states.values()
    ):
        what = f"{topic}: no velocities for the commanded joints{inside}"
        fix = (
            "publish velocities (joint_state_broadcaster with a velocity state interface): "
            "without them a hold stops in one controller update"
        )
        return Finding("warn", "joint_state", what, fix)
    return Finding("ok", "joint_state", f"{topic}: every joint the node reads{inside}")


def _state_problem(setup: Setup, msg: Any) -> tuple[str, str] | None:
    """(what, fix) of the first thing that makes the node skip or hold on this message."""
    cfg, robot, bounds = setup.settings.node, setup.settings.robot, setup.settings.limits
    needed = list(dict.fromkeys((*cfg.joint_names, *commanded_names(cfg, robot))))
    try:
        joint_positions(msg, needed)
    except InputError as error:
        return str(error), "publish every joint of joint_names and action_names in each JointState"
    problem = robot_io.gripper_problem(
        robot, joint_positions(msg, cfg.joint_names), cfg.joint_names
    )
    if problem is not None:
        return problem, f"publish the gripper in robot {robot.name}'s unit"
    if bounds is None:
        return None
    positions = joint_positions(msg, bounds.names)
    outside = [
        f"{name} at {q:.4g} is outside [{lo:g}, {hi:g}]"
        for name, q, lo, hi in zip(bounds.names, positions, bounds.lower, bounds.upper, strict=True)
        if not lo <= q <= hi
    ]
    if not outside:
        return None
    what = f"{'; '.join(outside)} ({bounds.source})"
    return what, "move the joint inside its limits before activating, or fix the limits"


def cameras(setup: Setup, heard: Heard) -> list[Finding]:
    return [_camera(setup, heard, i, topic) for i, topic in enumerate(setup.names.cameras)]


def _camera(setup: Setup, heard: Heard, index: int, topic: str) -> Finding:
    """Whether the camera arrives, decodes as the assembler decodes it, and keeps up with
    the frames."""
    cfg, arrivals = setup.settings.node, heard.cameras[topic]
    name = f"{topic} ({IMAGE_SLOTS[index]})"
    if not arrivals.count:
        silence = _silence(heard, topic, camera_msg_class(topic))
        what = f"no image on {name} in {heard.listen_s:g} s ({silence})"
        return Finding("FAIL", "camera", what, f"start its driver, or set camera_topics[{index}]")
    try:
        rgb = image_to_rgb(arrivals.latest, cfg.max_image_pixels)
    except Exception as error:  # the assembler takes a decoder's own exceptions as bad too
        fix = "publish rgb8, bgr8, mono8 (oxygen_ros.convert) or JPEG/PNG on .../compressed"
        return Finding("FAIL", "camera", f"{name}: {error}", fix)
    frame_hz, rate = 1.0 / cfg.frame_period_s, arrivals.rate_hz
    what = f"{name}: {rgb.shape[1]}x{rgb.shape[0]} at {rate:.1f} Hz"
    if rate < frame_hz:
        fix = "raise the camera's rate, or the frame period (execute_horizon / control_rate_hz)"
        return Finding("warn", "camera", f"{what}, below the {frame_hz:g} Hz frame rate", fix)
    return Finding("ok", "camera", what)


def _silence(heard: Heard, topic: str, msg_class: type) -> str:
    """Why nothing arrived, as far as the graph tells."""
    publishers, expected = heard.publishers.get(topic, []), msgtype(msg_class)
    others = sorted({p.topic_type for p in publishers} - {expected})
    if others:
        return f"its publishers send {', '.join(others)}, the node takes {expected}"
    return f"its {len(publishers)} publisher(s) sent nothing" if publishers else "no publisher"


def _controller_topics(names: TopicNames) -> list[topics.Topic]:
    return [t for t in names.published if t.output.name in topics.CONTROLLER_OUTPUTS]


def controllers(setup: Setup, heard: Heard) -> list[Finding]:
    """A subscriber, of the right type, on each output that reaches a controller."""
    found = []
    for t in _controller_topics(setup.names):
        subscribers, expected = heard.subscribers[t.topic], t.output.msgtype
        wrong = [s for s in subscribers if s.topic_type != expected]
        if not subscribers:
            what = f"nobody subscribes to {t.topic}: the chunks reach no controller"
            fix = f"start the controller, or remap its command topic to {t.topic}"
            found.append(Finding("FAIL", "controller", what, fix))
        elif wrong:
            what = f"{_endpoint(wrong[0])} takes {t.topic} as {wrong[0].topic_type}, not {expected}"
            found.append(Finding("FAIL", "controller", what, f"subscribe with {expected}"))
        else:
            who = ", ".join(_endpoint(s) for s in subscribers)
            found.append(Finding("ok", "controller", f"{t.topic}: {who}"))
    return found


def estop(setup: Setup, heard: Heard) -> Finding:
    """Publishers on the e-stop topic that one of the node's e-stop subscriptions hears."""
    topic, expected = setup.names.estop, msgtype(Bool)
    publishers = heard.publishers[topic]
    fix = f"publish std_msgs/Bool on {topic}, reliable (transient local or volatile)"
    if not publishers:
        return Finding("warn", "estop", f"no publisher on {topic}: nobody can stop it", fix)
    for p in publishers:
        if p.topic_type != expected:
            what = f"{_endpoint(p)} publishes {p.topic_type} on {topic}, not {expected}"
            return Finding("FAIL", "estop", what, fix)
        unheard = _unheard(p.qos_profile)
        if unheard:
            what = f"no e-stop subscription of the node hears {_endpoint(p)} on {topic}: {unheard}"
            return Finding("FAIL", "estop", what, fix)
    who = ", ".join(_endpoint(p) for p in publishers)
    return Finding("ok", "estop", f"{topic}: {who}, heard by the node")


def _unheard(offered: QoSProfile) -> str:
    """Why no e-stop subscription of the node matches a publisher's QoS ("" if one does):
    the reasons every subscription gives."""
    reasons = []
    for wanted in ESTOP_QOS.values():
        compatible, text = qos_check_compatible(offered, wanted)
        if compatible != QoSCompatibility.ERROR:
            return ""
        reasons.append({r.strip().removeprefix("ERROR: ") for r in text.split(";") if r.strip()})
    return "; ".join(sorted(set.intersection(*reasons) or reasons[0]))


def _endpoint(info: Any) -> str:
    return f"{info.node_namespace.rstrip('/')}/{info.node_name}"
