"""`oxygen-train --bags`: oxygen_core's trainer on rosbag2 recordings.

    oxygen-train --bags DIR [DIR ...] [--params config/sim.yaml] [--robot R] --out CKPT ...

oxygen_core must not read bags (it runs without ROS), so the bags are read here: each
bag's records (`bag_records`, the node's topics and conversions from --params) become the
trainer's episodes file under --work, `bags-<digest>-<size>.npz` (the digest is of the bag
folders, their metadata.yaml, the params file, the chunk horizon and the image slots, so a
rerun with the same arguments reads no bag and resumes), which the run trains on as on
`--episodes FILE`: norm stats and tokenizer fitted on it, the same checkpoint written.
Every other flag is oxygen-train's; with --episodes-only the file is written and printed
(another run's --add-episodes). The robot trained is the params file's `robot`, a preset
or one it declares under `robots:` (robots as data, as config/metaworld.yaml does), so the
checkpoint is the node's robot's; --robot names a preset instead. Bags have no grounding
rows, so a two-stage robot (one that plans from the "Target:" row, e.g. sim_plan) cannot
train on them alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from oxygen_core.config import RobotConfig, robot_preset
from oxygen_core.train import cli
from oxygen_core.train import dataset as D
from oxygen_ros.convert import image_to_rgb
from oxygen_ros.params import ConfigError
from oxygen_ros.tools.bag_records import BagError, Sources, bag_records, sources
from oxygen_ros.tools.bagio import from_cdr, read_bag

DEFAULT_PARAMS = "config/sim.yaml"  # oxygen-record's topics


def main(argv: Sequence[str] | None = None) -> None:
    """`oxygen-train --bags`: the bags' records as the run's episodes, then oxygen_core's
    run on every other flag."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, rest = _parser().parse_known_args(argv)
    if {"-h", "--help"} & set(argv):
        print(_parser().format_help())
    if ours.bags is None:
        raise SystemExit("oxygen-train: --params and --robot here name the topics of --bags")
    args = cli.train_args(rest)
    if args.episodes:
        raise SystemExit("oxygen-train: give --bags or --episodes, not both")
    params = Path(ours.params or DEFAULT_PARAMS)
    try:
        src = sources(params)
        args.robot_config = trained_robot(src.settings.robot, ours.robot)
        args.robot = args.robot_config.name
        robot, cfg = cli.presets(args)
        _check_no_grounding(args, robot)
        args.episodes = str(episodes_file(ours.bags, src, cfg, robot, Path(args.work)))
        args.bags = [str(bag) for bag in ours.bags]
        args.camera_size = recorded_camera_size(ours.bags, src)
    except (BagError, ConfigError, FileNotFoundError, ValueError) as error:
        raise SystemExit(f"oxygen-train: {error}") from None
    if args.episodes_only:
        print(args.episodes)
        return
    try:
        cli.run_training(args)
    except ValueError as error:  # e.g. too few episodes to hold any out
        raise SystemExit(f"oxygen-train: {error}") from None


def trained_robot(params_robot: RobotConfig, named: str | None) -> RobotConfig:
    """The robot of --robot `named`: the params file's own robot (declared under robots:
    or a preset) when it names that one or nothing, else the preset of that name."""
    return params_robot if named in (None, params_robot.name) else robot_preset(named)


def _check_no_grounding(args: argparse.Namespace, robot: RobotConfig) -> None:
    """Exit where the run would train on grounding rows, which no bag holds."""
    if robot.plan_prompt is not None or (args.ground_steps and not args.ground_scenes):
        raise SystemExit(
            f"oxygen-train --bags: bags hold no grounding rows, which --robot {robot.name} "
            "or --ground-steps without --ground-scenes trains on (use --robot sim or sim_grip)"
        )


def episodes_file(bags: Sequence[Path], src: Sources, cfg, robot, work: Path) -> Path:
    """The bags' records as the trainer's episodes file in `work` (written unless there)."""
    state, action = len(src.settings.node.joint_names), len(src.action_names)
    if (state, action) != (robot.state_dim, robot.action_dim):
        raise BagError(
            f"{src.params}: {state} joint_names and {action} action columns, but robot "
            f"{robot.name} has state_dim {robot.state_dim} and action_dim {robot.action_dim}"
        )
    size, horizon = cfg.vision.image_size, cfg.action_horizon
    path = work / f"bags-{_digest(bags, src.params, horizon, cfg.num_images)}-{size}.npz"
    if path.exists():
        return path
    records = [r for bag in bags for r in bag_records(bag, src, horizon, size)]
    data = D.collect(records, cfg)
    print(f"{len(data)} steps of {len(set(data.episode))} episodes from {len(bags)} bag(s)")
    work.mkdir(parents=True, exist_ok=True)
    data.save(path)
    return path


def recorded_camera_size(bags: Sequence[Path], src: Sources) -> int:
    """The width of the first image on the params' first camera: the size the cameras were
    rendered or recorded at before the model's resize, which train_config.json records as
    the camera size the policy's evaluations render (not the sim default; every world's
    camera size is the image's width, ALOHA's 4:3 images too)."""
    topic = src.names.cameras[0]
    for bag in bags:
        for message in read_bag(bag, [topic]):
            return image_to_rgb(from_cdr(message.data, message.msgtype)).shape[1]
    raise BagError(f"no image on {topic} in {', '.join(map(str, bags))}")


def _digest(bags: Sequence[Path], params: Path, horizon: int, images: int) -> str:
    """What the episodes file depends on: the bags (folder and metadata.yaml, which lists
    its files and message counts), the params file, the chunk horizon and the model's image
    slots."""
    for bag in bags:
        if not (bag / "metadata.yaml").is_file():
            raise BagError(f"{bag} is no rosbag2 folder (no metadata.yaml)")
    content = {
        "bags": [[str(b.resolve()), (b / "metadata.yaml").read_text()] for b in bags],
        "params": params.read_text(),
        "horizon": horizon,
        "images": images,
    }
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()[:16]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oxygen-train",
        usage="oxygen-train --bags DIR [DIR ...] [--params FILE] FLAGS (oxygen-train's, below)",
        description="train on rosbag2 recordings",
        allow_abbrev=False,
        add_help=False,
    )
    p.add_argument("--bags", nargs="+", type=Path, metavar="DIR", help="rosbag2 folders")
    p.add_argument(
        "--robot",
        help="the robot trained: a preset, or the one the params file declares (default: "
        "the params file's robot)",
    )
    p.add_argument(
        "--params",
        metavar="FILE",
        help=f"the node's params file: its topics and training.* (default {DEFAULT_PARAMS})",
    )
    return p
