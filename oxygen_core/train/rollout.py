"""The trained policy in closed loop in the sim, in process: success and what it says.

The loop is the node's, minus the topics: every `execute` control steps an observation
rendered by the sim at the camera's resolution goes through the node's own control step
(`oxygen_core.control_step.ControlStep`, on ticks of step * period in nanoseconds): the
engine (the real one, OxyGen mode by default) computes a chunk with the node's hand-over
bookkeeping, the released rows go through the chunk gate given the arm's joint limits,
are shaped for the sim's trajectory controller (`TrajectoryExecutor`, as the sim node's
is) for the same `controller` model, and a gate streak or the watchdog sends a hold (a
stop from the measured joints and velocity) as the node does; then the language phase
runs. Each chunk's time from the frame's start to its send feeds d as the node's
tick-to-publish latency does. A `link_delay` of L control steps holds each chunk L ticks
before the controller gets it (a slow frame or link: the arm runs the old chunk
meanwhile); 0 is a chunk that arrives at its own tick. No expert is consulted. An episode
ends at the task's success check or its time limit. The episode's `GateTally` says what
the gate did, `Outcome.refused` counts chunks the controller could not meet, and
`Outcome.holds` the holds sent.

What is measured, per family: success rate; for the finished texts, whether a narration
names the target object's colour and shape, and whether a text ended at EOS (not at its
token budget); and the memory lines written (non-empty memory texts). The hand-over is
measured too: the sim's seam meter at every take-over, and how far each new chunk's first
L rows are from the rows the arm runs at those ticks (`Overlap`; rtc should pin them to
the old chunk). This is the quick check before `oxygen-eval node`, which drives the real
node over ROS topics.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.control_step import ControlStep, Decision, Measured
from oxygen_core.controller import shaping
from oxygen_core.controller.shaping import Shaped
from oxygen_core.engine.engine import Engine
from oxygen_core.engine.timeline import Takeover
from oxygen_core.observation import Observation
from oxygen_core.safety.gate import ChunkGate, Policy
from oxygen_core.safety.guard import GateTally
from oxygen_core.safety.limits import JointLimits
from oxygen_core.sim.arm import GRIPPER, JOINT_NAMES
from oxygen_core.sim.executor import (
    DEFAULT_CONTROLLER,
    Controller,
    LimitViolations,
    Trajectory,
    TrajectoryExecutor,
)
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.runner import DEFAULT_CONTROL_HZ
from oxygen_core.sim.seam import SeamMeter, SeamSummary
from oxygen_core.sim.success import SuccessRate
from oxygen_core.sim.tasks import Contacts, make_task
from oxygen_core.sim.world import World
from oxygen_core.train import locate
from oxygen_core.train.baseline_actor import BaselineActor
from oxygen_core.train.records import CAMERA_SLOTS

# What acts in the loop: the engine, or a baseline in its seat (same path from the chunk on).
Actor = Engine | BaselineActor


@dataclasses.dataclass(frozen=True)
class Text:
    stream: str
    text: str
    reason: str | None


@dataclasses.dataclass(frozen=True)
class Overlap:
    """New chunks against the rows the arm runs while they are on their way: per frame
    with a previous chunk, the largest |new - running| over the first L rows, for the arm's
    joints (rad) and for the gripper's opening, then the mean over frames."""

    frames: int
    arm_mean: float
    gripper_mean: float

    @classmethod
    def pooled(cls, parts: Sequence[Overlap]) -> Overlap:
        frames = sum(p.frames for p in parts)

        def mean(field: str) -> float:
            return sum(getattr(p, field) * p.frames for p in parts) / frames if frames else 0.0

        return cls(frames, mean("arm_mean"), mean("gripper_mean"))


@dataclasses.dataclass(frozen=True)
class Outcome:
    family: str
    seed: int
    instruction: str
    target: str  # "<colour> <shape>" of the instructed object
    success: bool
    steps: int
    texts: tuple[Text, ...]
    contacts: Contacts
    seams: SeamSummary
    overlap: Overlap
    plans: tuple[bool, ...] = ()  # per frame of a two-stage policy: its plan was right
    gate: GateTally | None = None  # what the chunk gate did; None without limits
    limits: LimitViolations = LimitViolations()  # commanded points the sim's arm refuses
    refused: int = 0  # gated chunks with no trajectory the controller could meet
    holds: int = 0  # holds sent (a gate streak, the watchdog), as the node sends them


class _Link:
    """Chunks on their way to the controller: each reaches it `delay` ticks after its frame,
    shaped for it as the node shapes ~/joint_trajectory (oxygen_core.controller.shaping)."""

    def __init__(self, executor: TrajectoryExecutor, controller: Controller, delay: int, dt: float):
        self.executor, self.controller, self.delay, self.dt = executor, controller, delay, dt
        self.period_ns = round(dt * NS_PER_S)
        self._transit: list[tuple[int, Trajectory]] = []
        self._measured: np.ndarray | None = None  # the arm's joints at the last command
        self.velocity = np.zeros(len(JOINT_NAMES))  # the arm's, as a JointState carries it
        self.refused = 0  # gated chunks with no trajectory the controller could meet
        self.holds = 0  # holds sent: a gate streak, the watchdog

    def deliver(self, tick: int, decision: Decision, control: ControlStep, measured: Measured):
        """What the control step decided at `tick`: a hold (a stop from `measured`, due on
        arrival, as the node stamps its hold zero), then the trajectory, if any."""
        if decision.hold is not None:
            self.send(tick, control.stop(measured.positions, measured.velocities), True)
            control.held()
            self.holds += 1
        self.refused += decision.refused
        if decision.trajectory is not None:
            self.send(tick, decision.trajectory)

    def send(self, tick: int, shaped: Shaped, on_arrival: bool = False) -> None:
        """`shaped` on its way; on_arrival: its zero stamp means the controller's update at
        arrival (a hold), as ROS reads it (sim time 0 is a time like any other here)."""
        # In ticks times dt, the executor's clock here (stamps are on the tick grid).
        start = shaped.stamp_ns / self.period_ns * self.dt
        if on_arrival and self.controller != "jtc":  # "jtc" reads start 0.0 so itself
            start = (tick + self.delay) * self.dt
        trajectory = Trajectory(
            JOINT_NAMES, start, shaped.times, shaped.positions, shaped.velocities
        )
        self._transit.append((tick + self.delay, trajectory))

    def command(self, tick: int, measured: np.ndarray) -> np.ndarray:
        """The controller's command at `tick`, after delivering what has arrived; measured:
        the arm's joints now (where a "jtc" controller starts a new trajectory, at the
        velocity since the last tick: a velocity state interface)."""
        if self._measured is not None:
            self.velocity = (measured - self._measured) / self.dt
        self._measured = np.array(measured, np.float64)
        while self._transit and self._transit[0][0] <= tick:
            rejection = self.executor.replace(self._transit.pop(0)[1], now=tick * self.dt)
            if rejection is not None:
                raise RuntimeError(f"the engine's chunk was rejected: {rejection.reason}")
        return self.executor.command(tick * self.dt, measured, self.velocity)


def run_episode(
    engine: Actor,
    family: str,
    seed: int,
    execute: int,
    renderer: Renderer,
    control_hz: float = DEFAULT_CONTROL_HZ,
    link_delay: int = 0,
    max_steps: int | None = None,
    world: World | None = None,
    true_plan: bool = False,
    limits: JointLimits | None = None,
    gate_policy: Policy = "slow",
    max_rejections: int = 3,
    controller: Controller = DEFAULT_CONTROLLER,
) -> Outcome:
    """One closed-loop episode of the policy behind `engine`, cut at `max_steps` control
    steps when given (short of the task's time limit: not a success). world: the task's
    initial scene made by the caller, which then sees it moved in place (where the policy
    left it: `oxygen_core.train.dagger`). true_plan: a two-stage policy acts on the true
    "Target:" answer of each frame instead of its own (what a perfect answer is worth).
    limits: the arm's (JOINT_NAMES order), to gate every chunk under `gate_policy`.
    controller: the trajectory controller's model (oxygen_core.sim.executor)."""
    task = make_task(family, seed)
    world = task.new_world() if world is None else world
    engine.reset()
    dt = 1.0 / control_hz
    executor = TrajectoryExecutor.of(world.joints, controller, dt)
    link = _Link(executor, controller, link_delay, dt)
    meter = SeamMeter(dt, gripper=GRIPPER, limits=limits)
    texts: list[Text] = []
    gaps: list[np.ndarray] = []  # per frame: [arm, gripper] of the overlap
    plans: list[bool] = []  # per frame: the plan named the target's cell (and bowl's)
    control = ControlStep(
        engine,
        control_period_s=dt,
        frame_period_s=execute * dt,
        gate=_gate(limits, gate_policy, dt, controller),
        max_rejections=max_rejections,
        controller=controller,
    )
    steps = int(round(task.time_limit * control_hz))
    steps = steps if max_steps is None else min(steps, max_steps)
    success = False
    for step in range(steps):
        if step % execute == 0:
            images = {slot: renderer.render(world, cam) for cam, slot in CAMERA_SLOTS.items()}
            truth = locate.target(task, world)
            start_s = time.perf_counter()  # the frame's tick: its camera images are in
            obs = Observation(images, world.joints.astype(np.float32), task.instruction)
            measured = Measured(np.asarray(obs.state, np.float64), link.velocity.copy())
            control.begin()
            acted = control.act(step * link.period_ns, obs, measured, truth if true_plan else None)
            if acted.action.plan is not None:
                plans.append(acted.action.plan == truth)
            if acted.takeover.running is not None and link_delay:
                gaps.append(_overlap_gap(acted.action.actions, acted.takeover, link_delay))
            decision = control.decide(acted, link_delay * link.period_ns)
            link.deliver(step, decision, control, measured)
            if decision.release is not None:
                control.sent(decision, time.perf_counter() - start_s)
            for event in engine.language().events:
                if event.finished:
                    texts.append(Text(event.stream, event.text, event.finish_reason))
        command = link.command(step, world.joints)
        meter.observe(command, link.executor.last_takeover)
        world.step(command, dt)
        verdict = task.verdict(world)
        if verdict is not None:
            success = verdict
            break
    target = task.objects[task.target].name
    return Outcome(
        family,
        seed,
        task.instruction,
        target,
        success,
        steps=step + 1,
        texts=tuple(texts),
        contacts=task.contacts(world),
        seams=meter.summary(),
        overlap=_summarise_gaps(gaps),
        plans=tuple(plans),
        gate=control.tally,
        limits=link.executor.violations,
        refused=link.refused,
        holds=link.holds,
    )


def _gate(
    limits: JointLimits | None, policy: Policy, dt: float, controller: Controller
) -> ChunkGate | None:
    if limits is None:
        return None
    if tuple(limits.names) != JOINT_NAMES:
        raise ValueError(f"the gate's joints {limits.names} are not the arm's {JOINT_NAMES}")
    return ChunkGate(limits, policy, dt, segments=shaping.segments(controller))


def _overlap_gap(new: np.ndarray, takeover: Takeover, rows: int) -> np.ndarray:
    """[arm, gripper]: the largest |new - running| over the first `rows` rows of `new`
    (the ticks the arm runs the running chunk while `new` is on its way)."""
    gap = np.abs(np.asarray(new[:rows], np.float64) - takeover.upcoming(rows))
    return np.array([np.delete(gap, GRIPPER, axis=1).max(), gap[:, GRIPPER].max()])


def _summarise_gaps(gaps: list[np.ndarray]) -> Overlap:
    if not gaps:
        return Overlap(0, 0.0, 0.0)
    arm, gripper = np.mean(gaps, axis=0)
    return Overlap(len(gaps), float(arm), float(gripper))


def summarise(outcomes: Sequence[Outcome]) -> dict[str, dict]:
    """Per family and overall: success rate, narration naming the target, EOS rate, counts,
    the pooled seams and overlap."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.family, []).append(o)
    groups["all"] = list(outcomes)
    table = {}
    for name, group in groups.items():
        texts = [t for o in group for t in o.texts]
        narration = [(o.target, t) for o in group for t in o.texts if t.stream == "narration"]
        memory = [t.text for t in texts if t.stream == "memory" and t.text.strip()]
        table[name] = {
            "episodes": len(group),
            **_success_figures(group),
            "narrations": len(narration),
            "narration_names_target": _mean([target in t.text for target, t in narration]),
            "texts": len(texts),
            "ended_at_eos": _mean([t.reason == "eos" for t in texts]),
            "memory_lines": len(memory),
            "seams": SeamSummary.pooled([o.seams for o in group]).as_dict(),
            "overlap": dataclasses.asdict(Overlap.pooled([o.overlap for o in group])),
            "limit_violations": sum((o.limits for o in group), LimitViolations()).as_dict(),
            "trajectories_refused": sum(o.refused for o in group),
            "holds": sum(o.holds for o in group),
            **_plan_figures(group),
            **_gate_figures(group),
        }
    return table


def _success_figures(group: Sequence[Outcome]) -> dict[str, float | int | list[float]]:
    """The success rate, the successes and the rate's 95 % Wilson interval."""
    rate = SuccessRate(sum(o.success for o in group), len(group))
    return {"success": rate.rate, "successes": rate.successes, "success_ci95": rate.interval()}


def _gate_figures(group: Sequence[Outcome]) -> dict[str, dict[str, int]]:
    """With the gate on: its chunks by outcome and findings by reason, over the group."""
    tallies = [o.gate for o in group if o.gate is not None]
    if not tallies:
        return {}
    outcomes = {k: sum(t.outcomes[k] for t in tallies) for k in tallies[0].outcomes}
    findings = {k: sum(t.findings[k] for t in tallies) for k in tallies[0].findings}
    return {"gate_chunks": outcomes, "gate_findings": findings}


def _plan_figures(group: Sequence[Outcome]) -> dict[str, float]:
    """A two-stage policy's plan: the share of frames it was right, of episodes whose
    first plan was right (the arm at home: only the images and the instruction tell), and
    the success of the episodes whose first plan was right and of those whose first plan
    was wrong."""
    planned = [o for o in group if o.plans]
    if not planned:
        return {}
    return {
        "plan_right": _mean([right for o in planned for right in o.plans]),
        "first_plan_right": _mean([o.plans[0] for o in planned]),
        "success_first_plan_right": _mean([o.success for o in planned if o.plans[0]]),
        "success_first_plan_wrong": _mean([o.success for o in planned if not o.plans[0]]),
    }


def _mean(values: list[bool]) -> float:
    return float(np.mean(values)) if values else float("nan")


def evaluate(
    engine: Actor,
    families: Sequence[str],
    seeds: Sequence[int],
    execute: int,
    camera_size: int,
    progress: Callable[[Outcome], None] | None = None,
    link_delay: int = 0,
    true_plan: bool = False,
    limits: JointLimits | None = None,
    gate_policy: Policy = "slow",
    controller: Controller = DEFAULT_CONTROLLER,
) -> list[Outcome]:
    """Every family on every seed (seeds should be ones training never saw); limits: gate
    every chunk; controller: the trajectory controller's model (see run_episode)."""
    renderer = Renderer(camera_size, camera_size)
    outcomes = []
    for seed in seeds:
        for family in families:
            outcome = run_episode(
                engine,
                family,
                seed,
                execute,
                renderer,
                link_delay=link_delay,
                true_plan=true_plan,
                limits=limits,
                gate_policy=gate_policy,
                controller=controller,
            )
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    return outcomes
