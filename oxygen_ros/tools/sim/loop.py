"""The simulated robot's control loop, one tick per control period, without an rclpy node.

Each `tick` at sim time t:

1. the episode over at the last tick is closed (its outcome published) and the next one
   starts: a fresh world from (family, seed), the executor reset to the home pose (the
   first trajectory after a reset is not a seam), the instruction published. With
   `reset_ticks` r > 0 the reset is bracketed as an operator resets a real robot: the
   policy is switched off first (`policy_switch(False)`: the oxygen node's ~/enable), the
   new world's sensors go out for r ticks while the world stands still and every
   trajectory received is dropped as `previous_episode` (one computed from the last
   world, or the hold the node sends when switched off, would otherwise run in this one),
   then the policy is switched on and the episode begins at the next tick: its time limit,
   duration and stale-stamp rule count from there. The node, switched on, holds the robot
   once and hands its first chunk over from nothing (oxygen_ros.motion), so each
   episode starts as the in-process evaluation's does;
2. what a robot's drivers publish, stamped t: the joint states, the cameras (every
   `camera_every` ticks), the instruction again at the first tick of each sim second of
   the episode; then /clock = t. Sensors go before the clock, so a node whose frame timer
   fires at t already has them;
3. trajectories: with an external policy, every JointTrajectory received since the last
   tick (or, with `command_delay_steps` d, received d ticks before this one: a link and
   actuation latency the policy must plan for) goes to the executor (`replace` at its
   stamp, a zero stamp meaning now); one whose stamp is older than the episode is dropped
   as `previous_episode` (also one that was still waiting when the episode changed); a
   rejected one is counted by the executor's `Rejection.kind` and the arm keeps its
   current command. With the expert, its targets for this tick are wrapped as a one-point
   trajectory and go the same way (and are published, with its narration and memory
   lines, on /sim/expert/...). With a baseline (`oxygen_core.sim.baselines`: hold,
   random, blind), every `baseline_execute_steps` ticks its chunk of `baseline_horizon`
   rows from the measured joints goes the same way, as the in-process evaluation's
   `BaselineActor` sends it: the floor a policy's figure is read against, on this path;
4. success or the time limit ends the episode (checked after the policy saw the world, as
   `oxygen_core.sim.runner` does); otherwise the executor's command at t goes into the seam
   meter and the world steps one period. The executor counts, as a controller would, the
   commanded points outside the arm's limits (`LimitViolations`, in the outcome); the
   servos clip them, so the count changes nothing in the episode.

Publishing goes through a `SimPort` by the keys of `messages.SIM_TOPICS`, with the tick's
sim time: the rclpy node's publishers, or a bag (`record.py`). The same loop thus drives a
live closed-loop run and a deterministic recording.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from trajectory_msgs.msg import JointTrajectory

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller import shaping
from oxygen_core.sim import baselines
from oxygen_core.sim.arm import GRIPPER, JOINT_NAMES
from oxygen_core.sim.executor import CONTROLLERS, DEFAULT_CONTROLLER, Controller, TrajectoryExecutor
from oxygen_core.sim.expert import Expert
from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.seam import SeamMeter
from oxygen_core.sim.tasks import FAMILIES, Task, make_task
from oxygen_core.sim.world import World
from oxygen_ros import convert
from oxygen_ros.tools.sim import messages as m

SIM_DRIVEN = ("expert", *baselines.NAMES)  # policies the sim runs itself (no node)
POLICIES = ("external", *SIM_DRIVEN)
_INSTRUCTION_PERIOD_NS = NS_PER_S
_INBOX_MAX = 16  # trajectories waiting for the next tick; a policy sends about one a frame


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """One run of the simulated robot."""

    episodes: tuple[tuple[str, int], ...]  # (family, seed) in run order
    policy: str = "external"
    control_rate_hz: float = 20.0
    camera_rate_hz: float = 10.0
    camera_size: int = 224
    start_s: float = 1.0  # sim time of the first tick (a zero stamp would mean "now")
    command_delay_steps: int = 0  # ticks a received trajectory waits for the controller
    controller: Controller = DEFAULT_CONTROLLER  # the trajectory controller's model
    reset_ticks: int = 0  # ticks between a reset and the policy switched on (step 1)
    baseline_execute_steps: int = 2  # a baseline's chunk every this many ticks ...
    baseline_horizon: int = 10  # ... of this many rows (the node's execute and action horizons)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy {self.policy!r} is not one of {POLICIES}")
        if not self.episodes:
            raise ValueError("no episodes to run")
        if not 1 <= self.baseline_execute_steps <= self.baseline_horizon:
            raise ValueError(
                f"need 1 <= baseline_execute_steps ({self.baseline_execute_steps}) <= "
                f"baseline_horizon ({self.baseline_horizon})"
            )
        if self.controller not in CONTROLLERS:
            raise ValueError(f"controller {self.controller!r} is not one of {CONTROLLERS}")
        if self.command_delay_steps < 0:
            raise ValueError(f"command_delay_steps must be >= 0, got {self.command_delay_steps}")
        if self.reset_ticks < 0:
            raise ValueError(f"reset_ticks must be >= 0, got {self.reset_ticks}")
        for family, _ in self.episodes:
            if family not in FAMILIES:
                raise ValueError(f"unknown task family {family!r}; choose from {FAMILIES}")
        if not 0 < self.camera_rate_hz <= self.control_rate_hz:
            raise ValueError(
                f"camera_rate_hz {self.camera_rate_hz} must be in (0, control_rate_hz "
                f"{self.control_rate_hz}]"
            )

    @property
    def period_ns(self) -> int:
        return round(NS_PER_S / self.control_rate_hz)

    @property
    def camera_every(self) -> int:
        """Ticks between camera frames (the camera rate rounded to a divisor of the control
        rate, so frames fall on ticks)."""
        return max(1, round(self.control_rate_hz / self.camera_rate_hz))


def episode_order(
    families: tuple[str, ...], first_seed: int, episodes: int
) -> tuple[tuple[str, int], ...]:
    """The (family, seed) pairs of a run in run order (`SimConfig.episodes`): `episodes`
    seeds from `first_seed` per family, families interleaved seed by seed (a run cut short
    has covered every family alike)."""
    return tuple((f, s) for s in range(first_seed, first_seed + episodes) for f in families)


class SimPort(Protocol):
    def publish(self, key: str, msg: Any, time_ns: int) -> None:
        """Send `msg` on the topic of `key` (a row of SIM_TOPICS) at sim time `time_ns`."""
        ...


@dataclasses.dataclass
class _Episode:
    index: int
    task: Task
    world: World
    start_ns: int
    start_wall_s: float
    max_steps: int  # world steps until the time limit
    seams: SeamMeter
    expert: Expert | None
    baseline: baselines.Baseline | None
    steps: int = 0
    accepted: int = 0
    rejected: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    narration: list[str] = dataclasses.field(default_factory=list)
    memory: list[str] = dataclasses.field(default_factory=list)
    success: bool = False
    renders: int = 0
    render_wall_s: float = 0.0
    end_ns: int | None = None  # set when the episode is over
    settling: int = 0  # reset ticks left before the policy is switched on
    next_instruction_ns: int = 0  # the instruction goes out again at the first tick from here
    # The arm's joint velocities over the last world step: what its JointState carries and
    # what a "jtc" controller with a velocity state interface starts a trajectory from.
    velocity: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(len(JOINT_NAMES)))


class SimLoop:
    """The world, its executor and its cameras, advanced one control tick at a time."""

    def __init__(
        self,
        cfg: SimConfig,
        port: SimPort,
        warn: Callable[[str], None] = lambda text: None,
        policy_switch: Callable[[bool], None] | None = None,
    ) -> None:
        """policy_switch(on): switch the external policy's commands on or off, returning
        once it has taken effect (called around resets when cfg.reset_ticks > 0)."""
        self.cfg = cfg
        self._port = port
        self._warn = warn
        self._policy_switch = policy_switch
        self._renderer = Renderer(cfg.camera_size, cfg.camera_size)
        self._dt = cfg.period_ns / NS_PER_S
        self.now_ns = round(cfg.start_s * NS_PER_S)
        self._inbox: collections.deque[JointTrajectory] = collections.deque(maxlen=_INBOX_MAX)
        self._overflowed = 0  # trajectories the full inbox dropped (written by `receive`)
        self._overflow_counted = 0  # of those, counted into an episode (by `tick`)
        self._transit: collections.deque[tuple[int, JointTrajectory]] = collections.deque()
        self._next = 0
        self.ticks = 0
        self.episode: _Episode | None = None
        self.executor: TrajectoryExecutor | None = None
        self.outcomes: list[Outcome] = []

    @property
    def done(self) -> bool:
        return self.episode is None and self._next >= len(self.cfg.episodes)

    def receive(self, msg: JointTrajectory) -> None:
        """A trajectory from the policy (any thread); applied at the next tick. A policy
        that floods the sim loses its oldest ones beyond _INBOX_MAX, counted as
        inbox_full (each would only have superseded the one before it)."""
        if len(self._inbox) == _INBOX_MAX:
            self._overflowed += 1
        self._inbox.append(msg)

    def tick(self) -> bool:
        """One control period; False once every episode has ended (nothing was done)."""
        if self.episode is None or self.episode.end_ns is not None:
            if self.episode is not None:
                self._finish(self.episode)
            if self._next >= len(self.cfg.episodes):
                return False
            if self.cfg.reset_ticks and self._policy_switch is not None:
                self._policy_switch(False)
            self._start()
        ep, t = self.episode, self.now_ns
        self._publish_sensors(ep, t)
        self._port.publish("clock", m.clock_msg(t), t)
        if ep.settling:
            self._settle(ep, t)
        else:
            self._act(ep, t)
        self.now_ns += self.cfg.period_ns
        self.ticks += 1
        return True

    def _act(self, ep: _Episode, t: int) -> None:
        """The policy's commands, then success or the time limit, else one world step."""
        if ep.expert is not None:
            self._expert_acts(ep, t)
        elif ep.baseline is not None:
            self._baseline_acts(ep, t)
        else:
            self._drain_inbox(ep, t)
        success = bool(ep.task.succeeded(ep.world))
        if success or ep.steps >= ep.max_steps:
            ep.success, ep.end_ns = success, t
        else:
            command = self.executor.command(t / NS_PER_S, ep.world.joints, ep.velocity)
            ep.seams.observe(command, self.executor.last_takeover)
            before = ep.world.joints.copy()
            ep.world.step(command, self._dt)
            ep.velocity = (ep.world.joints - before) / self._dt
            ep.steps += 1

    def _settle(self, ep: _Episode, t: int) -> None:
        """A reset tick (step 1): drop what arrived; after the last one switch the policy
        on and begin the episode at the next tick."""
        self._drain_inbox(ep, t, drop=True)
        ep.settling -= 1
        if ep.settling:
            return
        if self._policy_switch is not None:
            self._policy_switch(True)
        ep.start_ns = t + self.cfg.period_ns
        ep.start_wall_s = time.monotonic()
        ep.next_instruction_ns = ep.start_ns + _INSTRUCTION_PERIOD_NS

    # ------------------------------------------------------------------ episodes

    def _start(self) -> None:
        family, seed = self.cfg.episodes[self._next]
        task = make_task(family, seed)
        world = task.new_world()
        expert = Expert(task, world) if self.cfg.policy == "expert" else None
        baseline = None
        if self.cfg.policy in baselines.NAMES:
            baseline = baselines.make_baseline(self.cfg.policy)
            baseline.reset(task.instruction)
        self.episode = _Episode(
            index=self._next,
            task=task,
            world=world,
            start_ns=self.now_ns,
            start_wall_s=time.monotonic(),
            max_steps=int(round(task.time_limit * NS_PER_S / self.cfg.period_ns)),
            seams=SeamMeter(self._dt, gripper=GRIPPER),
            expert=expert,
            baseline=baseline,
            next_instruction_ns=self.now_ns + _INSTRUCTION_PERIOD_NS,
            settling=self.cfg.reset_ticks,
        )
        self._next += 1
        if self.executor is None:
            self.executor = TrajectoryExecutor.of(world.joints, self.cfg.controller, self._dt)
        self.executor.reset(world.joints, self.now_ns / NS_PER_S)
        self._port.publish("instruction", m.string_msg(task.instruction), self.now_ns)

    def _finish(self, ep: _Episode) -> None:
        outcome = Outcome(
            index=ep.index,
            episodes=len(self.cfg.episodes),
            family=ep.task.family,
            seed=ep.task.seed,
            instruction=ep.task.instruction,
            policy=self.cfg.policy,
            success=ep.success,
            contacts=ep.task.contacts(ep.world),
            start_ns=ep.start_ns,
            end_ns=ep.end_ns,
            duration_s=(ep.end_ns - ep.start_ns) / NS_PER_S,
            time_limit_s=ep.task.time_limit,
            wall_s=time.monotonic() - ep.start_wall_s,
            steps=ep.steps,
            accepted=ep.accepted,
            rejected=dict(sorted(ep.rejected.items())),
            seams=ep.seams.summary(),
            limits=self.executor.violations,
            renders=ep.renders,
            render_wall_s=ep.render_wall_s,
            narration=tuple(ep.narration),
            memory=tuple(ep.memory),
        )
        self.outcomes.append(outcome)
        self._port.publish("episode", m.outcome_msg(outcome), self.now_ns)
        self.episode = None

    # ------------------------------------------------------------------ tick parts

    def _publish_sensors(self, ep: _Episode, t: int) -> None:
        joint_state = m.joint_state_msg(ep.world.joints, t, ep.velocity)
        self._port.publish("joint_states", joint_state, t)
        if self.ticks % self.cfg.camera_every == 0:
            for camera in m.CAMERAS:
                begin = time.perf_counter()
                pixels = self._renderer.render(ep.world, camera)
                ep.render_wall_s += time.perf_counter() - begin
                ep.renders += 1
                msg = m.image_msg(pixels, t, f"{camera}_camera_optical_frame")
                self._port.publish(f"camera/{camera}", msg, t)
        if t >= ep.next_instruction_ns:  # ticks need not fall on whole seconds (15 Hz)
            self._port.publish("instruction", m.string_msg(ep.task.instruction), t)
            periods = 1 + (t - ep.next_instruction_ns) // _INSTRUCTION_PERIOD_NS
            ep.next_instruction_ns += periods * _INSTRUCTION_PERIOD_NS

    def _expert_acts(self, ep: _Episode, t: int) -> None:
        out = ep.expert.act(ep.world, self._dt)
        if not ep.narration or ep.narration[-1] != out.narration:
            ep.narration.append(out.narration)
            self._port.publish("narration", m.string_msg(out.narration), t)
        if out.memory:
            ep.memory.append(out.memory)
            self._port.publish("memory", m.string_msg(out.memory), t)
        msg = m.trajectory_msg([0.0], out.targets[None, :], t)
        self._port.publish("expert_trajectory", msg, t)
        self._apply(ep, msg, t)

    def _baseline_acts(self, ep: _Episode, t: int) -> None:
        step = (t - ep.start_ns) // self.cfg.period_ns
        if step % self.cfg.baseline_execute_steps:
            return
        # float32 in and out, as a node's Observation and ActionChunk carry them.
        state = ep.world.joints.astype(np.float32).astype(np.float64)
        rows = ep.baseline.chunk(state, step, self.cfg.baseline_horizon).astype(np.float32)
        # As the node would send them to this controller (no gate: the sim has no limits).
        shaped = shaping.for_controller(
            self.cfg.controller, rows, t, self._dt, arrival_ns=t, limits=None
        )
        self._apply(ep, convert.shaped_trajectory_msg(JOINT_NAMES, shaped), t)

    def _drain_inbox(self, ep: _Episode, t: int, drop: bool = False) -> None:
        """Every trajectory whose delay is over (received since the last tick when there is
        none), then what the full inbox lost. `drop`: a reset tick's, each counted as
        previous_episode, the ones still in transit too."""
        while self._inbox:
            self._transit.append((self.ticks + self.cfg.command_delay_steps, self._inbox.popleft()))
        while self._transit and (drop or self._transit[0][0] <= self.ticks):
            msg = self._transit.popleft()[1]
            if drop:
                ep.rejected["previous_episode"] += 1
            else:
                self._apply(ep, msg, t)
        overflowed = self._overflowed
        if overflowed > self._overflow_counted:
            ep.rejected["inbox_full"] += overflowed - self._overflow_counted
            self._overflow_counted = overflowed

    def _apply(self, ep: _Episode, msg: JointTrajectory, t: int) -> None:
        """Hand one trajectory to the executor, or count why not."""
        start = convert.stamp_to_ns(msg.header.stamp) or t  # a zero stamp means "now"
        if start < ep.start_ns:  # sent for the previous episode's world
            ep.rejected["previous_episode"] += 1
            return
        rejection = self.executor.replace(m.trajectory_of(msg, start), now=t / NS_PER_S)
        if rejection is None:
            ep.accepted += 1
            return
        ep.rejected[rejection.kind] += 1
        self._warn(f"trajectory rejected, holding position: {rejection.reason}")
