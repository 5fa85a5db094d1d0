"""One closed-loop evaluation run, shared by `oxygen-eval node` (the tabletop) and
`oxygen-eval node --world metaworld` (Meta-World): the world's sim node and the real oxygen node as
processes, this process recording their topics, the wait for every episode's outcome,
and the report parts both worlds take from the node's outputs.

A `World` names the sim node to run and says how its episode outcomes read (the tabletop
publishes oxygen_ros/EpisodeOutcome, Meta-World JSON on a String); the rest is the same
for both, so it is written once: the node is started as oxygen-demo starts it
(tools.node_process: the params file, use_sim_time, autostart, the overrides), the sim
holds its first episode until the node is active (its wait_for_peers_s), the recorder
writes the node's outputs and the sim's topics on sim time into DIR/output_bag
(tools.live.OutputRecorder) while a `Collector` keeps what the report needs, and the run
ends once every outcome is in and the sim has exited, or with a one-line error when the
node or the sim dies first. Both processes end with this one (tools.child_processes) and
run on the run's ROS_DOMAIN_ID when it has one, so that concurrent runs (oxygen-eval manifest's
workers) do not see each other's topics.
"""

from __future__ import annotations

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
from typing import Any, TypeVar

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image

from oxygen_core.sim.success import SuccessRate
from oxygen_ros import topics
from oxygen_ros.convert import image_to_rgb, stamp_to_ns
from oxygen_ros.params import Settings
from oxygen_ros.ros_args import parameter_args
from oxygen_ros.tools import child_processes
from oxygen_ros.tools.bagio import BagMessage, BagWriter
from oxygen_ros.tools.commands import WORLD_FLAG
from oxygen_ros.tools.configure import TopicNames
from oxygen_ros.tools.live import OutputRecorder, node_counts, wait_until
from oxygen_ros.tools.node_process import start_node, stop_node
from oxygen_ros.tools.replay_job import OUTPUT_BAG, OutputSink
from oxygen_ros.tools.report import Recording, RunInfo, build_report, warmup_frames
from oxygen_ros.tools.sim_host import QOS

_STATUS_PERIOD_S = 5.0
SIM_NODE = "oxygen_ros.tools.sim.node"  # every world's sim host


@dataclasses.dataclass(frozen=True)
class World:
    """A simulated robot as an evaluation runs it."""

    name: str  # its sim node: `python -m oxygen_ros.tools.sim.node --world name --ros-args`
    topics: Mapping[str, str]  # its topic table, key -> topic (episode, narration, memory)
    outcome: Callable[[Any], Any]  # an `episode` message -> the outcome the report reads
    success: Callable[[Any], bool]  # whether an outcome is a success
    line: Callable[[Any], str]  # an outcome in one line (--echo)
    index: Callable[[Any], int]  # an outcome's number in its sim's run, from 0


class Collector:
    """What a report needs beyond the node's Recording: the sim's outcomes, the node's
    chunks and texts by stamp, the sim's own narration and memory lines, and camera frames
    for an animation.

    Its callbacks run on the recording executor's one thread; read it after that stops.
    With `echo`, each episode's outcome and every finished text that differs from its
    stream's last one go to it as lines while the run goes.
    """

    def __init__(
        self,
        names: TopicNames,
        world: World,
        gif_episodes: int = 0,
        gif_period_ns: int = 200_000_000,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self._names = names
        self._world = world
        self._echo = echo
        self._said: dict[str, str] = {}  # the last finished text echoed per stream
        self._chunk_topic = names.output(topics.ACTION_CHUNK)
        # on the node's steady timer: it keeps coming after the sim's clock stops
        self.diagnostics_topic = names.output(topics.DIAGNOSTICS)
        self._tokens = set(names.per_stream(topics.TOKENS).values())
        self._sim = world.topics
        self._gif_episodes = gif_episodes
        self.gif_period_ns = gif_period_ns
        self.outcomes: list[Any] = []
        # Outcomes out of this run's order: another sim on the same ROS domain publishes
        # its episodes there too, and they must not count as this run's.
        self.foreign = 0
        self.chunks: list[tuple[int, bool]] = []  # (stamp, deadline_met)
        self.language: list[tuple[int, str, str, bool]] = []  # (stamp, stream, text, finished)
        self.expert: list[tuple[int, str, str]] = []  # (sim time, stream, line)
        self.frames: list[tuple[int, Any]] = []  # (stamp, RGB array)

    def successes(self) -> int:
        return sum(self._world.success(o) for o in self.outcomes)

    def on_output(self, message: BagMessage, msg: Any) -> None:
        topic = message.topic
        if topic == self._sim["episode"]:
            outcome = self._world.outcome(msg)
            if self._world.index(outcome) != len(self.outcomes):
                self.foreign += 1
                return
            self.outcomes.append(outcome)
            self._say(self._world.line(outcome))
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
        """A camera frame: kept at the GIF's rate while the GIF's episodes run."""
        if len(self.outcomes) >= self._gif_episodes:
            return
        stamp = stamp_to_ns(msg.header.stamp)
        if self.frames and stamp - self.frames[-1][0] < self.gif_period_ns:
            return
        self.frames.append((stamp, image_to_rgb(msg)))


@dataclasses.dataclass(frozen=True)
class ClosedLoopRun:
    """The processes of one run and what this process records of them."""

    world: World
    world_parameters: Mapping[str, object]  # the sim node's -p's
    params: Path  # the oxygen node's params file
    overrides: Mapping[str, object]  # the node's -p's after it
    model: bool  # whether the node runs (False: the sim drives itself, no node)
    record: Mapping[str, str]  # topic -> message type, into the output bag
    episodes: int  # outcomes to wait for
    timeout_s: float  # for all of them, the node's start-up included
    quiet_s: float  # how long the node's outputs must pause before the recording ends
    domain_id: int | None = None  # ROS_DOMAIN_ID of the sim, the node and the recorder
    camera: str | None = None  # a camera whose frames go to Collector.on_frame


def policy_switch(names: TopicNames, model: bool) -> dict[str, str]:
    """The sim's `policy_enable_service`, for every world: the node's ~/enable when the node
    drives, so that the sim switches it off before each reset and on once the new world's
    sensors have gone out (no chunk computed for one episode runs in the next, and the
    first chunk of an episode hands over from nothing); none for a policy the sim runs."""
    return {"policy_enable_service": names.enable if model else ""}


def run_episodes(run: ClosedLoopRun, collector: Collector, out: Path) -> Recording:
    """Start the processes, record until every outcome is in, stop them (the sim first);
    the node's outputs as the report reads them. Logs: out/node.log, out/sim.log.

    Raises TimeoutError or RuntimeError (the node or the sim failed)."""
    env = None if run.domain_id is None else {**os.environ, "ROS_DOMAIN_ID": str(run.domain_id)}
    with (
        BagWriter(out / OUTPUT_BAG) as writer,
        recording(run.record, writer, collector, run.domain_id, run.camera) as (recorder, sink),
        open(out / "node.log", "wb") as node_log,
        open(out / "sim.log", "wb") as sim_log,
    ):
        started: list[subprocess.Popen] = []  # stopped whatever fails, the sim first
        try:
            node = None
            if run.model:
                node = start_node(run.params, node_log, run.overrides, env)
                started.append(node)
            sim = start_world(run.world.name, run.world_parameters, sim_log, env)
            started.append(sim)
            wait_for_episodes(sim, node, collector, run.episodes, run.timeout_s, out)
            if node is not None:
                recorder.wait_quiet(quiet_s=run.quiet_s, timeout_s=60.0)
        finally:
            for process in reversed(started):
                stop_node(process)
    return sink.recording


@contextlib.contextmanager
def recording(
    topics_to_record: Mapping[str, str],
    writer: BagWriter,
    collector: Collector,
    domain_id: int | None,
    camera: str | None = None,
) -> Iterator[tuple[OutputRecorder, OutputSink]]:
    """The recorder (and a camera grabber) on one executor thread, in their own context
    (on `domain_id`, default ROS_DOMAIN_ID's)."""
    context = Context()
    rclpy.init(args=[], context=context, domain_id=domain_id)
    executor = SingleThreadedExecutor(context=context)
    sink = OutputSink(writer)

    def record(message: BagMessage) -> None:
        collector.on_output(message, sink.raw(message))

    nodes: list[Node] = [
        OutputRecorder(
            topics_to_record, record, context=context, periodic=(collector.diagnostics_topic,)
        )
    ]
    if camera is not None:
        grabber = Node(
            "oxygen_sim_eval_camera",
            context=context,
            start_parameter_services=False,
            parameter_overrides=[Parameter("use_sim_time", value=True)],
        )
        grabber.create_subscription(Image, camera, collector.on_frame, QOS)
        nodes.append(grabber)
    for node in nodes:
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name="oxygen-closed-loop", daemon=True)
    spinner.start()
    try:
        yield nodes[0], sink
    finally:
        executor.shutdown()
        spinner.join()
        for node in nodes:
            node.destroy_node()
        rclpy.shutdown(context=context)


def start_world(
    world: str, parameters: Mapping[str, object], log: Any, env: Mapping[str, str] | None = None
) -> subprocess.Popen:
    """The sim node of `world` as its own process with these parameters; it gets SIGTERM if
    this process dies first (tools.child_processes)."""
    command = [sys.executable, "-m", SIM_NODE, WORLD_FLAG, world, "--ros-args"]
    command += parameter_args(parameters)
    return child_processes.popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def wait_for_episodes(
    sim: subprocess.Popen,
    node: subprocess.Popen | None,
    collector: Collector,
    episodes: int,
    timeout_s: float,
    out: Path,
) -> None:
    """Until every outcome is in and the sim exited; a status line every few seconds."""
    last = [time.monotonic()]

    def done() -> bool:
        if node is not None and node.poll() is not None:
            raise RuntimeError(f"the oxygen node exited; see {out / 'node.log'}")
        if collector.foreign:
            domain = os.environ.get("ROS_DOMAIN_ID", "0")
            raise RuntimeError(
                f"an episode outcome out of this run's order arrived: another simulator "
                f"publishes on ROS_DOMAIN_ID {domain}; give each evaluation its own domain"
            )
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
            print(f"  {len(collector.outcomes)}/{episodes} episodes, "
                  f"{collector.successes()} succeeded")  # fmt: skip
        return sim.poll() is not None and len(collector.outcomes) >= episodes

    wait_until(done, timeout_s, f"{episodes} episodes")


Paths = TypeVar("Paths")


def run_from_cli(
    prog: str,
    run: Callable[[Path], Paths],
    out: Path | None,
    default_root: Path,
    headline: Callable[[Paths], str],
) -> int:
    """A closed-loop tool's command line around its run into `out` (default: a time-named
    folder under `default_root`): the report's headline and 0, or one line saying why the
    run failed and 1. DDS stays on this machine whatever the shell exported."""
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        paths = run(out or default_root / stamp)
    except (OSError, ValueError, TimeoutError, RuntimeError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    print(headline(paths))
    return 0


# --------------------------------------------------------------------------- report parts


def success_entry(successes: int, episodes: int) -> dict[str, Any]:
    """Episodes, successes, the rate and its 95 % Wilson interval (None without
    episodes), as both reports and oxygen-eval manifest's aggregate read them."""
    rate = SuccessRate(successes, episodes)
    return {
        "episodes": episodes,
        "successes": successes,
        "rate": round(rate.rate, 4) if episodes else 0.0,
        "ci95": [round(end, 4) for end in rate.interval()] if episodes else None,
    }


def node_report(
    params: str,
    recording: Recording,
    settings: Settings,
    names: TopicNames,
    instructions: Sequence[tuple[int, str]],
    out: Path,
) -> dict[str, Any]:
    """The node's figures over the whole run (tools.report.build_report: the same code
    and definitions as oxygen-bag replay's); `instructions` are (sim time, text) per episode,
    the first one's time the timeline's origin."""
    info = RunInfo(
        source="sim",
        bag=str(out / OUTPUT_BAG),
        params=params,
        mode=settings.engine.engine_mode,
        seed=settings.engine.seed,
        frame_period_s=settings.node.frame_period_s,
        warmup_frames=warmup_frames(settings.engine),
        origin_ns=instructions[0][0] if instructions else 0,
        instructions=tuple(instructions),
    )
    return build_report(recording, info, node_counts(recording, names.node))


def node_figures(node: Mapping[str, Any]) -> dict[str, Any]:
    """The node's headline figures, which a closed-loop report.json carries at its top
    level (where oxygen-eval manifest's aggregate reads them)."""
    keys = ("action_hz", "lang_tps", "frames", "deadline_misses", "overruns", "skipped_frames")
    return {key: node[key] for key in keys}
