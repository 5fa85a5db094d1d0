"""A simulated world's control loop, one tick per control period, without an rclpy node.

One loop for every world (oxygen_core.worlds: the tabletop, Meta-World); the world says
what differs and its binding (`Binding`, tools.sim.worlds) turns it into messages. Each
`tick` at sim time t:

1. the episode over at the last tick is closed (its outcome published) and the next one
   starts: a fresh episode of the world from (name, seed), its instruction published.
   With `reset_ticks` r > 0 the reset is bracketed as an operator resets a real robot: the
   policy is switched off first (`policy_switch(False)`: the oxygen node's ~/enable), the
   new world's sensors go out for r ticks while the world stands still and every command
   received is dropped as `previous_episode` (one computed from the last world, or the
   hold the node sends when switched off, would otherwise run in this one), then the
   policy is switched on and the episode begins at the next tick: its time limit,
   duration and stale-stamp rule count from there. The node, switched on, holds the robot
   once and hands its first chunk over from nothing (oxygen_ros.motion), so each episode
   starts as the in-process evaluation's does;
2. what a robot's drivers publish, stamped t: the joint states, the cameras (every
   `camera_every` ticks from the episode's first, so the first frame a policy sees of an
   episode is of its own scene), the instruction again at the first tick of each sim
   second of the episode; then /clock = t. Sensors go before the clock, so a node whose
   frame timer fires at t already has them;
3. commands: with an external policy, every command received since the last tick (or,
   with `command_delay_steps` d, received d ticks before this one: a link and actuation
   latency the policy must plan for) goes to the world, which runs it from its stamp (a
   zero stamp meaning now); one whose stamp is older than the episode is dropped as
   `previous_episode` (also one that was still waiting when the episode changed); one the
   binding or the world refuses is counted by its kind and what runs keeps running. In
   lockstep (`lockstep_ticks`, a latency sweep; tools.sim.lockstep) the tick first waits
   for the node's latest frame due. A policy the sim runs itself (the expert, a baseline)
   sends its command the same way, as a message the node would send; the expert's is
   also published on the world's expert topic, with its narration and memory lines;
4. success or the time limit ends the episode (checked after the policy saw the world, as
   `oxygen_core.sim.runner` does); otherwise the world steps one period.

Publishing goes through a `SimPort` by the keys of the world's topic table, with the
tick's sim time: the rclpy node's publishers, or a bag (`record.py`). The same loop thus
drives a live closed-loop run and a deterministic recording.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from rosgraph_msgs.msg import Clock
from std_msgs.msg import String

from oxygen_core.clock import NS_PER_S
from oxygen_core.worlds import EXTERNAL, Refused, Tally, World, WorldEpisode, policies
from oxygen_ros.convert import ns_to_stamp, stamp_to_ns
from oxygen_ros.tools.sim.lockstep import LockstepMarks, lockstep_due
from oxygen_ros.tools.sim.worlds import Binding, binding

# Sim seconds a reset's bracket lasts by default (the sim node's reset_settle_s): what
# arrives meanwhile is dropped as previous_episode (oxygen-bag limit-check leaves it out).
RESET_SETTLE_S = 0.5

_INSTRUCTION_PERIOD_NS = NS_PER_S
_INBOX_MAX = 16  # commands waiting for the next tick; a policy sends about one a frame
_GRID_PROBE_S = 0.5  # lockstep: how long a tick waits for a frame while the grid is unknown


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """One run of a simulated world (what the world itself does is its own settings)."""

    episodes: tuple[tuple[str, int], ...]  # (family or task, seed) in run order
    policy: str = EXTERNAL
    camera_rate_hz: float = 10.0
    start_s: float = 1.0  # sim time of the first tick (a zero stamp would mean "now")
    command_delay_steps: int = 0  # ticks a received command waits for the controller
    reset_ticks: int = 0  # ticks between a reset and the policy switched on (step 1)
    # > 0: lockstep with an external policy that takes a frame every this many ticks; a
    # frame not done within lockstep_timeout_s of wall time is counted and let go.
    lockstep_ticks: int = 0
    lockstep_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.episodes:
            raise ValueError("no episodes to run")
        if self.command_delay_steps < 0:
            raise ValueError(f"command_delay_steps must be >= 0, got {self.command_delay_steps}")
        if self.reset_ticks < 0:
            raise ValueError(f"reset_ticks must be >= 0, got {self.reset_ticks}")
        if self.lockstep_ticks < 0 or self.lockstep_timeout_s <= 0:
            raise ValueError("lockstep_ticks must be >= 0 and lockstep_timeout_s > 0")
        if self.lockstep_ticks and self.policy != EXTERNAL:
            raise ValueError(f"lockstep waits for an external policy, not {self.policy!r}")

    def check(self, world: World) -> None:
        """What the run asks of `world`: its policies, episodes and camera rate."""
        if self.policy not in policies(world):
            raise ValueError(f"policy {self.policy!r} is not one of {policies(world)}")
        for name, _ in self.episodes:
            if name not in world.episode_names:
                raise ValueError(
                    f"unknown {world.name} episode {name!r}; choose from {world.episode_names}"
                )
        rate_hz = NS_PER_S / world.period_ns
        if not 0 < self.camera_rate_hz <= rate_hz:
            raise ValueError(
                f"camera_rate_hz {self.camera_rate_hz} must be in (0, the control rate {rate_hz:g}]"
            )

    def camera_every(self, world: World) -> int:
        """Ticks between camera frames (the rate rounded so that frames fall on ticks)."""
        return max(1, round(NS_PER_S / world.period_ns / self.camera_rate_hz))


def episode_order(
    names: tuple[str, ...], first_seed: int, episodes: int
) -> tuple[tuple[str, int], ...]:
    """The (name, seed) pairs of a run in run order (`SimConfig.episodes`): `episodes`
    seeds from `first_seed` per family or task, interleaved seed by seed (a run cut short
    has covered every one alike)."""
    return tuple((n, s) for s in range(first_seed, first_seed + episodes) for n in names)


class SimPort(Protocol):
    def publish(self, key: str, msg: Any, time_ns: int) -> None:
        """Send `msg` on the topic of `key` (a row of the world's topics) at sim time."""
        ...


@dataclasses.dataclass
class _Episode:
    """One episode as the loop counts it, around the world's own (`sim`)."""

    index: int
    sim: WorldEpisode
    start_ns: int
    start_wall_s: float
    ticks: int = 0  # ticks since the reset, reset ticks included (the camera cadence)
    accepted: int = 0
    rejected: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    narration: list[str] = dataclasses.field(default_factory=list)
    memory: list[str] = dataclasses.field(default_factory=list)
    renders: int = 0
    render_wall_s: float = 0.0
    lockstep_timeouts: int = 0  # frames the loop stopped waiting for
    end_ns: int | None = None  # set when the episode is over
    settling: int = 0  # reset ticks left before the policy is switched on
    next_instruction_ns: int = 0  # the instruction goes out again at the first tick from here


class SimLoop:
    """A world, its cameras and a policy's commands, advanced one control tick at a time."""

    def __init__(
        self,
        world: World,
        cfg: SimConfig,
        port: SimPort,
        warn: Callable[[str], None] = lambda text: None,
        policy_switch: Callable[[bool], None] | None = None,
    ) -> None:
        """policy_switch(on): switch the external policy's commands on or off, returning
        once it has taken effect (called around resets when cfg.reset_ticks > 0)."""
        cfg.check(world)
        self.world, self.cfg = world, cfg
        self.binding: Binding = binding(world.name)
        if cfg.lockstep_ticks and not self.binding.frames_known:
            raise ValueError(f"{world.name}'s commands do not say their frame: no lockstep")
        self._port = port
        self._warn = warn
        self._policy_switch = policy_switch
        self._camera_every = cfg.camera_every(world)
        self.now_ns = round(cfg.start_s * NS_PER_S)
        self._arrived = threading.Condition()  # guards the inbox and the lockstep marks
        self._inbox: collections.deque[Any] = collections.deque(maxlen=_INBOX_MAX)
        self._overflowed = 0  # commands the full inbox dropped (written by `receive`)
        self._overflow_counted = 0  # of those, counted into an episode (by `tick`)
        self._transit: collections.deque[tuple[int, Any]] = collections.deque()
        self._frames = LockstepMarks()
        self._next = 0
        self.ticks = 0
        self.renders = 0  # camera frames rendered, every episode
        self.episode: _Episode | None = None
        self.outcomes: list[Any] = []

    @property
    def done(self) -> bool:
        return self.episode is None and self._next >= len(self.cfg.episodes)

    def receive(self, msg: Any) -> None:
        """A command from the policy (any thread); applied at the next tick. A policy
        that floods the sim loses its oldest ones beyond _INBOX_MAX, counted as
        inbox_full (each would only have superseded the one before it)."""
        with self._arrived:
            if len(self._inbox) == _INBOX_MAX:
                self._overflowed += 1
            self._inbox.append(msg)
            frame = self.binding.command_frame(msg)
            if frame is not None:
                self._frames.commanded(frame)
            self._arrived.notify_all()

    def frame_done(self, time_ns: int, frame: int) -> None:
        """The policy node finished frame `frame` of tick `time_ns` (its stats come after
        its language work; any thread): what lockstep waits for."""
        with self._arrived:
            self._frames.finished(time_ns, frame)
            self._arrived.notify_all()

    def close(self) -> None:
        self.world.close()

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
        self._port.publish("clock", Clock(clock=ns_to_stamp(t)), t)
        if ep.settling:
            self._settle(ep, t)
        else:
            self._act(ep, t)
        ep.ticks += 1
        self.now_ns += self.world.period_ns
        self.ticks += 1
        return True

    def _act(self, ep: _Episode, t: int) -> None:
        """The policy's commands, then success or the time limit, else one world step."""
        acts = ep.sim.sim_acts((t - ep.start_ns) // self.world.period_ns, t)
        if acts is not None:
            if acts.shown is not None:
                shown = self.binding.command_msg(acts.shown, t)
                self._port.publish(self.binding.shown_key, shown, t)
            self._apply(ep, self.binding.command_msg(acts.command, t), t)
        elif self.cfg.policy == EXTERNAL:
            self._await_frame(ep, t)
            self._drain_inbox(ep, t)
        self._say(ep, t)
        if ep.sim.over():
            ep.end_ns = t
        else:
            ep.sim.step(t)

    def _settle(self, ep: _Episode, t: int) -> None:
        """A reset tick (step 1): in lockstep, wait for the node's frame as every tick does
        (unwaited, the sim's clock ran ahead of the switched-off node's frame timer, whose
        frames fell off the grid lockstep had learned, and every tick after waited out its
        timeout); then drop what arrived; after the last one switch the policy on and
        begin the episode at the next tick."""
        self._await_frame(ep, t)
        self._drain_inbox(ep, t, drop=True)
        ep.settling -= 1
        if ep.settling:
            return
        if self._policy_switch is not None:
            self._policy_switch(True)
        ep.start_ns = t + self.world.period_ns
        ep.start_wall_s = time.monotonic()
        ep.next_instruction_ns = ep.start_ns + _INSTRUCTION_PERIOD_NS

    # ------------------------------------------------------------------ episodes

    def _start(self) -> None:
        name, seed = self.cfg.episodes[self._next]
        begin = time.monotonic()  # the reset's time counts into the episode's wall time
        sim = self.world.episode(name, seed, self.cfg.policy, self.now_ns)
        self.episode = _Episode(
            index=self._next,
            sim=sim,
            start_ns=self.now_ns,
            start_wall_s=begin,
            next_instruction_ns=self.now_ns + _INSTRUCTION_PERIOD_NS,
            settling=self.cfg.reset_ticks,
        )
        self._next += 1
        self._port.publish("instruction", String(data=sim.instruction), self.now_ns)

    def _finish(self, ep: _Episode) -> None:
        tally = Tally(
            index=ep.index,
            episodes=len(self.cfg.episodes),
            policy=self.cfg.policy,
            start_ns=ep.start_ns,
            end_ns=ep.end_ns,
            wall_s=time.monotonic() - ep.start_wall_s,
            accepted=ep.accepted,
            rejected=dict(sorted(ep.rejected.items())),
            renders=ep.renders,
            render_wall_s=ep.render_wall_s,
            narration=tuple(ep.narration),
            memory=tuple(ep.memory),
            lockstep_timeouts=ep.lockstep_timeouts,
        )
        outcome = ep.sim.outcome(tally)
        self.outcomes.append(outcome)
        self._port.publish("episode", self.binding.outcome_msg(outcome), self.now_ns)
        self.episode = None

    # ------------------------------------------------------------------ tick parts

    def _publish_sensors(self, ep: _Episode, t: int) -> None:
        for key, msg in self.binding.sensor_messages(ep.sim, t):
            self._port.publish(key, msg, t)
        if ep.ticks % self._camera_every == 0:
            for camera in self.world.cameras:
                begin = time.perf_counter()
                pixels = ep.sim.render(camera)
                ep.render_wall_s += time.perf_counter() - begin
                ep.renders += 1
                self.renders += 1
                key, msg = self.binding.image_message(camera, pixels, t)
                self._port.publish(key, msg, t)
        if t >= ep.next_instruction_ns:  # ticks need not fall on whole seconds (15 Hz)
            self._port.publish("instruction", String(data=ep.sim.instruction), t)
            periods = 1 + (t - ep.next_instruction_ns) // _INSTRUCTION_PERIOD_NS
            ep.next_instruction_ns += periods * _INSTRUCTION_PERIOD_NS

    def _say(self, ep: _Episode, t: int) -> None:
        """The episode's narration when it changes, each memory line once."""
        lines = ep.sim.lines()
        if lines.narration is not None and (
            not ep.narration or ep.narration[-1] != lines.narration
        ):
            ep.narration.append(lines.narration)
            self._port.publish("narration", String(data=lines.narration), t)
        if lines.memory:
            ep.memory.append(lines.memory)
            self._port.publish("memory", String(data=lines.memory), t)

    def _await_frame(self, ep: _Episode, t: int) -> None:
        """Lockstep: hold tick t until `lockstep_due` lets it go, or count a timeout and
        go on. Until the node's frame grid is known (`LockstepMarks.grid_ns`), each tick
        only waits a moment for a frame at that very tick: the one that shows the grid."""
        if not self.cfg.lockstep_ticks:
            return
        marks = self._frames
        due = functools.partial(
            lockstep_due, marks, t, self.cfg.lockstep_ticks, self.world.period_ns
        )
        with self._arrived:
            if marks.frame_ns is not None and marks.grid_ns is None:
                self._arrived.wait_for(due, _GRID_PROBE_S)
            elif not self._arrived.wait_for(due, self.cfg.lockstep_timeout_s):
                ep.lockstep_timeouts += 1
                marks.let_go(t)
                self._warn(f"no frame done within {self.cfg.lockstep_timeout_s:g} s: going on")

    def _drain_inbox(self, ep: _Episode, t: int, drop: bool = False) -> None:
        """Every command whose delay is over (received since the last tick when there is
        none), then what the full inbox lost. `drop`: a reset tick's, each counted as
        previous_episode, the ones still in transit too."""
        with self._arrived:
            arrived = list(self._inbox)
            self._inbox.clear()
            overflowed = self._overflowed
        for msg in arrived:
            self._transit.append((self.ticks + self.cfg.command_delay_steps, msg))
        while self._transit and (drop or self._transit[0][0] <= self.ticks):
            msg = self._transit.popleft()[1]
            if drop:
                ep.rejected["previous_episode"] += 1
            else:
                self._apply(ep, msg, t)
        if overflowed > self._overflow_counted:
            ep.rejected["inbox_full"] += overflowed - self._overflow_counted
            self._overflow_counted = overflowed

    def _apply(self, ep: _Episode, msg: Any, t: int) -> None:
        """Hand one command to the world, or count why not."""
        start = stamp_to_ns(msg.header.stamp) or t  # a zero stamp means "now"
        if start < ep.start_ns:  # sent for the previous episode's world
            ep.rejected["previous_episode"] += 1
            return
        command = self.binding.command_of(msg, start)
        refused = command if isinstance(command, Refused) else ep.sim.accept(command, t)
        if refused is None:
            ep.accepted += 1
            return
        ep.rejected[refused.kind] += 1
        self._warn(f"command refused ({refused.kind}), holding: {refused.reason}")
