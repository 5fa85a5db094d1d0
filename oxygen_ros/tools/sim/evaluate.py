"""`oxygen-sim-eval`: closed-loop evaluation of the oxygen node on the simulated tabletop.

    oxygen-sim-eval [--params config/sim.yaml] [--policy model|expert|hold|random|blind]
                    [--mode oxygen]
                    [--families pick,put,push] [--episodes 2] [--seed 400000]
                    [--rtf 0.5] [--camera-size 224] [--camera-rate 10]
                    [--command-delay-steps 0] [--out DIR]

Two processes, as on a robot: the sim node (`oxygen-sim`, oxygen_ros.tools.sim.node) owns
sim time and publishes cameras, joint states, /clock and each episode's instruction; the
real oxygen node is started as `oxygen-demo` starts it (`demo.start_node`: the params file,
use_sim_time, autostart, and `engine_mode` from --mode), and its ~/joint_trajectory is
what the sim executes. The sim holds the first episode until the node is active. With
`--policy expert` no node runs: the scripted expert drives through the same sim node and
executor, the reference the model is measured against. `--policy hold|random|blind` runs
a baseline the same way (`oxygen_core.sim.baselines`, its chunks at the params file's
execute and action horizons): the floors the model's figure is read against.

This process records, on sim time, the node's outputs, the sim's /sim topics and its joint
states into DIR/output_bag (tools.live.OutputRecorder, tools.bagio; the joint states let
`oxygen-limit-check` measure start jumps) and keeps base camera frames of
the first episode of each family for the animation. At the end it writes (tools.sim.report)
report.json, report.md, episodes.png, timeline.png (the node's, as oxygen-replay draws
it) and episodes.gif (tools.sim.animation). The node's action Hz and tokens/s are
tools.report's, computed over the whole run.

`run_sim_eval(SimEvalSpec, out)` is the whole run as a function: the command line is one
caller, oxygen-eval's sim tasks (tools.eval.tasks) the other, so a task is exactly this
run. A spec may set any node parameter (overrides, as `-p name:=value`; --mode is
engine_mode) and a ROS_DOMAIN_ID for the sim, the node and this process's recorder, so
that concurrent runs on one machine do not see each other's topics.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image

from oxygen_core.config import model_preset
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.seeds import DEV
from oxygen_core.sim.tasks import FAMILIES, TIME_LIMITS
from oxygen_ros import topics
from oxygen_ros.convert import image_to_rgb, msgtype, stamp_to_ns
from oxygen_ros.params import Settings
from oxygen_ros.ros_args import parameter_args
from oxygen_ros.tools import child_processes
from oxygen_ros.tools.bagio import BagMessage, BagWriter
from oxygen_ros.tools.configure import TopicNames, load_settings
from oxygen_ros.tools.live import OutputRecorder, wait_until
from oxygen_ros.tools.node_process import start_node, stop_node
from oxygen_ros.tools.replay_job import OUTPUT_BAG, OutputSink
from oxygen_ros.tools.sim import report as sim_report
from oxygen_ros.tools.sim.loop import SIM_DRIVEN, episode_order
from oxygen_ros.tools.sim.messages import SIM_TOPICS
from oxygen_ros.tools.sim.record import families_arg
from oxygen_ros.tools.sim_host import QOS

ROOT = Path(__file__).resolve().parents[3]  # oxygen_ros/tools/sim/evaluate.py
SIM_PARAMS = ROOT / "config" / "sim.yaml"
_STATUS_PERIOD_S = 5.0
_RECORDED_SIM_KEYS = ("episode", "narration", "memory", "joint_states")
POLICIES = ("model", *SIM_DRIVEN)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-sim-eval", description=__doc__.split("\n\n")[0].strip()
    )
    parser.add_argument("--params", type=Path, default=SIM_PARAMS, help="node params YAML")
    parser.add_argument("--policy", choices=POLICIES, default="model")
    parser.add_argument("--mode", choices=("oxygen", "shared", "isolated"), default="oxygen")
    parser.add_argument("--families", type=families_arg, default=FAMILIES)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per family")
    parser.add_argument(
        "--seed",
        type=int,
        default=DEV.start,
        help="first seed (default: the dev range's first, oxygen_core.sim.seeds)",
    )
    parser.add_argument(
        "--rtf", type=float, default=None, help="real-time factor (default 0.5; no model: 2)"
    )
    parser.add_argument("--camera-size", type=int, default=224)
    parser.add_argument("--camera-rate", type=float, default=10.0, help="Hz")
    parser.add_argument(
        "--command-delay-steps",
        type=int,
        default=0,
        help="control periods the sim holds each trajectory before executing it (latency)",
    )
    parser.add_argument("--gif-fps", type=float, default=5.0, help="animation frames/s")
    parser.add_argument(
        "--echo", action="store_true", help="print texts as they change and each outcome"
    )
    parser.add_argument("--out", type=Path, help="output folder (default out/sim/<time>)")
    parser.add_argument(
        "--wait-s", type=float, default=300.0, help="how long the node may take to activate"
    )
    return parser


class Collector:
    """What the report needs beyond the node's Recording: the sim's outcomes, the node's
    chunks and texts by stamp, the expert's lines, and base camera frames for the GIF.

    Its callbacks run on the recording executor's one thread; read it after that stops.
    With `echo`, each episode's outcome and every finished text that differs from its
    stream's last one go to it as lines while the run goes.
    """

    def __init__(
        self,
        names: TopicNames,
        gif_episodes: int,
        gif_period_ns: int,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self._names = names
        self._echo = echo
        self._said: dict[str, str] = {}  # the last finished text echoed per stream
        self._chunk_topic = names.output(topics.ACTION_CHUNK)
        # on the node's steady timer: it keeps coming after the sim's clock stops
        self.diagnostics_topic = names.output(topics.DIAGNOSTICS)
        self._tokens = set(names.per_stream(topics.TOKENS).values())
        self._sim = {t.key: t.topic for t in SIM_TOPICS}
        self._gif_episodes = gif_episodes
        self.gif_period_ns = gif_period_ns
        self.outcomes: list[Any] = []
        self.chunks: list[tuple[int, bool]] = []  # (stamp, deadline_met)
        self.language: list[tuple[int, str, str, bool]] = []  # (stamp, stream, text, finished)
        self.expert: list[tuple[int, str, str]] = []  # (sim time, stream, line)
        self.frames: list[tuple[int, Any]] = []  # (stamp, RGB array)

    def on_output(self, message: BagMessage, msg: Any) -> None:
        topic = message.topic
        if topic == self._sim["episode"]:
            self.outcomes.append(msg)
            self._say(outcome_line(msg))
            self._said.clear()
        elif topic == self._chunk_topic:
            self.chunks.append((stamp_to_ns(msg.header.stamp), msg.deadline_met))
        elif topic in self._tokens:
            stamp = stamp_to_ns(msg.header.stamp)
            self.language.append((stamp, msg.stream, msg.text, msg.finished))
            if msg.finished and msg.text.strip() and self._said.get(msg.stream) != msg.text:
                self._said[msg.stream] = msg.text
                self._say(f"  {msg.stream}: {msg.text}")
        elif topic in (self._sim["narration"], self._sim["memory"]):
            stream = "narration" if topic == self._sim["narration"] else "memory"
            self.expert.append((message.time_ns, stream, msg.data))

    def _say(self, line: str) -> None:
        if self._echo is not None:
            self._echo(line)

    def on_frame(self, msg: Image) -> None:
        """A base camera frame: kept at the GIF's rate while the GIF's episodes run."""
        if len(self.outcomes) >= self._gif_episodes:
            return
        stamp = stamp_to_ns(msg.header.stamp)
        if self.frames and stamp - self.frames[-1][0] < self.gif_period_ns:
            return
        self.frames.append((stamp, image_to_rgb(msg)))


def outcome_line(msg: Any) -> str:
    """One line for an EpisodeOutcome: which task, and how it ended."""
    how = (
        f"succeeded in {msg.duration_s:.1f} s"
        if msg.success
        else f"failed (time limit {msg.time_limit_s:.0f} s)"
    )
    which = f"episode {msg.index + 1}/{msg.episodes} {msg.family} seed {msg.seed}"
    return f"{which}: {msg.instruction!r} {how}"


@contextlib.contextmanager
def _recording(
    topics_to_record: Mapping[str, str],
    camera: str,
    writer: BagWriter,
    collector: Collector,
    domain_id: int | None,
) -> Iterator[tuple[OutputRecorder, OutputSink]]:
    """The recorder and a camera grabber on one executor thread, in their own context
    (on `domain_id`, default ROS_DOMAIN_ID's)."""
    context = Context()
    rclpy.init(args=[], context=context, domain_id=domain_id)
    executor = SingleThreadedExecutor(context=context)
    sink = OutputSink(writer)

    def record(message: BagMessage) -> None:
        collector.on_output(message, sink.raw(message))

    recorder = OutputRecorder(
        topics_to_record, record, context=context, periodic=(collector.diagnostics_topic,)
    )
    grabber = Node(
        "oxygen_sim_eval_camera",
        context=context,
        start_parameter_services=False,
        parameter_overrides=[Parameter("use_sim_time", value=True)],
    )
    grabber.create_subscription(Image, camera, collector.on_frame, QOS)
    for node in (recorder, grabber):
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name="oxygen-sim-eval", daemon=True)
    spinner.start()
    try:
        yield recorder, sink
    finally:
        executor.shutdown()
        spinner.join()
        for node in (recorder, grabber):
            node.destroy_node()
        rclpy.shutdown(context=context)


def start_sim(
    parameters: Mapping[str, object], log: Any, env: Mapping[str, str] | None = None
) -> subprocess.Popen:
    """`oxygen-sim` as its own process with these parameters; it gets SIGTERM if this
    process dies first (tools.child_processes)."""
    command = [sys.executable, "-m", "oxygen_ros.tools.sim.node", "--ros-args"]
    command += parameter_args(parameters)
    return child_processes.popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


@dataclasses.dataclass(frozen=True)
class SimEvalSpec:
    """One oxygen-sim-eval run: the command line's options as data (also oxygen-eval's
    sim tasks, which call `run_sim_eval` in their worker process)."""

    params: Path = SIM_PARAMS
    policy: str = "model"  # or one the sim runs itself (SIM_DRIVEN): no node runs
    overrides: Mapping[str, object] = dataclasses.field(default_factory=dict)  # node -p's
    families: tuple[str, ...] = FAMILIES
    episodes: int = 2  # per family
    seed: int = DEV.start  # the first seed: the dev range's (oxygen_core.sim.seeds)
    rtf: float | None = None  # None: 0.5 for the model, 2 for a policy the sim runs
    camera_size: int = 224
    camera_rate: float = 10.0
    command_delay_steps: int = 0  # the sim's trajectory latency in control periods
    gif_fps: float = 5.0
    echo: bool = False  # print the node's texts as they change and each episode's outcome
    wait_s: float = 300.0  # how long the node may take to activate
    domain_id: int | None = None  # ROS_DOMAIN_ID of the sim, the node and the recorder

    @property
    def real_time_factor(self) -> float:
        return self.rtf or (0.5 if self.policy == "model" else 2.0)


def sim_parameters(spec: SimEvalSpec, names: TopicNames, settings: Settings) -> dict:
    """The sim node's parameters: the node's topics, control rate and horizons (a
    baseline's chunks), the run's episodes."""
    cameras = dict(zip(("base_camera_topic", "wrist_camera_topic"), names.cameras, strict=False))
    node = settings.node
    return {
        "families": list(spec.families),
        "seed": spec.seed,
        "episodes": spec.episodes,
        "policy": "external" if spec.policy == "model" else spec.policy,
        "baseline_execute_steps": node.execute_horizon,
        "baseline_horizon": node.action_horizon or model_preset(node.preset).action_horizon,
        "control_rate_hz": float(node.control_rate_hz),
        "real_time_factor": float(spec.real_time_factor),
        "camera_size": spec.camera_size,
        "camera_rate_hz": float(spec.camera_rate),
        "command_delay_steps": spec.command_delay_steps,
        "joint_state_topic": names.joint_state,
        "instruction_topic": names.instruction,
        "trajectory_topic": names.output(topics.JOINT_TRAJECTORY) or "",
        "wait_for_peers_s": float(spec.wait_s),
        **cameras,
    }


def check_params(names: TopicNames, joint_names: Sequence[str], trajectory: bool) -> None:
    """The node's params must fit the sim (one-line ValueError otherwise)."""
    if tuple(joint_names) != JOINT_NAMES:
        raise ValueError(f"joint_names must be the sim's {list(JOINT_NAMES)}: {joint_names}")
    if not 1 <= len(names.cameras) <= 2:
        raise ValueError(f"the sim has 2 cameras (base, wrist); params list {names.cameras}")
    if not trajectory:
        raise ValueError("joint_trajectory must be true: the sim executes ~/joint_trajectory")


def load_checked(params: Path, overrides: Mapping[str, object]) -> tuple[Settings, TopicNames]:
    """The node's settings and topics, checked against the sim (one-line ValueError)."""
    settings, names = load_settings(params, overrides)
    check_params(names, settings.node.joint_names, settings.node.joint_trajectory)
    return settings, names


def run_sim_eval(spec: SimEvalSpec, out: Path) -> dict[str, Path]:
    """Run the episodes into `out`; the report's files by kind (sim_report.write).

    Raises FileExistsError (an output bag in `out`), ValueError (params or spec that do
    not fit the sim), TimeoutError or RuntimeError (the node or the sim failed)."""
    if (out / OUTPUT_BAG).exists():
        raise FileExistsError(f"{out / OUTPUT_BAG} exists: choose a new --out folder")
    settings, names = load_checked(spec.params, spec.overrides)
    if spec.policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {spec.policy!r}")
    if spec.episodes < 1 or spec.real_time_factor <= 0:
        raise ValueError("--episodes must be >= 1 and --rtf > 0")
    out.mkdir(parents=True, exist_ok=True)
    rtf = spec.real_time_factor
    order = episode_order(spec.families, spec.seed, spec.episodes)
    sim_params = sim_parameters(spec, names, settings)
    record = {t.topic: msgtype(t.msg_class) for t in SIM_TOPICS if t.key in _RECORDED_SIM_KEYS}
    if spec.policy == "model":
        record.update(names.outputs())
    echo = print if spec.echo else None
    collector = Collector(names, len(spec.families), round(1e9 / spec.gif_fps), echo)
    env = None if spec.domain_id is None else {**os.environ, "ROS_DOMAIN_ID": str(spec.domain_id)}
    begin = time.monotonic()
    with (
        BagWriter(out / OUTPUT_BAG) as writer,
        _recording(record, names.cameras[0], writer, collector, spec.domain_id) as (
            recorder,
            sink,
        ),
        open(out / "node.log", "wb") as node_log,
        open(out / "sim.log", "wb") as sim_log,
    ):
        started: list[subprocess.Popen] = []  # stopped whatever fails, the sim first
        try:
            node = None
            if spec.policy == "model":
                node = start_node(spec.params, node_log, spec.overrides, env)
                started.append(node)
            sim = start_sim(sim_params, sim_log, env)
            started.append(sim)
            print(f"{len(order)} episodes ({', '.join(spec.families)} x {spec.episodes}), "
                  f"policy {spec.policy}, real-time factor {rtf:g}; logs in {out}")  # fmt: skip
            _wait_for_episodes(sim, node, collector, len(order), spec, out)
            if node is not None:
                period = settings.node.frame_period_s
                recorder.wait_quiet(quiet_s=max(1.0, 3 * period), timeout_s=60.0)
        finally:
            for process in reversed(started):
                stop_node(process)
    run = sim_report.RunSetup(
        policy=spec.policy,
        mode=settings.engine.engine_mode,
        params=str(spec.params),
        families=tuple(spec.families),
        seeds=tuple(range(spec.seed, spec.seed + spec.episodes)),
        rtf=rtf,
        camera_size=spec.camera_size,
        wall_s=time.monotonic() - begin,
    )
    return sim_report.write(out, run, collector, sink.recording, settings, names)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-sim-eval`."""
    args = _parser().parse_args(argv)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    spec = SimEvalSpec(
        params=args.params,
        policy=args.policy,
        overrides={"engine_mode": args.mode},
        families=tuple(args.families),
        episodes=args.episodes,
        seed=args.seed,
        rtf=args.rtf,
        camera_size=args.camera_size,
        camera_rate=args.camera_rate,
        command_delay_steps=args.command_delay_steps,
        gif_fps=args.gif_fps,
        echo=args.echo,
        wait_s=args.wait_s,
    )
    try:
        paths = run_sim_eval(spec, args.out or ROOT / "out" / "sim" / stamp)
    except (OSError, ValueError, TimeoutError, RuntimeError) as error:
        print(f"oxygen-sim-eval: {error}", file=sys.stderr)
        return 1
    print(sim_report.headline(paths))
    return 0


def _wait_for_episodes(
    sim: subprocess.Popen,
    node: subprocess.Popen | None,
    collector: Collector,
    episodes: int,
    spec: SimEvalSpec,
    out: Path,
) -> None:
    """Until every outcome is in and the sim exited; a status line every few seconds."""
    sim_seconds = sum(TIME_LIMITS[f] for f in spec.families) * spec.episodes
    timeout_s = spec.wait_s + sim_seconds / spec.real_time_factor + 60.0
    last = [time.monotonic()]

    def done() -> bool:
        if node is not None and node.poll() is not None:
            raise RuntimeError(f"the oxygen node exited; see {out / 'node.log'}")
        if sim.poll() is not None and len(collector.outcomes) < episodes:
            with contextlib.suppress(TimeoutError):  # the last outcomes may be in flight
                wait_until(lambda: len(collector.outcomes) >= episodes, 5.0, "outcomes")
            if len(collector.outcomes) < episodes:
                raise RuntimeError(
                    f"the sim exited after {len(collector.outcomes)} of {episodes} episodes; "
                    f"see {out / 'sim.log'}"
                )
        if time.monotonic() - last[0] > _STATUS_PERIOD_S:
            last[0] = time.monotonic()
            wins = sum(o.success for o in collector.outcomes)
            print(f"  {len(collector.outcomes)}/{episodes} episodes, {wins} succeeded")
        return sim.poll() is not None and len(collector.outcomes) >= episodes

    wait_until(done, timeout_s, f"{episodes} episodes")


if __name__ == "__main__":
    raise SystemExit(main())
