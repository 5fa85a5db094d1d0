"""The in-process closed loop with chunk hand-over and a link delay (oxygen-eval in-process
--handover/--link-delay): the node's bookkeeping of what the arm runs (`ChunkTimeline`, on
ticks; its own tests are test_timeline.py), the seam meter, the overlap of each new
chunk with the rows the arm runs while it travels, and the chunk gate on every chunk."""

import json
from pathlib import Path

import numpy as np
import pytest

from oxygen_core.controller.shaping import Shaped
from oxygen_core.engine import EngineConfig, make_engine
from oxygen_core.safety.limits import JointLimits
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.executor import TrajectoryExecutor
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.tasks import make_task
from oxygen_core.train import rollout
from oxygen_core.train.checkpoints import trained_policy
from oxygen_core.train.evaluate import main as eval_main

POLICY = Path(__file__).resolve().parents[1] / "data" / "policy" / "sim_demo"
SEED = 100_000  # held out from training
DT = 0.05


@pytest.fixture(scope="module")
def policy():
    return trained_policy(POLICY)[0]


def engine_for(policy, handover: str, delay: int):
    cfg = EngineConfig(
        max_active_requests=2,
        batch_buckets=(1, 2),
        chunk_handover=handover,
        rtc_delay_steps=delay,
    )
    return make_engine(policy, cfg)


def test_a_chunk_reaches_the_controller_link_delay_ticks_after_its_frame():
    executor = TrajectoryExecutor(np.zeros(7), controller="jtc_replacement")
    link = rollout._Link(executor, "jtc_replacement", delay=3, dt=DT)
    rows = np.arange(10, dtype=np.float64)[:, None] * np.ones((1, 7))
    link.send(0, Shaped(0, np.arange(10) * DT, rows, None))  # stamped at tick 0
    commands = [link.command(t, np.zeros(7))[0] for t in range(5)]
    assert commands[:3] == [0.0, 0.0, 0.0]  # the start pose held while it travels
    assert commands[3:] == pytest.approx([3.0, 4.0])  # its rows 0-2 were past on arrival


@pytest.mark.slow
def test_blend_meets_the_running_rows_exactly_and_rtc_comes_closer_than_replace(policy):
    """blend keeps the rows in transit by construction (gap 0); rtc's guidance pulls the
    trained policy's chunk toward them, replace ignores them."""
    renderer = Renderer(128, 128)
    gaps = {}
    for handover in ("replace", "blend", "rtc"):
        engine = engine_for(policy, handover, delay=3)
        out = rollout.run_episode(engine, "pick", SEED, 2, renderer, link_delay=3)
        frames = range(0, out.steps, 2)  # the ticks of the frames
        assert out.overlap.frames == len(frames) - 1  # every frame after the first
        # a take-over per chunk after the first that reached the controller before the
        # episode's last tick (an episode that succeeds early leaves more on their way)
        arrived = [tick for tick in frames if tick + 3 <= out.steps - 1]
        assert out.seams.seams == len(arrived) - 1
        gaps[handover] = out.overlap
    assert gaps["blend"].arm_mean == pytest.approx(0.0, abs=1e-6)
    assert gaps["blend"].gripper_mean == pytest.approx(0.0, abs=1e-6)
    assert gaps["rtc"].arm_mean < 0.6 * gaps["replace"].arm_mean


@pytest.mark.slow
def test_train_eval_reports_seams_and_overlap_per_family(tmp_path):
    out = tmp_path / "eval.json"
    eval_main(["--checkpoint", str(POLICY), "--families", "push", "--episodes", "1",
               "--first-seed", str(SEED), "--handover", "blend", "--link-delay", "2",
               "--json", str(out)])  # fmt: skip
    summary = json.loads(out.read_text())["summary"]
    push = summary["push"]
    # One chunk per frame: a seam per arrived chunk after the first, an overlap per frame
    # after the first (the last frame's chunk may not arrive before the episode ends).
    assert push["seams"]["seams"] > 10
    assert push["overlap"]["frames"] in (push["seams"]["seams"], push["seams"]["seams"] + 1)
    assert push["overlap"]["arm_mean"] == pytest.approx(0.0, abs=1e-6)  # blend meets them
    assert summary["all"]["seams"] == push["seams"]  # one family: "all" is that family
    assert summary["all"]["overlap"] == push["overlap"]


def _velocity_only(velocity: float) -> JointLimits:
    """The arm's joints bounded in velocity alone (every other bound switched off)."""
    off = np.full(len(JOINT_NAMES), np.inf)
    bound = np.full(len(JOINT_NAMES), velocity)
    return JointLimits(JOINT_NAMES, -off, off, bound, off, off, "test")


@pytest.mark.slow
def test_the_gate_slows_every_chunk_and_the_handover_meets_the_longer_rows(policy):
    """A velocity bound the policy always breaks: every chunk is slowed to more rows than
    the model's horizon, and blend hands those rows over to the next frame."""
    engine = engine_for(policy, "blend", delay=1)
    out = rollout.run_episode(
        engine, "pick", SEED, 2, Renderer(128, 128), max_steps=12, limits=_velocity_only(0.5)
    )
    assert out.gate.outcomes == {"passed": 0, "clamped": 0, "slowed": 6, "rejected": 0}
    assert out.gate.findings["velocity"] == 6 and out.gate.last_stretch > 1
    assert out.overlap.frames == 0 and out.seams.seams == 5  # one take-over per later chunk


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0, 2])
def test_rejected_chunks_never_reach_the_arm_and_the_streak_trips(policy, delay):
    """With a link delay the hold is due when it arrives, as the node's (stamped zero)."""
    engine = engine_for(policy, "blend", delay=delay)
    world = make_task("pick", SEED).new_world()
    start = world.joints.copy()
    out = rollout.run_episode(
        engine, "pick", SEED, 2, Renderer(128, 128), max_steps=12, world=world,
        limits=_velocity_only(1e-3), gate_policy="reject", link_delay=delay,
    )  # fmt: skip
    assert out.gate.outcomes["rejected"] == 6 and out.gate.outcomes["passed"] == 0
    assert (out.gate.streak, out.gate.tripped) == (6, True)
    np.testing.assert_allclose(world.joints, start, atol=1e-9)  # only holds at the start pose
    summary = rollout.summarise([out])["pick"]
    assert summary["gate_chunks"]["rejected"] == 6 and summary["gate_findings"]["velocity"] == 6
