"""oxygen-record --world aloha and `oxygen-train --bags` on its bags: the bag holds the
scripted expert's targets as one 14-joint trajectory per control step, in the
controllers' units, and the training records read from it (config/aloha_sim.yaml's
`training.*` topics, through the node's FrameAssembler) are that episode step by step;
with DART bursts (a recording's default) the arms run perturbed targets while the bag
shows the clean ones.

Expected values come from the expert recorded without ROS (`expert.record`): MuJoCo is
deterministic, so the sim node's episode runs the same targets to the same success step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gym_aloha")

from oxygen_core.aloha.env import ARM_COLUMNS, GRIPPERS  # noqa: E402
from oxygen_core.aloha.episode import (  # noqa: E402
    ACTION_NAMES,
    INSTRUCTIONS,
    STATE_NAMES,
    Replay,
    to_controller,
    to_env,
)
from oxygen_core.aloha.expert import Demo, record, replay  # noqa: E402
from oxygen_core.train.records import ALOHA_DART, Dart, DartNoise  # noqa: E402
from oxygen_ros.tools.bag_records import bag_records, sources  # noqa: E402
from oxygen_ros.tools.bagio import from_cdr, read_bag  # noqa: E402
from oxygen_ros.tools.sim import record as recorder  # noqa: E402

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "config" / "aloha_sim.yaml"
TASK, SEED = "transfer_cube", 0
CAMERA = 56  # the tiny preset's image size: the node's resize leaves the images as rendered
HORIZON = 10  # config/aloha_sim.yaml's action_horizon


def _record(out: Path, *flags: str) -> Path:
    argv = [str(out), "--tasks", TASK, "--episodes", "1", "--first-seed", str(SEED)]
    assert recorder.aloha([*argv, "--camera-size", str(CAMERA), *flags]) == 0
    return out


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> Path:
    """The clean expert's episode."""
    return _record(tmp_path_factory.mktemp("aloha") / "transfer", "--noise", "0")


@pytest.fixture(scope="module")
def demo() -> Demo:
    return record(TASK, SEED)


@pytest.fixture(scope="module")
def steps(demo) -> int:
    """The clean episode's length: it ends at its success, as the sim runs the targets (in
    the controllers' units, whose round trip can move a contact by a step)."""
    outcome = replay(TASK, SEED, to_env(to_controller(demo.targets)))
    assert outcome.success
    return outcome.success_step + 1


def _read(bag: Path, topic: str) -> list:
    return [from_cdr(m.data, m.msgtype) for m in read_bag(bag, [topic])]


def test_the_bag_holds_the_experts_targets_in_the_controllers_units(bag, demo, steps):
    commands = _read(bag, "/aloha/expert/joint_trajectory")
    assert len(commands) == steps
    assert {tuple(m.joint_names) for m in commands} == {ACTION_NAMES}
    positions = np.array([m.points[0].positions for m in commands])
    np.testing.assert_allclose(positions, to_controller(demo.targets[:steps]), atol=1e-9)
    assert len(_read(bag, "/joint_states")) == steps


def test_records_from_the_bag_are_the_episode_step_by_step(bag, demo, steps):
    records = bag_records(bag, sources(PARAMS), HORIZON, CAMERA)
    assert len(records) == steps and len({r.episode for r in records}) == 1
    targets = to_controller(demo.targets[:steps]).astype(np.float32)
    states = _read(bag, "/joint_states")
    for k, got in enumerate(records):
        rows = targets[np.minimum(np.arange(k, k + HORIZON), steps - 1)]  # the last held
        np.testing.assert_allclose(got.actions, rows, atol=1e-6, err_msg=str(k))
        by_name = dict(zip(states[k].name, states[k].position, strict=True))
        want = np.array([by_name[n] for n in STATE_NAMES], np.float32)
        np.testing.assert_array_equal(got.obs.state, want, err_msg=str(k))
        assert got.obs.prompt == INSTRUCTIONS[TASK], k
        assert {name: image.shape for name, image in got.obs.images.items()} == {
            name: (CAMERA, CAMERA, 3) for name in got.obs.images
        }
    assert len(records[0].obs.images) == 3  # the top and both wrist cameras
    assert records[-1].memory == "handed the cube over"


def test_noise_perturbs_what_the_arms_run_never_what_the_bag_shows(tmp_path, demo):
    """A recording's default DART bursts: the expert topic still holds the clean targets,
    while the joints the controllers reached differ from the clean run's."""
    noisy = _record(tmp_path / "noisy")
    commands = _read(noisy, "/aloha/expert/joint_trajectory")
    positions = np.array([m.points[0].positions for m in commands])
    rows = np.minimum(np.arange(len(positions)), len(demo.targets) - 1)  # the last one held
    np.testing.assert_allclose(positions, to_controller(demo.targets[rows]), atol=1e-9)
    clean = _read(_record(tmp_path / "clean", "--noise", "0"), "/joint_states")
    steps = min(len(clean), len(commands))
    moved = [
        np.abs(np.subtract(a.position, b.position)).max()
        for a, b in zip(_read(noisy, "/joint_states")[:steps], clean[:steps], strict=True)
    ]
    assert max(moved) > 0.005  # the arms ran the bursts


def test_a_burst_moves_only_the_arm_joints_and_stays_in_range():
    rows = np.zeros((5, len(ACTION_NAMES)))
    limits = np.tile([-0.01, 0.01], (len(ACTION_NAMES), 1))
    always = Dart(rate=1.0, steps=(5, 5), sigma=1.0, columns=len(ARM_COLUMNS))
    noise = DartNoise(always, np.random.default_rng(0), len(ARM_COLUMNS))
    perturbed = Replay(rows, shown=True, noise=noise, limits=limits)
    for step in range(5):
        acts = perturbed(step, step * 20_000_000)
        run, shown = acts.command.positions[0], acts.shown.positions[0]
        np.testing.assert_array_equal(shown, rows[step])  # the expert topic: clean
        assert np.all(run[list(GRIPPERS)] == 0.0) and np.all(np.abs(run) <= 0.01)
        assert np.count_nonzero(run[ARM_COLUMNS]) == len(ARM_COLUMNS)
    assert ALOHA_DART.columns == len(ARM_COLUMNS)
