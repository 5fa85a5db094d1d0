"""`oxygen-record [--world tabletop|metaworld|aloha]`: a world's scripted expert written
straight into a rosbag2 (mcap): the training data of `oxygen-train --bags` and the input of
`oxygen-bag replay`.

    oxygen-record OUT [--families pick,put,push] [--episodes 1] [--first-seed 0]
                      [--camera-size 224] [--camera-rate 10] [--control-rate 20]
    oxygen-record --world metaworld OUT [--tasks reach-v3,push-v3] [--episodes 1]
                      [--first-seed 0] [--camera-size 224] [--camera-rate 20] [--noise 0.5]
    oxygen-record --world aloha OUT [--tasks transfer_cube,insertion] [--episodes 1]
                      [--first-seed 0] [--camera-size 224] [--camera-rate 10] [--noise 0.02]

The world's loop (tools.sim.loop, policy expert) runs as fast as the CPU allows and every
message it would publish goes into the bag at its sim time, built by the same functions as
the live sim node's: no DDS, no pacing, and the same messages for the same arguments (but
the wall times in the outcomes). The bag holds the world's topic table less /clock (a
player makes its own): the tabletop's base and wrist cameras, /joint_states, the
instruction, the expert's one-point trajectories, narration and memory and
oxygen_ros/EpisodeOutcome; Meta-World's corner2 camera, state and Sawyer joints, the
instruction, the expert's one-row chunks (the clean action), the task's phase lines and
its JSON outcomes; ALOHA's top and wrist cameras, /joint_states, the instruction, the
expert's one-point trajectories of every joint, the task's phase lines and its JSON
outcomes. Training reads a bag as the node reads its robot (the params file's
topics and `training:` block), so a policy learns from the images and prompt the node
will give it, not from a copy of that path.

Noise (Meta-World and ALOHA, DART as the tabletop's trainer injects it, `records.Dart`):
the env runs the expert's command plus bursts of a constant offset on the arm's values
(Meta-World's dx, dy, dz, clipped to [-1, 1]; ALOHA's twelve arm joint targets in rad,
kept in their ranges; never a gripper: a dropped object is a failed episode, not a
recovery lesson), while the recorded command stays the clean one, so the data labels the
way back from states the expert alone never visits. Each episode draws its own stream
(task and seed). `--noise 0` records the clean expert. An episode the noise makes fail is
recorded with its failed outcome and left out by training. Meta-World's default bursts: a
start chance of 0.04 per step, 4 to 12 steps, sigma 0.5 (half a centimetre per step); on
MT10's seeds 0-3 the expert succeeded in 39 of 40 episodes with them (40 clean), in 97
steps on average (71 clean). ALOHA's (`records.ALOHA_DART`): 0.02 per step, 8 to 20
steps, sigma 0.02 rad; 16 of 20 on seeds 0-9 of both tasks (19 clean).

Seeds reaching into the evaluation ranges of oxygen_core.sim.seeds (dev 400000-400999,
test 500000-500999) are refused, as training must never see the scenes a policy is chosen
or reported on.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from oxygen_core.sim.seeds import check_not_evaluation
from oxygen_core.train.records import ALOHA_DART, METAWORLD_DART
from oxygen_core.worlds import World
from oxygen_ros.tools.bagio import BagWriter
from oxygen_ros.tools.commands import ALOHA, METAWORLD, TABLETOP, world_argument, world_prog
from oxygen_ros.tools.sim.loop import SimConfig, SimLoop, episode_order
from oxygen_ros.tools.sim.worlds import binding
from oxygen_ros.tools.sim_host import SimTopic

NOT_RECORDED = ("clock",)
# A world's own flags, each for the sim node's parameter of that name where it has one.
_WORLD_FLAGS = (
    ("--control-rate", "control_rate_hz", "Hz"),
    ("--noise", "expert_noise", "sigma of the expert's DART bursts (the sim's expert_noise)"),
)
# A recording is training data: the experts run with their DART bursts by default.
_RECORDING_DEFAULTS = {
    METAWORLD: {"expert_noise": METAWORLD_DART.sigma},
    ALOHA: {"expert_noise": ALOHA_DART.sigma},
}


class BagPort:
    """The port of a recording: each message of `topics` (a world's table, less /clock)
    into the bag at its sim time."""

    def __init__(self, writer: BagWriter, topics: Sequence[SimTopic]) -> None:
        self._writer = writer
        self._topics = {t.key: t.topic for t in topics if t.key not in NOT_RECORDED}
        self.counts: dict[str, int] = dict.fromkeys(self._topics.values(), 0)

    def publish(self, key: str, msg: Any, time_ns: int) -> None:
        topic = self._topics.get(key)
        if topic is None:
            return
        self._writer.write_ros(topic, time_ns, msg)
        self.counts[topic] += 1


@dataclasses.dataclass(frozen=True)
class Recording:
    """What a recording wrote: messages per topic, the outcomes, its ticks and wall time."""

    counts: dict[str, int]
    outcomes: list[Any]
    ticks: int
    renders: int
    wall_s: float


def record(out: Path, world: World, cfg: SimConfig) -> Recording:
    """Every episode of `cfg` (the expert's) in `world` into a new bag at `out`."""
    if cfg.policy != "expert":
        raise ValueError("a recording runs the expert policy")
    begin = time.perf_counter()
    with BagWriter(out) as writer:
        port = BagPort(writer, binding(world.name).topics)
        loop = SimLoop(world, cfg, port)
        try:
            while loop.tick():
                pass
        finally:
            loop.close()
    return Recording(
        port.counts, loop.outcomes, loop.ticks, loop.renders, time.perf_counter() - begin
    )


def comma_list(text: str) -> tuple[str, ...]:
    """ "a, b" -> ("a", "b") (an argparse type for names its tool checks itself)."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def names_arg(choices: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: "a,b" -> ("a", "b"), every name one of `choices`."""

    def parse(text: str) -> tuple[str, ...]:
        names = comma_list(text)
        if not names or any(n not in choices for n in names):
            raise argparse.ArgumentTypeError(
                f"{what} must be some of {tuple(choices)}, got {text!r}"
            )
        return names

    return parse


def _parser(world: str) -> argparse.ArgumentParser:
    b = binding(world)
    names = b.names_parameter.name
    defaults = {p.name: p.default for p in b.parameters}
    prog = world_prog("oxygen-record", world)
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0].strip())
    parser.add_argument("out", type=Path, help="bag folder to create (must not exist)")
    parser.add_argument(
        f"--{names}",
        dest="names",
        type=names_arg(b.world_class.episode_names, names),
        default=tuple(b.names_parameter.default),
        help="comma-separated (default: all)",
    )
    parser.add_argument("--episodes", type=int, default=1, help=f"episodes per one of {names}")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--camera-size", type=int, default=defaults["camera_size"])
    parser.add_argument("--camera-rate", type=float, default=defaults["camera_rate_hz"], help="Hz")
    for flag, name, unit in _WORLD_FLAGS:
        if name in defaults:
            default = _RECORDING_DEFAULTS.get(world, {}).get(name, defaults[name])
            parser.add_argument(flag, dest=name, type=float, default=default, help=unit)
    return parser


def make_world(world: str, args: argparse.Namespace) -> World:
    """The world a recording runs: the sim node's parameters (defaults) with the command
    line's values."""
    b = binding(world)
    p = {q.name: q.default for q in b.parameters}
    p.update(policy="expert", camera_size=args.camera_size, camera_rate_hz=args.camera_rate)
    p.update({name: getattr(args, name) for _, name, _ in _WORLD_FLAGS if name in p})
    return b.world(p)


def config(args: argparse.Namespace) -> SimConfig:
    """The recording's run; ValueError in one line for seeds an evaluation uses."""
    if args.episodes < 1 or args.first_seed < 0:
        raise ValueError(
            f"--episodes must be 1 or more and --first-seed 0 or more: {args.episodes}, "
            f"{args.first_seed}"
        )
    check_not_evaluation(range(args.first_seed, args.first_seed + args.episodes), "training seeds")
    return SimConfig(
        episodes=episode_order(args.names, args.first_seed, args.episodes),
        policy="expert",
        camera_rate_hz=args.camera_rate,
    )


def run(world: str, argv: Sequence[str] | None) -> int:
    """Record `world`'s expert as the command line asks."""
    parser = _parser(world)
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"{parser.prog}: {args.out} exists: choose a new folder", file=sys.stderr)
        return 1
    try:
        cfg = config(args)
        sim = make_world(world, args)
        cfg.check(sim)
    except ValueError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 1
    done = record(args.out, sim, cfg)
    for outcome in done.outcomes:
        print(binding(world).outcome_line(outcome))
    print(summary(done, args.out))
    return 0


def summary(done: Recording, out: Path) -> str:
    """Messages per topic and the speed: control steps and camera frames per wall second
    (resets included)."""
    wall_s = max(done.wall_s, 1e-9)
    lines = [
        f"{len(done.outcomes)} episodes; {done.ticks} control steps and {done.renders} camera "
        f"frames in {done.wall_s:.1f} s ({done.ticks / wall_s:.0f} steps/s, "
        f"{done.renders / wall_s:.1f} frames/s); wrote {sum(done.counts.values())} messages "
        f"to {out}:",
        *(f"  {topic}: {count}" for topic, count in done.counts.items()),
    ]
    return "\n".join(lines)


def tabletop(argv: Sequence[str] | None = None) -> int:
    """`oxygen-record` (the tabletop)."""
    return run(TABLETOP, argv)


def metaworld(argv: Sequence[str] | None = None) -> int:
    """`oxygen-record --world metaworld`."""
    return run(METAWORLD, argv)


def aloha(argv: Sequence[str] | None = None) -> int:
    """`oxygen-record --world aloha`."""
    return run(ALOHA, argv)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m oxygen_ros.tools.sim.record [--world W] OUT ...`."""
    world, rest = world_argument(list(sys.argv[1:] if argv is None else argv))
    return run(world, rest)


if __name__ == "__main__":
    raise SystemExit(main())
