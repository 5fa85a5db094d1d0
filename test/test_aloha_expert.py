"""The scripted ALOHA experts (oxygen_core.aloha.expert): the mocap scene starts where its
welds hold the arms, the experts succeed on training seeds within their episode limits
where holding still does not, and replaying the recorded joint targets in the joint-space
env repeats the recorded outcome step for step.

Seeds are training seeds (0-9999, oxygen_core.sim.seeds); the experts' DEV figures are
measured outside the tests. gym-aloha comes from requirements.txt; without it this module
is skipped.
"""

from __future__ import annotations

import pytest

pytest.importorskip("gym_aloha")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import yaml  # noqa: E402
from gym_aloha.constants import DT  # noqa: E402

from oxygen_core.aloha.env import GRIPPERS, JOINT_NAMES, AlohaEnv  # noqa: E402
from oxygen_core.aloha.episode import ACTION_NAMES, to_controller  # noqa: E402
from oxygen_core.aloha.expert import (  # noqa: E402
    EXPERT_STEPS,
    SIDES,
    MocapScene,
    Outcome,
    expert_joint_targets,
    record,
    replay,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def transfer_demo():
    return record("transfer_cube", 1)


def test_the_mocaps_start_where_the_welds_hold_the_arms():
    """Holding the start mocaps keeps the arms at their start: the reset computed the
    weld's offset (the mocap 0.1347 m ahead of the gripper link) rather than putting the
    mocap on the link, which would pull each arm 13 cm forward."""
    scene = MocapScene("transfer_cube")
    scene.reset(0)
    start = {side: scene.mocap(side) for side in SIDES}
    link = scene.physics.data.ptr.body("vx300s_left/gripper_link").xpos.copy()
    assert np.linalg.norm(start["left"][0] - link) == pytest.approx(0.1347, abs=1e-3)
    for _ in range(25):
        scene.step({side: (*start[side], 0.1) for side in SIDES})
    moved = scene.physics.data.ptr.body("vx300s_left/gripper_link").xpos - link
    assert np.linalg.norm(moved) < 0.005


def test_the_transfer_cube_expert_succeeds_within_the_benchmarks_limit(transfer_demo):
    targets, outcome = transfer_demo.targets, transfer_demo.outcome
    assert targets.shape == (EXPERT_STEPS["transfer_cube"], 14) and np.isfinite(targets).all()
    assert outcome.success and outcome.success_step <= 300
    grippers = targets[:, list(GRIPPERS)]
    assert grippers.min() >= 0.0 and grippers.max() <= 1.0  # commands, not finger states


def test_the_expert_keeps_its_wrists_on_their_branch_and_within_the_robots_bounds(
    transfer_demo,
):
    """Seed 1's first approach took the right wrist through its straight pose, where the
    welds spun forearm_roll and wrist_rotate half a turn in opposite directions (12.8
    rad/s): the roll spring keeps them near their start. Every target keeps within the
    velocity and acceleration bounds config/aloha.yaml gives the robot, in the
    controllers' units (the grippers' joint angles), as the chunk gate measures them."""
    rows = to_controller(transfer_demo.targets)
    velocity = np.diff(rows, axis=0) / DT
    acceleration = np.diff(velocity, axis=0) / DT
    limits = _robot_limits()
    assert np.all(np.abs(velocity) <= limits["max_velocity"])
    assert np.all(np.abs(acceleration) <= limits["max_acceleration"])
    rolls = [JOINT_NAMES.index(f"{side}_arm_forearm_roll") for side in SIDES]
    assert np.abs(transfer_demo.targets[:, rolls]).max() < 1.0  # not half a turn (pi)


def _robot_limits() -> dict[str, np.ndarray]:
    """config/aloha.yaml's bounds per command column (ACTION_NAMES order)."""
    params = yaml.safe_load((ROOT / "config" / "aloha.yaml").read_text())
    joints = params["/**"]["ros__parameters"]["joint_limits"]
    keys = ("max_velocity", "max_acceleration")
    return {k: np.array([joints[name][k] for name in ACTION_NAMES]) for k in keys}


def test_replaying_the_recorded_targets_repeats_the_recorded_outcome(transfer_demo):
    assert replay("transfer_cube", 1, transfer_demo.targets) == transfer_demo.outcome
    # The targets are the seed's: stopped short of the hand-over they do not succeed.
    assert replay("transfer_cube", 1, transfer_demo.targets[:150]) == Outcome(False, None)


def test_holding_still_does_not_succeed():
    env = AlohaEnv("transfer_cube")
    start = env.reset(1).joints
    outcome = replay("transfer_cube", 1, np.tile(start, (EXPERT_STEPS["transfer_cube"], 1)))
    assert outcome == Outcome(False, None)


def test_the_insertion_expert_succeeds_within_acts_episode_length():
    targets = expert_joint_targets("insertion", 2)
    assert targets.shape == (EXPERT_STEPS["insertion"], 14)
    outcome = replay("insertion", 2, targets)
    assert outcome.success and outcome.success_step <= 400
