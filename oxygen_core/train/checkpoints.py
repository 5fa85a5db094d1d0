"""A checkpoint oxygen-train writes, read back and written: the policy with the preset and
robot it was trained as (its train_config.json says which), and openpi's layout on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from oxygen_core.config import RobotConfig, robot_preset
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import TOKENIZER_FILE, TRAIN_CONFIG, save_checkpoint
from oxygen_core.model.normalize import NormStats
from oxygen_core.policy import Policy, load_policy
from oxygen_core.robot_spec import declared_robot


def write_checkpoint(out: Path, params: P.Tree, norm: NormStats, asset_id: str) -> None:
    """Runtime params -> openpi's layout: `<out>/params` and `assets/<id>/norm_stats.json`."""
    save_checkpoint(out, P.to_checkpoint(params), norm, asset_id=asset_id)


def trained_policy(ckpt: Path) -> tuple[Policy, dict]:
    """A checkpoint written by oxygen-train, loaded with the preset and robot it was trained
    as, and its train_config.json."""
    meta = json.loads((ckpt / TRAIN_CONFIG).read_text())
    robot = checkpoint_robot(meta, ckpt)
    return load_policy(meta["preset"], robot, ckpt, ckpt / TOKENIZER_FILE), meta


def checkpoint_robot(meta: dict, ckpt: Path) -> RobotConfig:
    """The robot a checkpoint was trained as: its recorded declaration (a robot declared
    as data, e.g. config/metaworld.yaml's), else the preset it names."""
    declared = meta.get("robot_declaration")
    if declared is None:
        return robot_preset(meta["robot"])
    return declared_robot(meta["robot"], declared, f"{ckpt / TRAIN_CONFIG} robot_declaration")


def same_io(trained: RobotConfig, robot: RobotConfig) -> bool:
    """Whether a checkpoint of robot `trained` can continue as `robot`: the same cameras,
    spaces and dims; only the plan stage may differ (its answer is a text row the
    checkpoint was co-trained on)."""
    strip = lambda r: dataclasses.replace(r, name="", plan_prompt=None)  # noqa: E731
    return strip(trained) == strip(robot)
