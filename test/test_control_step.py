"""The control step (oxygen_core.control_step): what a frame sends, holds and forgets, with
exact numbers on a scripted actor; and that no second copy of the frame's order exists.

Control period 20 ms, frame period 50 ms; the actor's chunk f has 10 rows, row i at
(f + i / 100) on both joints, so rows step 10 mrad per period.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from oxygen_core.control_step import ControlStep, Measured
from oxygen_core.controller import shaping
from oxygen_core.engine.types import ActionResult, EngineConfig, Handover
from oxygen_core.model.rtc import DelayEstimator
from oxygen_core.observation import Observation
from oxygen_core.safety.gate import ChunkGate
from oxygen_core.safety.limits import JointLimits

MS = 1_000_000
PERIOD_S, FRAME_S = 0.02, 0.05
ROWS = 10
OBS = Observation({}, np.zeros(2, np.float32), "stack")
ROOT = Path(__file__).resolve().parents[1]


class ScriptedActor:
    """Chunk f: row i at f + i / 100 on both joints; answers `handover_mode` to a handover."""

    def __init__(self, handover: str = "replace", answer: str | None = None) -> None:
        self.cfg = EngineConfig(chunk_handover=handover)
        self.delay = DelayEstimator()
        self.answer = answer or handover
        self.frame = -1
        self.on_act = lambda: None

    def act(
        self, obs: Observation, handover: Handover | None = None, plan_answer: str | None = None
    ) -> ActionResult:
        self.frame += 1
        self.on_act()
        rows = self.frame + np.arange(ROWS, dtype=np.float32)[:, None] / 100
        actions = np.hstack([rows, rows])
        mode = "replace" if handover is None else self.answer
        return ActionResult(self.frame, actions, 0.001, 0.002, mode)


def limits(jump: float = 1.0) -> JointLimits:
    def full(value: float) -> np.ndarray:
        return np.full(2, value)

    return JointLimits(("a", "b"), full(-100), full(100), full(10), full(1e4), full(jump), "test")


def step(actor=None, **kwargs) -> ControlStep:
    actor = actor or ScriptedActor()
    return ControlStep(actor, control_period_s=PERIOD_S, frame_period_s=FRAME_S, **kwargs)


def at(position: float, velocity: float | None = None) -> Measured:
    v = None if velocity is None else np.full(2, velocity)
    return Measured(np.full(2, position), v)


def run(control: ControlStep, tick_ms: int, measured: Measured, elapsed_ms: int = 0):
    """One frame's action phase, its rows sent when any."""
    control.begin()
    acted = control.act(tick_ms * MS, OBS, measured)
    decision = control.decide(acted, elapsed_ms * MS)
    if decision.release is not None:
        control.sent(decision, elapsed_ms / 1000)
    return decision


def test_a_chunk_with_nothing_running_waits_the_elapsed_control_steps():
    control = step()
    decision = run(control, 1000, at(0.0), elapsed_ms=30)  # 1.5 periods: from 2 on
    assert decision.release.row0_ns == 1040 * MS and decision.hold is None
    assert len(decision.release.rows) == ROWS and decision.trajectory is None
    assert control.timeline.last_row_ns() == (1040 + 9 * 20) * MS


def test_rejections_in_a_row_hold_once_and_a_chunk_through_ends_it():
    control = step(gate=ChunkGate(limits(jump=0.001), "reject", PERIOD_S), max_rejections=3)
    far = at(5.0)  # the chunks start 5 rad away: every one is rejected
    holds = [run(control, 1000 + 50 * f, far).hold for f in range(4)]
    assert holds == [None, None, "the gate rejected 3 chunks in a row", None]
    assert control.tally.outcomes["rejected"] == 4 and control.tally.tripped
    control.held()
    near = at(4.0)  # chunk 4 starts at 4.0: it goes through
    decision = run(control, 1200, near)
    assert decision.release is not None and decision.verdict.outcome == "passed"
    assert not control.standing and not control.tally.tripped


def test_the_watchdog_holds_once_per_outage():
    control = step()
    run(control, 0, at(0.0))  # rows due 0..180 ms
    assert control.skipped(0, "joint_state stale") is None  # 180 >= 0 + 2 frames
    assert control.skipped(80 * MS, "joint_state stale") is None  # 180 = 80 + 2 frames
    assert control.skipped(100 * MS, "joint_state stale") == "joint_state stale"
    control.held(standing=False)  # decided, not sent (a dry run): the watchdog asks again
    assert control.skipped(100 * MS, "joint_state stale") == "joint_state stale"
    control.held()
    assert control.skipped(150 * MS, "joint_state stale") is None  # it has its hold
    control.begin()  # after a hold the next frame hands over from nothing
    assert control.timeline.running is None
    assert run(control, 200, at(0.0)).release.row0_ns == 200 * MS
    assert not control.standing


def test_a_hold_while_the_actor_runs_makes_its_chunk_stale():
    actor = ScriptedActor()
    control = step(actor)
    actor.on_act = control.held
    assert control.act(0, OBS, at(0.0)) is None


def test_a_chunk_the_controller_cannot_meet_is_refused_and_the_watchdog_holds():
    control = step(controller="jtc", lead_s=0.0)
    first = run(control, 0, at(0.0))  # nothing running: every row from 20 ms on
    assert first.trajectory is not None and first.trajectory.stamp_ns == 20 * MS
    # 150 ms later, arriving 200 ms after its tick: the rows (due 150..330 ms, cold: none
    # run) are kept from 370 ms on, so none is left; the running chunk ends at 180 ms.
    acted = control.act(150 * MS, OBS, at(0.0))
    decision = control.decide(acted, 200 * MS)
    assert decision.refused and decision.release is None and decision.trajectory is None
    assert decision.hold == "no trajectory the controller can meet"
    assert any(n.key == "trajectory refused" for n in decision.notes)


def test_under_jtc_the_sent_trajectories_give_the_command_to_screen_from_until_a_hold():
    gate = ChunkGate(limits(), "reject", PERIOD_S)
    control = step(controller="jtc", lead_s=0.0, gate=gate)
    assert control.expected.states(0) == []
    sent = run(control, 0, at(0.0, 0.0)).trajectory  # rows 0.01 (at 20 ms), 0.02, ...
    assert sent.stamp_ns == 20 * MS and sent.velocities[0] == pytest.approx([0.5, 0.5])
    # Taken over at 0 from rest, the cubic to (0.01, 0.5 rad/s) at 20 ms, at 10 ms:
    # 0.01 / 2 - 0.02 * 0.5 / 8 = 0.00375, moving at 1.5 x 0.01 / 0.02 - 0.5 / 4 = 0.625.
    ((position, velocity),) = control.expected.states(10 * MS)
    assert position == pytest.approx([0.00375] * 2)
    assert velocity == pytest.approx([0.625] * 2)
    control.held()
    control.begin()
    assert control.expected.states(10 * MS) == []
    assert step(controller="jtc", lead_s=0.0).expected is None  # no limits: no screen


def test_the_hold_stops_from_the_measured_state_or_the_last_frame():
    control = step(gate=ChunkGate(limits(), "slow", PERIOD_S))
    assert control.stop(None, None) is None  # nothing measured yet
    run(control, 0, at(0.25))
    last = control.stop(None, None)
    assert last.stamp_ns == 0 and last.positions.tolist() == [[0.25, 0.25]]
    moving = control.stop(np.zeros(2), np.full(2, 1.0))  # 1 rad/s, at most 1e4 rad/s^2
    assert moving.velocities[-1].tolist() == [0, 0]
    assert moving.times[0] == pytest.approx(shaping.HOLD_MIN_PERIODS * PERIOD_S)
    # A joint state 5 ms old is moved on 5 ms; one older than a period only a period.
    fresh = control.stop(np.zeros(2), np.full(2, 1.0), age_s=0.005).positions[0]
    np.testing.assert_allclose(fresh - moving.positions[0], 0.005)
    gap = control.stop(np.zeros(2), np.full(2, 1.0), age_s=10.0).positions[0]
    np.testing.assert_allclose(gap - moving.positions[0], PERIOD_S)


def test_from_the_desired_state_the_hold_stops_from_the_controllers_command():
    # Chunk 0 goes out at 0 (rows 0.00.. due from 20 ms, 0.5 rad/s); at 50 ms the arm
    # measures 0.3 rad away at rest (a gripper squeezing what it holds). A controller that
    # starts from its command stops from where the command is then, moving on at 0.5 rad/s.
    fast = np.full(2, 1e3)  # wide bounds: chunk 1 (from 1.0) goes through after the hold
    wide = JointLimits(("a", "b"), -fast, fast, fast, 1e3 * fast, fast, "test")
    gate = ChunkGate(wide, "slow", PERIOD_S)
    desired = step(controller="jtc", lead_s=0.0, gate=gate, from_desired=True)
    run(desired, 0, at(0.0, 0.0))
    ((command, speed),) = desired.expected.states(50 * MS)
    hold = desired.stop(np.full(2, 0.3), np.zeros(2), now_ns=50 * MS)
    assert speed == pytest.approx([0.5, 0.5])
    # Three periods of constant deceleration from 0.5 rad/s: 0.5 x 0.06 / 2 = 0.015 on.
    assert hold.times.tolist() == pytest.approx([3 * PERIOD_S])
    np.testing.assert_allclose(hold.positions, [command + 0.015])
    # Once out, the hold is the controller's command: the next chunk, with nothing running,
    # is eased and judged from where the hold left the command, not from the measured 0.3.
    desired.held()
    end = hold.positions[-1]
    for states in (desired.expected.states(150 * MS), desired.expected.states(180 * MS)):
        assert [p.tolist() for p, _ in states] == [end.tolist()] * len(states) and states
    decision = run(desired, 200, at(0.3, 0.0))
    np.testing.assert_allclose(decision.release.lead, [end, end], rtol=1e-6)
    # The measured state's controller, or no clock: the stop from the measured joints.
    desired.reset()
    assert desired.stop(np.full(2, 0.3), np.zeros(2)).positions.tolist() == [[0.3, 0.3]]
    measured = step(controller="jtc", lead_s=0.0, gate=gate)
    run(measured, 0, at(0.0, 0.0))
    stop = measured.stop(np.full(2, 0.3), np.zeros(2), now_ns=50 * MS)
    assert stop.positions.tolist() == [[0.3, 0.3]]


def test_a_stamp_before_the_last_says_why():
    control = step()
    run(control, 1000, at(0.0))
    acted = control.act(500 * MS, OBS, at(0.0))  # the clock went back
    back = control.sent(control.decide(acted, 0), 0.0)
    assert back.reason == "clock_back" and back.back_s == pytest.approx(0.5)
    assert "0.500 s before" in back.note.message


def test_a_hand_over_the_actor_could_not_make_is_reported():
    control = step(ScriptedActor("rtc", answer="replace"))
    assert not control.act(0, OBS, at(0.0)).fell_back  # nothing to hand over
    run(control, 0, at(0.0))
    assert control.act(50 * MS, OBS, at(0.0)).fell_back


def test_the_gate_and_the_trajectory_need_a_measured_state():
    with pytest.raises(ValueError, match="measured state"):
        step(controller="jtc").act(0, OBS, None)


# ---------------------------------------------------------------- one frame order

# What only the control step may call: a second caller is a second frame order.
FRAME_ORDER = {"ChunkTimeline", "ChunkGuard", "for_release"}
OWNER = ROOT / "oxygen_core" / "control_step.py"


def called_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_only_the_control_step_runs_the_frame_order():
    sources = [p for pkg in ("oxygen_core", "oxygen_ros") for p in (ROOT / pkg).rglob("*.py")]
    callers = {
        str(p.relative_to(ROOT)): sorted(called_names(p) & FRAME_ORDER)
        for p in sources
        if p != OWNER and called_names(p) & FRAME_ORDER
    }
    assert called_names(OWNER) >= FRAME_ORDER
    assert callers == {}
