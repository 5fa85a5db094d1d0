"""The main job: the oxygen lifecycle node driving the sim, or fed from a bundled bag.

    make demo            # = .venv/bin/oxygen-demo --sim: the trained policy, closed loop
    .venv/bin/oxygen-demo [--bag data/demo_bag] [--params config/tiny.yaml] [--rate 2]

With --sim (or --world tabletop) the node runs the policy trained here
(data/policy/sim_demo) on the simulated tabletop, one held-out episode per task family;
with --world aloha the ALOHA policy trained here (data/policy/aloha_sim) on gym-aloha's
bimanual ALOHA at 50 Hz, one held-out episode per task. Both go through
`oxygen-eval node`: the terminal shows the node's narration and memory lines as they change
and each episode's outcome, then where the report is. Without either:

The real node (`python -m oxygen_ros.node`, the `oxygen-node` executable) starts as its
own process with config/tiny.yaml, `autostart` and `use_sim_time`, exactly as on a robot:
it configures (loads the model, compiles every shape) and activates itself. Once it has
subscribed to its inputs, data/demo_bag is played onto those topics with /clock at the
bag's pace (oxygen_ros.tools.live, in place of `ros2 bag play --clock`), and every output
topic is recorded. While it runs this prints, as the messages arrive, the frame rate,
deadline misses, batch size and the narration and memory texts; it ends with the
run's report and timeline (oxygen_ros.tools.report) in out/demo/<date-time>/.

The node gets its own process, as on the robot, so its frame loop and the player's
pacing do not share one interpreter lock. Everything stays on this host (DDS discovery
on localhost only).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim.seeds import DEV
from oxygen_ros import topics
from oxygen_ros.convert import stamp_to_ns
from oxygen_ros.tools import child_processes, commands
from oxygen_ros.tools.configure import TopicNames
from oxygen_ros.tools.live import replay_live
from oxygen_ros.tools.node_process import start_node, stop_node
from oxygen_ros.tools.package_share import resource
from oxygen_ros.tools.replay import summary
from oxygen_ros.tools.replay_job import Job

# share/oxygen_ros after `colcon build`, else the checkout (oxygen_ros.tools.package_share)
DEMO_BAG = resource("data/demo_bag")
DEMO_PARAMS = resource("config/tiny.yaml")


@dataclasses.dataclass(frozen=True)
class WorldDemo:
    """A world's closed-loop demo: `oxygen-eval node --world <world>` on the params of the
    policy trained here for it, at the camera size that policy was trained on."""

    params: Path
    camera_size: int
    first_seed: int  # held out from training
    what: str  # what the terminal is told runs


WORLD_DEMOS: Mapping[str, WorldDemo] = {
    commands.TABLETOP: WorldDemo(
        resource("config/sim_demo.yaml"),
        128,
        100_000,
        "drives the simulated arm, one held-out episode per task family",
    ),
    commands.ALOHA: WorldDemo(
        resource("config/aloha_sim.yaml"),
        64,
        DEV.start,
        "drives gym-aloha's two arms at 50 Hz, one held-out episode per task",
    ),
}
_STATUS_PERIOD_S = 1.0  # wall seconds between status lines


class Console:
    """Prints the node's outputs as they arrive (called on the recorder's thread).

    A status line per second: bag time, frames per second of wall time over the last
    second, the last frame's time against its budget, deadline misses, skipped frames,
    the language batch and k, and the newest unfinished text of each stream. Every
    finished text gets its own line.
    """

    def __init__(self, names: TopicNames, origin_ns: int, out: IO[str] = sys.stdout) -> None:
        self._names = names
        self._origin_ns = origin_ns
        self._out = out
        self._arrivals: collections.deque[float] = collections.deque()
        self._partial: dict[str, str] = {}
        self._last_status_s = 0.0
        self._lock = threading.Lock()

    def on_output(self, topic: str, msg: Any) -> None:
        with self._lock:
            if topic == self._names.output(topics.STATS):
                self._on_stats(msg)
            elif topic in self._names.per_stream(topics.TOKENS).values():
                self._on_tokens(msg)

    def _on_stats(self, msg: Any) -> None:
        now = time.monotonic()
        self._arrivals.append(now)
        while self._arrivals[0] < now - _STATUS_PERIOD_S:
            self._arrivals.popleft()
        if now - self._last_status_s < _STATUS_PERIOD_S:
            return
        self._last_status_s = now
        bag_s = (stamp_to_ns(msg.header.stamp) - self._origin_ns) / NS_PER_S
        streams = "  ".join(f"{s}: {text[-24:]!r}" for s, text in sorted(self._partial.items()))
        self._print(
            f"[bag {bag_s:5.1f} s] {len(self._arrivals) / _STATUS_PERIOD_S:4.1f} frames/s  "
            f"frame {1e3 * msg.frame_s:5.1f} ms of {1e3 * msg.budget_s:.0f}  "
            f"misses {msg.deadline_misses}  skipped {msg.skipped_frames}  "
            f"batch {msg.batch} k {msg.k}  {streams}"
        )

    def _on_tokens(self, msg: Any) -> None:
        if not msg.finished:
            self._partial[msg.stream] = msg.text
            return
        self._partial.pop(msg.stream, None)
        self._print(
            f"  {msg.stream} #{msg.request_id} finished ({msg.finish_reason}): {msg.text!r}"
        )

    def _print(self, line: str) -> None:
        print(line, file=self._out, flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-demo", description=__doc__.split("\n\n")[0].strip()
    )
    parser.add_argument("--bag", type=Path, default=DEMO_BAG, help="rosbag2 folder to play")
    parser.add_argument("--params", type=Path, default=DEMO_PARAMS, help="node params YAML")
    parser.add_argument("--out", type=Path, help="output folder (default out/demo/<time>)")
    parser.add_argument("--rate", type=float, default=1.0, help="playback speed")
    parser.add_argument(
        "--wait-s", type=float, default=300.0, help="how long the node may take to activate"
    )
    parser.add_argument(
        "--world",
        choices=sorted(WORLD_DEMOS),
        help="instead of a bag: the policy trained for this world closed loop in its sim, one "
        "episode per task",
    )
    parser.add_argument("--sim", action="store_true", help="--world tabletop")
    parser.add_argument(
        "--first-seed", type=int, help="--world: the episodes' (default: held out from training)"
    )
    parser.add_argument(
        "--foxglove",
        action="store_true",
        help="also serve the topics to Foxglove (oxygen-config foxglove)",
    )
    return parser


def start_foxglove(params: Path, log: IO[bytes]) -> subprocess.Popen:
    """oxygen-config foxglove as its own process, on its default port (the URL is printed)."""
    command = [sys.executable, "-m", "oxygen_ros.tools.foxglove", "--params", str(params)]
    return child_processes.popen(command, stdout=log, stderr=subprocess.STDOUT)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-demo`."""
    args = _parser().parse_args(argv)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # node and player share a host
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or Path("out") / "demo" / stamp
    world = commands.TABLETOP if args.sim and args.world is None else args.world
    if world is not None:
        return world_demo(world, args.first_seed, out, args.wait_s)
    try:
        job = Job.load(args.bag, args.params, out)
    except (OSError, ValueError) as error:
        print(f"oxygen-demo: {error}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    console = Console(job.names, job.ticks()[0])
    seconds = (job.span_ns()[1] - job.span_ns()[0]) / NS_PER_S
    with open(out / "node.log", "wb") as log:
        node = start_node(args.params, log)
        viewer = start_foxglove(args.params, log) if args.foxglove else None
        if viewer is not None:
            print(
                "Foxglove: open it in a browser, connect to ws://127.0.0.1:8765 and import "
                f"the layout config/viewers/{args.params.stem}.foxglove.json"
            )
        print(
            f"oxygen node starting (pid {node.pid}, log {out / 'node.log'}): it loads the "
            f"{job.settings.node.preset} model and compiles every shape before it activates"
        )
        print(f"then {args.bag} plays ({seconds:.1f} s at {args.rate:g}x) onto its topics")
        try:
            report = replay_live(
                job,
                rate=args.rate,
                wait_s=args.wait_s,
                alive=lambda: node.poll() is None,
                on_output=console.on_output,
                progress=False,
            )
        except (TimeoutError, RuntimeError) as error:
            print(f"oxygen-demo: {error}; see {out / 'node.log'}", file=sys.stderr)
            return 1
        finally:
            stop_node(node)
            if viewer is not None:
                stop_node(viewer)
    print(summary(report, out))
    return 0


def world_demo(world: str, seed: int | None, out: Path, wait_s: float) -> int:
    """The policy trained here in closed loop over ROS topics: `oxygen-eval node --world
    <world>` on its params with the texts and outcomes echoed; the run's report at the end."""
    demo = WORLD_DEMOS[world]
    print(
        f"the oxygen node {demo.what}, with the policy trained here ({demo.params}); "
        "it narrates and remembers as it goes"
    )
    first_seed = demo.first_seed if seed is None else seed
    argv = ["node", "--world", world, "--params", str(demo.params), "--episodes", "1",
            "--first-seed", str(first_seed), "--rtf", "1", "--camera-size", str(demo.camera_size),
            "--wait-s", str(wait_s), "--echo", "--out", str(out)]  # fmt: skip
    return commands.evaluate(argv) or 0


if __name__ == "__main__":
    raise SystemExit(main())
