"""Offline evaluation: a recorded bag through the node's own frame, on the bag's clock.

    oxygen-bag replay BAG --params config/tiny.yaml --out DIR [--mode M] [--seed S]
                  [--rate R | --as-fast-as-possible] [--live]

The parameters, engine and frame assembler are the node's own (oxygen_ros.tools.configure),
and every frame is `frame.FrameLoop.run`, the node's frame function, with outputs that
go into a bag instead of onto topics. Messages are decoded by rclpy from the bag's CDR
bytes and handed to the node's own callbacks (oxygen_ros.router), in log-time order, a
message before a frame tick at the same time; ticks fall where the node's timer fires
(oxygen_ros.tools.replay_job). Frame time, latency and deadlines are measured on the steady
clock, as in the node. As fast as possible (the default) every tick runs; `--rate R` paces bag
time at R x wall time, and a tick that comes while the previous frame still runs is an
overrun, as the node's worker refuses it.

`--live` instead plays the bag onto ROS 2 topics with /clock for the real node started
with use_sim_time, records its outputs and reports them the same way (oxygen_ros.tools.live).

DIR gets `output_bag/` (mcap: every output topic of the node, /diagnostics included),
report.json, report.md, timeline.png (oxygen_ros.tools.report) and replay.log (why frames
were skipped).

Scored replay: unless `--no-score`, the run is scored against what the bag recorded the
robot was commanded and the reference texts it holds (oxygen_ros.tools.score_targets:
`--target`, `--text-target`, or found by type and name), into report.json's "score",
report.md, the terminal and score.png (oxygen_ros.tools.score_report). Offline the chunks
scored are the engine's own, kept by `ChunkTap` before the hand-over and the gate; `--live`
sees only what the node published.

A replay that cannot finish still leaves what it did. The output bag is written as closed
files of `--split-s` seconds each whose chunks reach the OS every 0.5 s (tools.bagio.
BagWriter), so SIGKILL loses at most the last chunk once `oxygen-bag recover` has rewritten
the unfinished file's complete chunks and the metadata a killed run could not write. SIGTERM
and SIGINT, and a corrupt input bag (BagReadError), end the frame loop where it is: the
bag is closed and report.json / report.md are written with `partial: true` and the reason,
and the command ends in one line saying why. A run with 0 frames exits 1, naming the skip
reasons (also in the report's warnings).
"""

from __future__ import annotations

import argparse
import heapq
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rclpy.exceptions import ParameterException
from rosbags.rosbag2 import ReaderError, WriterError
from tqdm import tqdm

from oxygen_core.clock import NS_PER_S
from oxygen_ros import topics
from oxygen_ros.diagnostics import DiagnosticsReporter, NodeStats
from oxygen_ros.frame import FrameLoop, Tick
from oxygen_ros.motion import MotionAuthority
from oxygen_ros.pipeline import Pipeline, make_pipeline, restart_pipeline
from oxygen_ros.router import InputRouter
from oxygen_ros.tools.bagio import (
    DEFAULT_SPLIT_S,
    BagMessage,
    BagReadError,
    BagWriter,
    from_cdr,
    read_bag,
)
from oxygen_ros.tools.chunk_tap import ChunkTap
from oxygen_ros.tools.configure import TopicNames
from oxygen_ros.tools.live import Pacer, replay_live
from oxygen_ros.tools.replay_job import OUTPUT_BAG, Job, OutputSink, period_ns, timer_grid
from oxygen_ros.tools.report import SCORE_PNG, Counts, build_report, no_frames, write_report
from oxygen_ros.tools.score_report import add_score, terminal_table
from oxygen_ros.tools.score_targets import ScoreSpec

_EXIT = {signal.SIGTERM: 143, signal.SIGINT: 130}  # 128 + the signal, as a shell reports it


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT: ends the run (see `_StopRequest` for where it is raised).

    A KeyboardInterrupt, so no `except Exception` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class _StopRequest:
    """The first SIGTERM or SIGINT of the process (the write-out is not interrupted).

    Outside the frame loop (loading the model, writing the report) the handler raises
    `Stopped` at once. Inside it the signal is only recorded, and the loop stops between
    two events: an exception raised at an arbitrary point would land inside JAX, rclpy or
    the bag writer, whose state it can break (a half-written storage file) or whose C code
    turns it into another error.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.in_loop = False

    def handle(self, signum: int, frame: Any) -> None:
        for handled in _EXIT:
            signal.signal(handled, signal.SIG_IGN)
        self.signum = signum
        if not self.in_loop:
            raise Stopped(signum)

    def check(self) -> None:
        """Raise `Stopped` if a signal came while the loop ran."""
        if self.signum is not None:
            raise Stopped(self.signum)


_STOP = _StopRequest()  # signals are per process: so is the request


# --------------------------------------------------------------------------- outputs


class BagOutputs:
    """The `OutputPort` of a replay: the node's table of outputs, into the output bag.

    publish() only queues the message with the tick's bag time; `flush` writes the queue
    once the frame is over, so serialising into the bag is not frame time."""

    def __init__(self, names: TopicNames, sink: OutputSink) -> None:
        self._topics = {t.key: t.topic for t in names.published}
        self.now_ns = 0  # bag time of the event being run
        self._sink = sink
        self._queue: list[tuple[str, int, Any]] = []

    def publish(self, name: str, msg: Any, stream: str | None = None) -> bool:
        self._queue.append((self._topics[(name, stream)], self.now_ns, msg))
        return True

    def flush(self) -> None:
        for topic, time_ns, msg in self._queue:
            self._sink.message(topic, time_ns, msg)
        self._queue.clear()


def _file_logger(path: Path) -> logging.Logger:
    """A logger into DIR/replay.log: the frame loop's warnings stay off the progress bar."""
    logger = logging.getLogger(f"oxygen.replay.{path}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger


class _FrameLog:
    """rclpy's logger call shape (throttle keyword) over a Python logger."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], int]) -> None:
        self._logger, self._clock = logger, clock

    def warning(self, message: str, **_throttle: object) -> None:
        self._logger.warning(f"[{self._clock() / NS_PER_S:.3f}] {message}")

    def error(self, message: str) -> None:
        self._logger.error(f"[{self._clock() / NS_PER_S:.3f}] {message}")

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)


# --------------------------------------------------------------------------- offline

_MESSAGE, _DIAGNOSTICS, _TICK = 0, 1, 2  # event order at equal times


class OfflineReplay:
    """One bag through one pipeline, on the bag clock; `run` returns the frame accounting."""

    def __init__(
        self, job: Job, pipeline: Pipeline, sink: OutputSink, rate: float | None = None
    ) -> None:
        """rate: bag seconds per wall second (None: as fast as possible, bag time standing
        still while a frame computes, so the hand-over's d is 0 whatever the machine)."""
        self.job, self.pipeline = job, pipeline
        cfg = pipeline.settings.node
        self.outputs = BagOutputs(job.names, sink)
        self.stats = NodeStats()
        self.log = _FrameLog(_file_logger(job.out / "replay.log"), lambda: self.outputs.now_ns)
        self._frame_s = (float("-inf"), float("-inf"))  # steady start and end of the last frame
        self.stopped = ""  # why the run ended before the bag did ("" when it did not)
        self.stop_signal: int | None = None
        # a scored run keeps the policy's chunks (before the hand-over and the gate)
        self.tap = None if job.targets is None else ChunkTap(pipeline.engine, self._now_ns)
        # No ~/enable or e-stop in a bag: the authority is live from the first frame.
        motion = MotionAuthority(self.outputs, self.stats, enabled=True)
        motion.activated()
        self.loop = FrameLoop(
            engine=pipeline.engine if self.tap is None else self.tap,
            assembler=pipeline.assembler,
            motion=motion,
            stats=self.stats,
            cfg=cfg,
            layout=pipeline.layout,
            gate=pipeline.gate,
            velocity_cap=pipeline.settings.velocity_cap,
            max_rejections=cfg.gate_max_rejections,
            logger=self.log,
            now_ns=self._now_ns,
            latency_scale=0.0 if rate is None else rate,
        )
        self.router = InputRouter(
            assembler=pipeline.assembler,
            request=self.loop.request,
            stats=self.stats,
            stream_names=cfg.stream_names,
            reporter=DiagnosticsReporter(job.names.node, cfg.frame_period_s),
            logger=self.log,
        )
        n = job.names
        # topic -> the node's callbacks for it (a topic may fill several camera slots)
        self.routes: dict[str, list[Callable[[Any], None]]] = {}
        for route in self.router.routes(n.cameras, n.joint_state, n.instruction, n.request):
            self.routes.setdefault(route.topic, []).append(route.callback)

    def _now_ns(self) -> int:
        return self.outputs.now_ns

    def run(self, rate: float | None, progress: bool, ticks: Sequence[int]) -> Counts:
        """Every message, diagnostics period and frame tick in bag-time order, until the
        bag ends, a signal stops the run or the input bag turns out corrupt."""
        bar = tqdm(total=len(ticks), unit="frame", desc="replay", disable=not progress)
        pacer = Pacer(rate, ticks[0])
        done = 0
        _STOP.in_loop = True
        try:
            for time_ns, kind, message in self._events(ticks):
                self.outputs.now_ns = time_ns
                if kind == _MESSAGE:
                    self._deliver(message)
                elif kind == _DIAGNOSTICS:
                    self._diagnostics(time_ns)
                else:
                    self._tick(time_ns, on_time=self._free_at(pacer.wait(time_ns)))
                    done += 1
                    bar.update()
                    bar.set_postfix_str(self._progress(), refresh=False)
                self.outputs.flush()
                _STOP.check()
        except Stopped as stop:
            self.stopped, self.stop_signal = (
                f"{stop} after {done} of {len(ticks)} ticks",
                stop.signum,
            )
        except BagReadError as error:
            self.stopped = f"{error}; stopped after {done} of {len(ticks)} ticks"
        finally:
            _STOP.in_loop = False
            self.outputs.flush()  # a frame cut short still leaves what it published
            bar.close()
            if self.stopped:
                self.log.error(self.stopped)
            self.log.close()
        return self._counts(done)

    def _events(self, ticks: Sequence[int]) -> Iterator[tuple[int, int, BagMessage | None]]:
        cfg = self.pipeline.settings.node
        diagnostics = timer_grid(self.job.span_ns(), period_ns(cfg.diagnostics_period_s))
        return heapq.merge(
            ((m.time_ns, _MESSAGE, m) for m in read_bag(self.job.bag, self.job.names.inputs())),
            ((t, _DIAGNOSTICS, None) for t in diagnostics),
            ((t, _TICK, None) for t in ticks),
            key=lambda event: event[:2],
        )

    def _deliver(self, message: BagMessage) -> None:
        """What the node's subscription callbacks do with the message."""
        msg = from_cdr(message.data, message.msgtype)
        for callback in self.routes[message.topic]:
            callback(msg)

    def _free_at(self, due_s: float | None) -> bool:
        """Whether the node's worker would take a tick due at `due_s`: not while the last
        frame ran across that time. (A tick the pacer itself is late for is no overrun:
        that lateness is the replay's, not the frame's.)"""
        started, ended = self._frame_s
        return due_s is None or not started < due_s < ended

    def _tick(self, time_ns: int, on_time: bool) -> None:
        if not on_time:  # the previous frame still runs: the node's worker refuses the tick
            self.stats.overrun()
            self.loop.overrun(time_ns)
            return
        start = time.monotonic()
        tick = Tick.at(time_ns, start, self.pipeline.settings.node.frame_period_s)
        try:
            self.loop.run(tick)
        except Exception as error:  # as the node's worker: count it, keep going
            self.stats.error()
            self.log.error(f"frame failed: {type(error).__name__}: {error}")
        finally:
            self._frame_s = (start, time.monotonic())

    def _diagnostics(self, time_ns: int) -> None:
        """The node's diagnostics timer: /diagnostics on the same period of the bag clock."""
        self.outputs.publish(topics.DIAGNOSTICS, self.router.report(time_ns))

    def _progress(self) -> str:
        s = self.stats.snapshot()
        skipped = sum(self.pipeline.assembler.skip_counts.values())
        return f"frames={s.frames} skipped={skipped} misses={s.deadline_misses}"

    def _counts(self, ticks: int) -> Counts:
        s = self.stats.snapshot()
        return Counts(
            skipped=dict(self.pipeline.assembler.skip_counts),
            deadline_misses=s.deadline_misses,
            overruns=s.overruns,
            errors=s.errors,
            ticks=ticks,
            stopped=self.stopped,
        )


def replay_offline(
    job: Job,
    *,
    rate: float | None = None,
    progress: bool = True,
    ticks: Sequence[int] | None = None,
    pipeline: Pipeline | None = None,
    split_s: float | None = DEFAULT_SPLIT_S,
) -> dict:
    """Replay the job's bag through a new pipeline; the report (also written to job.out).

    ticks: bag times of the frames, ascending; default the node's timer grid over the
    bag. Giving the stamps of a live run's frames recomputes exactly those frames.
    pipeline: one built earlier for the same settings, restarted here instead of
    compiling a new one (an evaluation worker replaying many bags); same report.
    split_s: seconds of wall time per output bag file (BagWriter; None: one file).
    A run stopped early still writes its report, marked partial (report["partial"]).
    """
    if pipeline is not None and pipeline.settings != job.settings:
        raise ValueError("the pipeline given was built for other settings than the job's")
    job.out.mkdir(parents=True, exist_ok=True)
    pipeline = make_pipeline(job.settings) if pipeline is None else restart_pipeline(pipeline)
    with BagWriter(job.out / OUTPUT_BAG, split_s=split_s) as writer:
        sink = OutputSink(writer)
        replay = OfflineReplay(job, pipeline, sink, rate)
        counts = replay.run(rate, progress, job.ticks() if ticks is None else ticks)
    info = job.info("offline")
    report = build_report(sink.recording, info, counts)
    report["stop_signal"] = replay.stop_signal
    if job.targets is not None:
        chunks, said = replay.tap.chunks, sink.recording.said
        add_score(report, chunks, said, job.targets, "policy", info.origin_ns, job.out / SCORE_PNG)
    write_report(report, job.out)
    return report


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-bag replay",
        description="Replay a rosbag2 (mcap or sqlite3) through the oxygen node's frame.",
    )
    parser.add_argument("bag", type=Path, help="rosbag2 folder")
    parser.add_argument("--params", type=Path, required=True, help="the node's params YAML")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--mode",
        choices=("oxygen", "shared", "isolated"),
        help="engine mode (default: the params' engine_mode)",
    )
    parser.add_argument("--seed", type=int, help="the engine's noise seed (default: the params')")
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument(
        "--rate",
        type=float,
        help="bag time per wall time (offline default: as fast as possible; --live default 1.0)",
    )
    pace.add_argument(
        "--as-fast-as-possible",
        action="store_true",
        help="offline: run every frame at once (the default)",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="publish the bag with /clock for a running node (use_sim_time) and record its outputs",
    )
    parser.add_argument(
        "--wait-s",
        type=float,
        default=120.0,
        help="--live: how long to wait for the node to become active",
    )
    parser.add_argument(
        "--split-s",
        type=float,
        default=DEFAULT_SPLIT_S,
        help="close an output bag file at the first write after this many wall seconds, so "
        "a killed run loses only what was written since (default "
        f"{DEFAULT_SPLIT_S:g}; 0: one file)",
    )
    parser.add_argument(
        "--target",
        help="score the chunks against this topic of the bag: what the robot was commanded "
        "(trajectory_msgs/JointTrajectory, or oxygen_ros/ActionChunk rows), or its next joint "
        "states (sensor_msgs/JointState); default: the bag's one JointTrajectory topic",
    )
    parser.add_argument(
        "--text-target",
        action="append",
        type=_stream_topic,
        metavar="STREAM=TOPIC",
        help="score a language stream's texts against this std_msgs/String topic of the bag "
        "(repeat per stream; default: the String topic whose last name is the stream's)",
    )
    parser.add_argument("--no-score", action="store_true", help="do not score (no targets read)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def _stream_topic(text: str) -> tuple[str, str]:
    """ "narration=/sim/expert/narration" -> ("narration", "/sim/expert/narration")."""
    stream, sep, topic = text.partition("=")
    if not (sep and stream.strip() and topic.strip()):
        raise argparse.ArgumentTypeError(f"expected STREAM=TOPIC, got {text!r}")
    return stream.strip(), topic.strip()


def _score_spec(args: argparse.Namespace) -> ScoreSpec | None:
    """What the command line says to score against (None: --no-score)."""
    if args.no_score:
        return None
    texts = None if args.text_target is None else dict(args.text_target)
    return ScoreSpec(target=args.target, texts=texts)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-bag replay`."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.live and (args.mode or args.seed is not None or args.as_fast_as_possible):
        parser.error(
            "--live plays to a running node: set its mode and seed as node parameters, "
            "and play at a --rate"
        )
    if not args.live:  # an offline replay talks to no one: keep its DDS participant local
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    # `kill`, a CI timeout and Ctrl-C: the frame loop stops between two events, the output bag is
    # closed and a partial report written (OfflineReplay.run).
    for signum in _EXIT:
        signal.signal(signum, _STOP.handle)
    split_s = args.split_s or None
    overrides = {"engine_mode": args.mode, "seed": args.seed}
    try:
        job = Job.load(
            args.bag,
            args.params,
            args.out,
            {k: v for k, v in overrides.items() if v is not None},
            score=_score_spec(args),
        )
        if args.live:
            print(
                f"waiting for the node: oxygen-node --ros-args --params-file {args.params} "
                "-p use_sim_time:=true -p autostart:=true",
                file=sys.stderr,
            )
            report = replay_live(
                job, rate=args.rate or 1.0, wait_s=args.wait_s, progress=not args.no_progress
            )
        else:
            report = replay_offline(
                job, rate=args.rate, progress=not args.no_progress, split_s=split_s
            )
    except (OSError, ValueError, TimeoutError, RuntimeError, ParameterException) as error:
        print(f"oxygen-bag replay: {error}", file=sys.stderr)
        return 1
    except (ReaderError, WriterError) as error:  # rosbags' own: a damaged bag, a full disk
        print(f"oxygen-bag replay: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except Stopped as stop:  # before the frame loop (loading) or after it (the report)
        print(f"oxygen-bag replay: {stop}; output in {args.out}", file=sys.stderr)
        return _EXIT[stop.signum]
    except KeyboardInterrupt:  # --live: the output bag was closed on the way out
        print(f"oxygen-bag replay: interrupted; partial output bag in {args.out}", file=sys.stderr)
        return 130
    return _outcome(report, args.out)


def _outcome(report: Mapping[str, Any], out: Path) -> int:
    """Print the summary, or the one line saying why the run is not whole; the exit code."""
    if report.get("partial"):
        print(
            f"oxygen-bag replay: partial: {report['partial_reason']}; "
            f"{report['frames']} frames kept in {out}",
            file=sys.stderr,
        )
        return _EXIT.get(report.get("stop_signal"), 1)
    if report["frames"] == 0:
        print(
            f"oxygen-bag replay: {no_frames(report['skipped_frames'])}; report: {out}",
            file=sys.stderr,
        )
        return 1
    print(summary(report, out))
    return 0


def summary(report: Mapping[str, Any], out: Path) -> str:
    """The headline numbers, the score table of a scored run, and where the files are."""
    skipped = sum(report["skipped_frames"].values())
    warnings = "".join(f"warning: {w}\n" for w in report["warnings"])
    score = f"{terminal_table(report['score'])}\n" if "score" in report else ""
    speed = f"actions {report['action_hz']:.1f} Hz, language {report['lang_tps']:.1f} tok/s"
    return (
        f"{warnings}{score}"
        f"{report['frames']} frames, {skipped} skipped, {report['deadline_misses']} deadline "
        f"misses; {speed}; "
        f"{report['requests_finished']}/{report['requests_started']} requests finished\n"
        f"report: {out / 'report.md'}  timeline: {out / 'timeline.png'}  "
        f"bag: {out / OUTPUT_BAG}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
