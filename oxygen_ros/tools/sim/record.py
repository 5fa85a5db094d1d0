"""`oxygen-record`: scripted-expert episodes written straight into a rosbag2 (mcap).

    oxygen-record OUT [--families pick,put,push] [--episodes 1] [--first-seed 0]
                      [--camera-size 224] [--camera-rate 10] [--control-rate 20]

The sim's control loop (`loop.SimLoop` with the expert policy) runs as fast as the CPU
allows and every message it would publish goes into the bag at its sim time, built by the
same functions as the live sim node's: no DDS, no pacing, and the same bag for the same
arguments. The bag holds, per `messages.SIM_TOPICS` (without /clock: a player makes its own):

    /camera/base/image_raw, /camera/wrist/image_raw   sensor_msgs/Image rgb8
    /joint_states                                     sensor_msgs/JointState
    /oxygen/instruction                               std_msgs/String
    /sim/expert/joint_trajectory                      trajectory_msgs/JointTrajectory
    /sim/expert/narration, /sim/expert/memory         std_msgs/String (language targets)
    /sim/episode                                      oxygen_ros/EpisodeOutcome

so it serves `oxygen-bag replay BAG --params config/sim.yaml` (the node's inputs) and training
(observations, the commanded action per tick, narration and memory targets) alike.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.tasks import FAMILIES
from oxygen_ros.tools.bagio import BagWriter
from oxygen_ros.tools.sim.loop import SimConfig, SimLoop, episode_order
from oxygen_ros.tools.sim.messages import SIM_TOPICS
from oxygen_ros.tools.sim_host import SimTopic

NOT_RECORDED = ("clock",)


class BagPort:
    """The port of a recording, for either world's loop (`oxygen-record --world metaworld` uses it
    too): each message of `topics` (a world's table, less /clock) into the bag at its sim
    time."""

    def __init__(self, writer: BagWriter, topics: Sequence[SimTopic] = SIM_TOPICS) -> None:
        self._writer = writer
        self._topics = {t.key: t.topic for t in topics if t.key not in NOT_RECORDED}
        self.counts: dict[str, int] = dict.fromkeys(self._topics.values(), 0)

    def publish(self, key: str, msg: Any, time_ns: int) -> None:
        topic = self._topics.get(key)
        if topic is None:
            return
        self._writer.write_ros(topic, time_ns, msg)
        self.counts[topic] += 1


def record(out: Path, cfg: SimConfig) -> tuple[dict[str, int], list[Outcome]]:
    """Run every episode of `cfg` with the expert into a new bag; messages per topic and
    the episodes' outcomes."""
    if cfg.policy != "expert":
        raise ValueError("a recording runs the expert policy")
    with BagWriter(out) as writer:
        port = BagPort(writer)
        loop = SimLoop(cfg, port)
        while loop.tick():
            pass
    return port.counts, loop.outcomes


def families_arg(text: str) -> tuple[str, ...]:
    """ "pick,put" -> ("pick", "put"), every name checked."""
    families = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or not families:
        raise argparse.ArgumentTypeError(f"families must be some of {FAMILIES}, got {text!r}")
    return families


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-record", description=__doc__.split("\n\n")[0].strip()
    )
    parser.add_argument("out", type=Path, help="bag folder to create (must not exist)")
    parser.add_argument("--families", type=families_arg, default=FAMILIES)
    parser.add_argument("--episodes", type=int, default=1, help="episodes per family")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--camera-size", type=int, default=224)
    parser.add_argument("--camera-rate", type=float, default=10.0, help="Hz")
    parser.add_argument("--control-rate", type=float, default=20.0, help="Hz")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-record`."""
    args = _parser().parse_args(argv)
    if args.out.exists():
        print(f"oxygen-record: {args.out} exists: choose a new folder", file=sys.stderr)
        return 1
    try:
        cfg = SimConfig(
            episodes=episode_order(args.families, args.first_seed, args.episodes),
            policy="expert",
            control_rate_hz=args.control_rate,
            camera_rate_hz=args.camera_rate,
            camera_size=args.camera_size,
        )
    except ValueError as error:
        print(f"oxygen-record: {error}", file=sys.stderr)
        return 1
    counts, outcomes = record(args.out, cfg)
    for o in outcomes:
        result = f"success in {o.duration_s:.2f} s" if o.success else "failed"
        print(f"{o.family:5s} seed {o.seed}: {o.instruction!r}: {result}")
    print(f"wrote {sum(counts.values())} messages to {args.out}:")
    for topic, count in counts.items():
        print(f"  {topic}: {count}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
