"""`oxygen-record --world metaworld`: Meta-World's scripted experts written into a rosbag2 (mcap),
the training data of `oxygen-train --bags OUT --params config/metaworld.yaml`.

    oxygen-record --world metaworld OUT [--tasks reach-v3,push-v3] [--episodes 1] [--first-seed 0]
                            [--camera-size 224] [--camera-rate 20] [--noise 0.5]

Meta-World's loop (`metaworld_loop.MetaWorldLoop`, policy expert) runs as fast as the CPU
allows and every message it would publish goes into the bag at its sim time, through the
BagPort oxygen-record writes the tabletop's bags with: no DDS, no pacing, and the same
messages for the same arguments (but the wall times in the outcomes). The bag holds the
loop's TOPICS less /clock:

    /metaworld/corner2/image_raw     sensor_msgs/Image rgb8 (camera_rate_hz)
    /metaworld/state                 sensor_msgs/JointState [ee_x, ee_y, ee_z, gripper]
    /metaworld/joint_states          sensor_msgs/JointState (the Sawyer's joints)
    /oxygen/instruction              std_msgs/String
    /metaworld/expert/action_chunk   oxygen_ros/ActionChunk, one row: the clean action
    /metaworld/narration, /memory    std_msgs/String (the task's phases: language targets)
    /metaworld/episode               std_msgs/String, the outcome as JSON

Training reads it as the node reads its robot (config/metaworld.yaml's topics and
`training:` block): images and state through the node's FrameAssembler, the chunk target
from the expert's chunks, the language targets from the phase lines. So a policy learns
from the images and prompt the node will give it, not from a copy of that path.

Noise (DART, as the tabletop's trainer injects it, `records.Dart`): the env runs the
expert's action plus bursts of a constant offset on dx, dy, dz (not the gripper: a dropped
object is a failed episode, not a recovery lesson), clipped to [-1, 1], while the
recorded chunk stays the clean action, so the data labels the way back from states the
expert alone never visits. Each episode draws its own stream (task and seed). `--noise 0`
records the clean expert. An episode the noise makes fail is recorded with its failed
outcome and left out by training. The default bursts: a start chance of 0.04 per step, 4
to 12 steps, sigma 0.5 (half a centimetre per step); on MT10's seeds 0-3 the expert
succeeded in 39 of 40 episodes with them (40 clean), in 97 steps on average (71 clean).

Seeds are Meta-World's own task sampling (`MT1(task, seed)`); seeds reaching into the
evaluation ranges of oxygen_core.sim.seeds (dev 400000-400999, test 500000-500999) are
refused, as training must never see the scenes a policy is chosen or reported on.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_core.sim.seeds import check_not_evaluation
from oxygen_core.train.records import Dart
from oxygen_ros.tools.bagio import BagWriter
from oxygen_ros.tools.metaworld_loop import TOPICS, LoopConfig, MetaWorldLoop, episode_order
from oxygen_ros.tools.metaworld_sim import outcome_line
from oxygen_ros.tools.sim.record import BagPort

PROG = "oxygen-record --world metaworld"
NOISE = Dart(rate=0.04, steps=(4, 12), sigma=0.5, columns=3)  # dx, dy, dz: not the gripper


@dataclasses.dataclass(frozen=True)
class Recording:
    """What a recording wrote: messages per topic, the outcomes, its wall time."""

    counts: dict[str, int]
    outcomes: list[dict]
    ticks: int
    wall_s: float


def record(out: Path, cfg: LoopConfig) -> Recording:
    """Every episode of `cfg` (the expert's) into a new bag at `out`."""
    if cfg.policy != "expert":
        raise ValueError("a recording runs the expert policy")
    begin = time.perf_counter()
    with BagWriter(out) as writer:
        port = BagPort(writer, TOPICS)
        loop = MetaWorldLoop(cfg, port)
        try:
            while loop.tick():
                pass
        finally:
            loop.close()
    return Recording(port.counts, loop.outcomes, loop.ticks, time.perf_counter() - begin)


def loop_config(
    tasks: Sequence[str],
    episodes: int,
    seed: int,
    camera_size: int = 224,
    camera_rate_hz: float = 20.0,
    sigma: float = NOISE.sigma,
) -> LoopConfig:
    """The recording's run: `episodes` seeds from `seed` per task, the noise of `sigma` (0:
    none). ValueError in one line for seeds an evaluation uses, or a bad value."""
    if episodes < 1 or seed < 0:
        raise ValueError(
            f"--episodes must be 1 or more and --first-seed 0 or more: {episodes}, {seed}"
        )
    if sigma < 0:
        raise ValueError(f"--noise must be 0 or more, got {sigma}")
    check_not_evaluation(range(seed, seed + episodes), "training seeds")
    return LoopConfig(
        episodes=episode_order(tuple(tasks), seed, episodes),
        policy="expert",
        camera_rate_hz=camera_rate_hz,
        camera_size=camera_size,
        noise=dataclasses.replace(NOISE, sigma=sigma) if sigma > 0 else None,
    )


def tasks_arg(text: str) -> tuple[str, ...]:
    """ "reach-v3,push-v3" -> ("reach-v3", "push-v3"), every name checked."""
    tasks = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in tasks if t not in MT10_TASKS]
    if unknown or not tasks:
        raise argparse.ArgumentTypeError(f"tasks must be some of {MT10_TASKS}, got {text!r}")
    return tasks


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("out", type=Path, help="bag folder to create (must not exist)")
    parser.add_argument("--tasks", type=tasks_arg, default=MT10_TASKS, help="default: MT10")
    parser.add_argument("--episodes", type=int, default=1, help="episodes per task")
    parser.add_argument("--first-seed", type=int, default=0, help="of every task")
    parser.add_argument("--camera-size", type=int, default=224)
    parser.add_argument("--camera-rate", type=float, default=20.0, help="Hz (80 / a whole number)")
    parser.add_argument(
        "--noise",
        type=float,
        default=NOISE.sigma,
        help=f"sigma of the DART bursts on dx, dy, dz (default {NOISE.sigma}; 0: no noise)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-record --world metaworld`."""
    args = _parser().parse_args(argv)
    if args.out.exists():
        print(f"{PROG}: {args.out} exists: choose a new folder", file=sys.stderr)
        return 1
    try:
        cfg = loop_config(
            args.tasks,
            args.episodes,
            args.first_seed,
            args.camera_size,
            args.camera_rate,
            args.noise,
        )
    except ValueError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    done = record(args.out, cfg)
    for outcome in done.outcomes:
        print(outcome_line(outcome))
    print(summary(done, args.out))
    return 0


def summary(done: Recording, out: Path) -> str:
    """Successes, messages per topic and the speed: control steps and camera frames per
    wall second (Meta-World's reset, about 1 s an episode, included)."""
    ok = sum(o["success"] for o in done.outcomes)
    frames = sum(o["renders"] for o in done.outcomes)
    lines = [
        f"{ok}/{len(done.outcomes)} episodes succeeded; {done.ticks} control steps and "
        f"{frames} camera frames in {done.wall_s:.1f} s ({done.ticks / done.wall_s:.0f} "
        f"steps/s, {frames / done.wall_s:.1f} frames/s); "
        f"wrote {sum(done.counts.values())} messages to {out}:",
        *(f"  {topic}: {count}" for topic, count in done.counts.items()),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
