"""The `oxygen` lifecycle node: pi0.5 served by the OxyGen engine over ROS 2 topics.

Each pair of lifecycle hooks creates and destroys the same resources:

- configure / cleanup: parameters, the policy and engine (every shape compiled here, so
  nothing compiles while active), the frame assembler and the lifecycle publishers; then
  the objects that exist are moved out of the garbage collector's sight (`gc.freeze`, and
  `gc.unfreeze` at cleanup): a full collection walked the ~300 000 objects a loaded engine
  holds in 80-200 ms, and one that fell inside a frame (building the trajectory messages)
  sent the trajectory that late, after its first point was due;
- activate / deactivate: subscriptions, the frame worker thread, the frame timer and the
  diagnostics timer (on the steady clock, so /diagnostics keeps coming when /clock stops).

What reaches the controller (~/joint_trajectory, ~/command_chunk) is the motion
authority's (oxygen_ros.motion), which sends every hold: the `~/enable` service
(std_srvs/SetBool; start_enabled until it is called, never with random weights) and the
e-stop (estop_topic, std_msgs/Bool, reliable, from latched and volatile publishers alike:
true = stop), both made at configure, switch it off at once with one hold and on again at
the next frame; while off, frames run on as a dry run. Every transition away from active
(deactivate, shutdown, `release` on Ctrl-C, a second stop signal) and every failed frame
sends one hold through it, while the controller publishers are still active; cleanup
comes only from inactive, after the deactivation's hold, when no lifecycle publisher can
send anything.

Callbacks only store messages (in the FrameAssembler). Subscriptions and both timers
go through `oxygen_ros.router` (InputRouter, Tick.at), the code replay runs too. The
frame timer runs at the frame period (execute_horizon / control_rate_hz) on the node
clock, so use_sim_time and bag replay drive it; deadlines are measured on the steady
clock. Its callback hands the tick to the one worker thread that owns the engine
(oxygen_ros.worker); the frame itself is oxygen_ros.frame. A configure that cannot load
what the parameters name logs them and returns FAILURE: the node stays up, unconfigured,
and can be configured again.

Warnings a peer can trigger at will (a refused instruction, a request for an unknown
stream) are throttled per reason and quote the peer's text as an excerpt
(oxygen_core.text); both are also counted on /diagnostics. `main` ends in one line, not
a traceback, when rcl cannot start, e.g. when SROS2 security is requested but cannot be
set up.

Topics (~ is /oxygen):
  in:  camera_topics (Image, or CompressedImage for .../compressed), joint_state_topic
       (JointState), instruction_topic (String), ~/request (String: a stream's name, for
       streams with trigger on_demand), estop_topic (Bool, transient local or volatile: true = stop)
  service: ~/enable (SetBool: whether trajectories reach the controller)
  out: the table oxygen_ros.topics.OUTPUTS (~/action_chunk, ~/joint_trajectory,
       ~/<stream>, ~/<stream>/text, ~/stats, ~/markers, /diagnostics)
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import time
import warnings
from typing import Any

from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import InvalidParameterTypeException, ParameterException
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from std_msgs.msg import Bool
from std_srvs.srv import SetBool

from oxygen_core.clock import NS_PER_S
from oxygen_core.engine.types import DEFAULT_STREAMS, EngineConfig
from oxygen_core.text import excerpt
from oxygen_ros import ros_args, topics
from oxygen_ros.diagnostics import (
    ClockWatch,
    DiagnosticsReporter,
    NodeStats,
    StatsSnapshot,
)
from oxygen_ros.frame import FrameLoop, Tick
from oxygen_ros.inputs import FrameAssembler
from oxygen_ros.motion import ENABLED, ESTOP_SOURCES, MotionAuthority
from oxygen_ros.params import (
    _STREAM_FIELDS,
    NodeConfig,
    Settings,
    declare_parameters,
    read_settings,
)
from oxygen_ros.pipeline import make_pipeline
from oxygen_ros.publishers import LifecyclePublishers
from oxygen_ros.router import InputRouter
from oxygen_ros.spin import CannotStart, Hosted, run_node
from oxygen_ros.topics import LifecycleGate
from oxygen_ros.worker import FrameWorker

_LOAD_PARAMETERS = ("preset", "robot", "checkpoint_dir", "tokenizer_path", "asset_id")
_STALL_PERIODS = 3  # frame periods without a ROS clock advance before it counts as stalled
# The e-stop listens with both durabilities (oxygen_ros.motion): the latched one reads a
# button's state at once when the node joins late, the volatile one hears publishers that
# latch nothing, such as `ros2 topic pub`.
ESTOP_QOS = {
    source: QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=durability)
    for source, durability in zip(
        ESTOP_SOURCES, (DurabilityPolicy.TRANSIENT_LOCAL, DurabilityPolicy.VOLATILE), strict=True
    )
}


@dataclasses.dataclass
class _Configured:
    """What on_configure creates and on_cleanup releases."""

    settings: Settings
    engine: Any
    assembler: FrameAssembler
    gate: LifecycleGate  # closed while inactive: nothing is published
    outputs: LifecyclePublishers
    stats: NodeStats
    loop: FrameLoop
    router: InputRouter  # inputs, ticks and /diagnostics, as replay takes them
    motion: MotionAuthority  # ~/enable, the e-stop and the holds, in front of the controller
    enable: Any = None  # the ~/enable service
    estop: list[Any] = dataclasses.field(default_factory=list)  # its subscriptions


@dataclasses.dataclass
class _Active:
    """What on_activate creates and on_deactivate releases."""

    worker: FrameWorker[Tick] | None  # None only while _start builds it
    subscriptions: list[Any]
    timers: list[Any]


class OxygenNode(LifecycleNode):
    """Lifecycle node `oxygen`; keyword arguments go to rclpy's Node (e.g. overrides)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("oxygen", **kwargs)
        declare_parameters(self)
        self._own_parameters = set(self.list_parameters([], 0).names) - {"use_sim_time"}
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._configured: _Configured | None = None
        self._active: _Active | None = None
        self._draining: FrameWorker[Tick] | None = None  # a worker stop() stopped waiting for

    def stats(self) -> StatsSnapshot:
        """The counts behind /diagnostics (introspection and tests); empty before configure."""
        c = self._configured
        return StatsSnapshot() if c is None else c.stats.snapshot()

    def _on_set_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        """Parameters are read once, at configure: refuse a change that would not apply."""
        if self._configured is None:
            return SetParametersResult(successful=True)
        stuck = sorted(p.name for p in parameters if p.name in self._own_parameters)
        if not stuck:
            return SetParametersResult(successful=True)
        return SetParametersResult(
            successful=False,
            reason=f"{', '.join(stuck)} are read at configure: deactivate and clean up the "
            "node first, then set them and configure again",
        )

    @property
    def frame_running(self) -> bool:
        """Whether a frame is on the worker right now (introspection and tests)."""
        active = self._active
        return active is not None and active.worker.busy

    # ------------------------------------------------------------------ configure / cleanup

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._configured = self._configure()
        except Exception as error:  # whatever a load raises, the node must stay up
            named = ", ".join(f"{p}={self.get_parameter(p).value!r}" for p in _LOAD_PARAMETERS)
            self.get_logger().error(f"configure failed: {type(error).__name__}: {error} ({named})")
            return TransitionCallbackReturn.FAILURE
        gc.collect()
        gc.freeze()  # full collections then walk only what frames leave behind
        cfg = self._configured.settings.node
        self.get_logger().info(
            f"configured {cfg.preset} for robot {cfg.robot}: frame period "
            f"{cfg.frame_period_s * 1e3:.1f} ms, cameras {list(cfg.camera_topics)}"
        )
        return TransitionCallbackReturn.SUCCESS

    def _configure(self) -> _Configured:
        settings = read_settings(self)
        cfg = settings.node
        self._check_topic_names(cfg)
        pipeline = make_pipeline(settings)
        engine, assembler = pipeline.engine, pipeline.assembler
        stats = NodeStats()
        gate = LifecycleGate()
        outputs = LifecyclePublishers(self, cfg, gate, stats.qos_deadline_missed)
        motion = MotionAuthority(outputs, stats, enabled=cfg.starts_enabled)
        loop = FrameLoop(
            engine=engine,
            assembler=assembler,
            motion=motion,
            stats=stats,
            cfg=cfg,
            layout=pipeline.layout,
            gate=pipeline.gate,
            velocity_cap=pipeline.settings.velocity_cap,
            max_rejections=cfg.gate_max_rejections,
            logger=self.get_logger(),
            now_ns=lambda: self.get_clock().now().nanoseconds,
        )
        router = InputRouter(
            assembler=assembler,
            request=loop.request,
            stats=stats,
            stream_names=cfg.stream_names,
            reporter=DiagnosticsReporter(self.get_fully_qualified_name(), cfg.frame_period_s),
            logger=self.get_logger(),
        )
        if cfg.start_enabled and not cfg.starts_enabled:
            self.get_logger().warning(
                "random weights (checkpoint_dir is empty): starting in a dry run despite "
                "start_enabled; ~/enable true lets their chunks reach the controller"
            )
        c = _Configured(settings, engine, assembler, gate, outputs, stats, loop, router, motion)
        c.enable = self.create_service(
            SetBool, topics.ENABLE, functools.partial(self._on_enable, c)
        )
        # A latched e-stop state arrives as soon as it matches.
        c.estop = [
            self.create_subscription(
                Bool, cfg.estop_topic, functools.partial(self._on_estop, c, source), qos
            )
            for source, qos in ESTOP_QOS.items()
        ]
        return c

    def _check_topic_names(self, cfg: NodeConfig) -> None:
        """Input topics are only subscribed at activate: a bad name must fail configure."""
        named = {f"camera_topics[{i}]": t for i, t in enumerate(cfg.camera_topics)}
        named["joint_state_topic"] = cfg.joint_state_topic
        named["instruction_topic"] = cfg.instruction_topic
        named["estop_topic"] = cfg.estop_topic
        for parameter, topic in named.items():
            try:
                self.resolve_topic_name(topic)
            except RuntimeError as error:  # rclpy's RCLError, with rcl's reason
                raise ValueError(
                    f"{parameter} {excerpt(topic)} is not a valid topic name: {error}"
                ) from None

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_configured()
        return TransitionCallbackReturn.SUCCESS

    def _release_configured(self) -> None:
        if self._draining is not None:
            self._draining.stop(timeout_s=None)
            self._draining = None
        c = self._configured
        if c is not None:
            self.destroy_service(c.enable)
            for subscription in c.estop:
                self.destroy_subscription(subscription)
            c.outputs.destroy()
            self._configured = None
            gc.unfreeze()  # the released engine's cycles can be collected again

    # ------------------------------------------------------------------ activate / deactivate

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)  # enables the lifecycle publishers
        if result != TransitionCallbackReturn.SUCCESS:
            return result
        c = self._configured
        if self._draining is not None:  # one engine, one thread: let the old one end first
            self._draining.stop(timeout_s=None)
            self._draining = None
        c.motion.activated()
        try:
            self._active = self._start(c)
        except Exception as error:  # leave nothing running behind a failed transition
            self.get_logger().error(f"activate failed: {type(error).__name__}: {error}")
            super().on_deactivate(state)
            return TransitionCallbackReturn.FAILURE
        c.stats.restart_rate()
        c.gate.open()
        return result

    def _start(self, c: _Configured) -> _Active:
        """Subscriptions, the worker, then the timers that feed it; undone if one fails."""
        active = _Active(worker=None, subscriptions=[], timers=[])
        try:
            active.subscriptions = self._subscribe(c)
            active.worker = FrameWorker(
                c.loop.run,
                on_error=functools.partial(self._on_frame_error, c),
                on_exit=c.loop.reset,
            )
            cfg = c.settings.node
            tick = functools.partial(self._on_tick, c, active.worker)
            active.timers.append(self.create_timer(cfg.frame_period_s, tick))
            # Diagnostics on the steady clock: a stalled /clock must not silence them.
            watch = ClockWatch(stall_after_s=_STALL_PERIODS * cfg.frame_period_s)
            report = functools.partial(self._on_diagnostics, c, watch)
            steady = Clock(clock_type=ClockType.STEADY_TIME)
            active.timers.append(self.create_timer(cfg.diagnostics_period_s, report, clock=steady))
        except Exception:
            self._stop(active, c)
            raise
        return active

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_active("deactivate")
        return super().on_deactivate(state)

    def _stop_active(self, reason: str) -> None:
        """Hold the robot, then close the outputs: after that, a frame still running
        publishes nothing. Before super().on_deactivate, which disables the publishers."""
        a, c = self._active, self._configured
        if a is None:
            return
        c.motion.halt(reason)
        c.gate.close()
        self._stop(a, c)
        self._active = None

    def _stop(self, a: _Active, c: _Configured) -> None:
        for timer in a.timers:
            self.destroy_timer(timer)
        for subscription in a.subscriptions:
            self.destroy_subscription(subscription)
        if a.worker is None:
            return
        grace_s = max(1.0, 3 * c.settings.node.frame_period_s)
        if not a.worker.stop(timeout_s=grace_s):
            self.get_logger().warning("a frame is still running: it ends without publishing")
            self._draining = a.worker

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition raised: drop everything, so the node is truly unconfigured."""
        self.get_logger().error(f"transition from {state.label} raised; releasing everything")
        self.release("transition error")
        return super().on_error(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release("shutdown")
        return super().on_shutdown(state)

    def release(self, reason: str = "shutdown") -> None:
        """Stop frames and drop every resource, from any state (shutdown, Ctrl-C); when
        active, the robot is held first (`reason`)."""
        self._stop_active(reason)
        self._release_configured()

    def hold(self, reason: str) -> bool:
        """Hold the robot now and send it nothing more until the next activation (any
        thread: a second stop signal); whether the controller output was live."""
        c = self._configured
        return c is not None and c.motion.halt(reason)

    # ------------------------------------------------------------------ callbacks

    def _subscribe(self, c: _Configured) -> list[Any]:
        """Input subscriptions in one reentrant group: they only store the latest message.

        In a MultiThreadedExecutor, callbacks of a mutually exclusive group that are ready
        while the group is busy make the executor loop in Python holding the GIL, which
        starved the frame worker (frames of 1.6 s on the tiny model). Reentrant store-only
        callbacks never wait on each other.
        """
        cfg = c.settings.node
        group = ReentrantCallbackGroup()
        routes = c.router.routes(
            cfg.camera_topics, cfg.joint_state_topic, cfg.instruction_topic, topics.REQUEST
        )
        return [
            self.create_subscription(
                r.msg_class,
                r.topic,
                r.callback,
                qos_profile_sensor_data if r.sensor else 10,
                callback_group=group,
            )
            for r in routes
        ]

    def _on_enable(
        self, c: _Configured, request: SetBool.Request, response: SetBool.Response
    ) -> SetBool.Response:
        """~/enable: success when the node is now as asked; the message is its state."""
        state = c.motion.set_enabled(request.data)
        response.success = (state == ENABLED) == request.data
        response.message = state
        self.get_logger().info(f"~/enable {request.data}: {state}")
        return response

    def _on_estop(self, c: _Configured, source: str, msg: Bool) -> None:
        state = c.motion.set_estop(msg.data, source)
        if msg.data:  # one call site per severity: rclpy's logger insists
            self.get_logger().warning(f"e-stop pressed: {state}")
        else:
            self.get_logger().info(f"e-stop released: {state}")

    def _on_tick(self, c: _Configured, worker: FrameWorker[Tick]) -> None:
        now_ns = self.get_clock().now().nanoseconds
        tick = Tick.at(now_ns, time.monotonic(), c.settings.node.frame_period_s)
        if not worker.submit(tick):
            c.stats.overrun()
            c.loop.overrun(now_ns)

    def _on_diagnostics(self, c: _Configured, watch: ClockWatch) -> None:
        """On the steady timer: reports even while the ROS clock stands still."""
        now_ns = self.get_clock().now().nanoseconds
        clock = watch.observe(now_ns / NS_PER_S, time.monotonic())
        c.outputs.publish(topics.DIAGNOSTICS, c.router.report(now_ns, clock))

    def _on_frame_error(self, c: _Configured, error: BaseException) -> None:
        """The failed frame sent nothing: the robot is held where it is (on the worker, so
        no frame publishes meanwhile); the next frame hands over from nothing."""
        if not self.context.ok():  # publishing after Ctrl-C shut the context down
            return
        c.stats.error()
        c.motion.hold("frame error")
        self.get_logger().error(
            f"frame failed: {type(error).__name__}: {error}", throttle_duration_sec=2.0
        )

    def autostart(self) -> bool:
        """Configure, then activate; True when the node ends up active."""
        if self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            return False
        return self.trigger_activate() == TransitionCallbackReturn.SUCCESS


def _build() -> Hosted:
    """The node, started with autostart when asked; a bad parameter is one clear line."""
    try:
        with warnings.catch_warnings():  # rclpy's own note on a node it could not create
            warnings.filterwarnings("ignore", "Failed to fini rosout publisher", RuntimeWarning)
            node = OxygenNode()
    except ParameterException as error:  # a mistyped or out-of-range value given at start
        hint = ""
        if isinstance(error, InvalidParameterTypeException):
            hint = "\n  (doubles need a decimal point: 20.0, not 20)"
        raise CannotStart(f"bad parameter: {error}{hint}", status=2) from None

    def start() -> None:
        if node.get_parameter("autostart").value:
            node.get_logger().info("autostart: configuring")
            if not node.autostart():
                # Nobody drives the lifecycle of a node that starts itself: staying up
                # unconfigured would leave a launch file, a supervisor or an evaluation
                # waiting for a node that never publishes. The reason is logged above.
                raise CannotStart("autostart failed: the node did not become active")

    return Hosted(
        node, start=start, close=node.release, hold=functools.partial(node.hold, "stop signal")
    )


def help_text() -> str:
    """`oxygen-node --help`: the parameters from NodeConfig's and EngineConfig's fields."""
    streams = ", ".join(_STREAM_FIELDS)
    builtin = ", ".join(f"{s.name} (prompt {s.prompt!r})" for s in DEFAULT_STREAMS)
    return ros_args.help_text(
        "oxygen-node",
        "The oxygen lifecycle node: pi0.5 served by the OxyGen engine over ROS 2 topics. "
        "It starts unconfigured (configure and activate it with `ros2 lifecycle set`), or "
        "configures and activates itself with autostart:=true (and exits with status 1 "
        "when it cannot).",
        ros_args.dataclass_params(NodeConfig, EngineConfig),
        [
            "oxygen-node --ros-args --params-file config/tiny.yaml -p autostart:=true",
            "ros2 run oxygen_ros oxygen_node --ros-args --params-file config/tiny.yaml "
            "-p use_sim_time:=true -p control_rate_hz:=20.0",
        ],
        notes=f"Each name in stream_names also has parameters streams.<name>.<field> for "
        f"the fields {streams}; built in: {builtin}. ROS's own use_sim_time applies too.",
    )


def main(args: list[str] | None = None) -> int:
    """Console script `oxygen-node`: spin the node until SIGINT or SIGTERM."""
    if ros_args.wants_help(args):
        print(help_text(), end="")
        return 0
    return run_node("oxygen-node", _build, args)


if __name__ == "__main__":
    raise SystemExit(main())
