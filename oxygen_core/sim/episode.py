"""The tabletop as a world the sim runs (oxygen_core.worlds): episodes of a task family
at a seed, the arm driven through the trajectory controller's model.

A command is an executor `Trajectory`; one executor serves every episode and is reset to
the home pose at each (the first trajectory after a reset is not a seam). A tick's step
takes the executor's command at t into the seam meter and moves the world one period;
the executor counts, as a controller would, the commanded points outside the arm's limits
(the servos clip them, so the count changes nothing in the episode). The expert's
targets for a tick go out as a one-point trajectory; a baseline (hold, random, blind, touch)
sends a chunk of `baseline_horizon` rows from the measured joints every
`baseline_execute_steps` ticks, shaped for the controller as the node would shape it:
the floor a policy's figure is read against.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller import shaping
from oxygen_core.sim import baselines
from oxygen_core.sim.arm import GRIPPER, JOINT_NAMES
from oxygen_core.sim.executor import (
    CONTROLLERS,
    DEFAULT_CONTROLLER,
    Controller,
    Trajectory,
    TrajectoryExecutor,
)
from oxygen_core.sim.expert import Expert
from oxygen_core.sim.outcome import Outcome
from oxygen_core.sim.render import Renderer
from oxygen_core.sim.seam import SeamMeter
from oxygen_core.sim.tasks import FAMILIES, Task, make_task
from oxygen_core.sim.world import World
from oxygen_core.worlds import Lines, Refused, SimActs, Tally

CAMERAS = ("base", "wrist")  # the tabletop's cameras, in the model's slot order


@dataclasses.dataclass(frozen=True)
class TabletopSettings:
    """How the tabletop runs: its rate, cameras, controller model and baselines' chunks."""

    control_rate_hz: float = 20.0
    camera_size: int = 224
    controller: Controller = DEFAULT_CONTROLLER  # the trajectory controller's model
    baseline_execute_steps: int = 2  # a baseline's chunk every this many ticks ...
    baseline_horizon: int = 10  # ... of this many rows (the node's execute and action horizons)

    def __post_init__(self) -> None:
        if not 1 <= self.baseline_execute_steps <= self.baseline_horizon:
            raise ValueError(
                f"need 1 <= baseline_execute_steps ({self.baseline_execute_steps}) <= "
                f"baseline_horizon ({self.baseline_horizon})"
            )
        if self.controller not in CONTROLLERS:
            raise ValueError(f"controller {self.controller!r} is not one of {CONTROLLERS}")
        if not self.control_rate_hz > 0:
            raise ValueError(f"control_rate_hz must be > 0, got {self.control_rate_hz}")


class Tabletop:
    """The tabletop world: one renderer and one controller model for all its episodes."""

    name = "tabletop"
    cameras = CAMERAS
    sim_policies = ("expert", *baselines.NAMES)
    episode_names = FAMILIES

    def __init__(self, settings: TabletopSettings = TabletopSettings()) -> None:
        self.settings = settings
        self.period_ns = round(NS_PER_S / settings.control_rate_hz)
        self._renderer = Renderer(settings.camera_size, settings.camera_size)
        self._executor: TrajectoryExecutor | None = None

    def episode(self, name: str, seed: int, policy: str, t_ns: int) -> TabletopEpisode:
        task = make_task(name, seed)
        world = task.new_world()
        if self._executor is None:
            self._executor = TrajectoryExecutor.of(
                world.joints, self.settings.controller, self.period_ns / NS_PER_S
            )
        self._executor.reset(world.joints, t_ns / NS_PER_S)
        return TabletopEpisode(self, task, world, self._executor, policy)

    def render(self, world: World, camera: str) -> np.ndarray:
        return self._renderer.render(world, camera)

    def close(self) -> None:
        """Nothing to free: the renderer is numpy."""


class TabletopEpisode:
    """One tabletop episode: its task, world, the shared executor, the sim-run policy."""

    def __init__(
        self,
        tabletop: Tabletop,
        task: Task,
        world: World,
        executor: TrajectoryExecutor,
        policy: str,
    ) -> None:
        self._tabletop, self.task, self.world, self.executor = tabletop, task, world, executor
        self.instruction = task.instruction
        self._dt = tabletop.period_ns / NS_PER_S
        self._max_steps = int(round(task.time_limit * NS_PER_S / tabletop.period_ns))
        self._seams = SeamMeter(self._dt, gripper=GRIPPER)
        self._expert = Expert(task, world) if policy == "expert" else None
        self._baseline = None
        if policy in baselines.NAMES:
            self._baseline = baselines.make_baseline(policy)
            self._baseline.reset(task.instruction)
        self._lines = Lines()
        self.steps = 0
        self.success = False
        # The arm's joint velocities over the last world step: what its JointState carries
        # and what a "jtc" controller with a velocity state interface starts a trajectory from.
        self.velocity = np.zeros(len(JOINT_NAMES))

    def render(self, camera: str) -> np.ndarray:
        return self._tabletop.render(self.world, camera)

    def sim_acts(self, step: int, t_ns: int) -> SimActs | None:
        if self._expert is not None:
            out = self._expert.act(self.world, self._dt)
            self._lines = Lines(out.narration, out.memory)
            shaped = shaping.Shaped(t_ns, np.zeros(1), out.targets[None, :], None)
            return SimActs(shaped, shown=shaped)
        if self._baseline is None or step % self._tabletop.settings.baseline_execute_steps:
            return None
        # float32 in and out, as a node's Observation and ActionChunk carry them.
        state = self.world.joints.astype(np.float32).astype(np.float64)
        horizon = self._tabletop.settings.baseline_horizon
        rows = self._baseline.chunk(state, step, horizon).astype(np.float32)
        # As the node would send them to this controller (no gate: the sim has no limits).
        controller = self._tabletop.settings.controller
        return SimActs(
            shaping.for_controller(controller, rows, t_ns, self._dt, arrival_ns=t_ns, limits=None)
        )

    def accept(self, command: Trajectory, now_ns: int) -> Refused | None:
        return self.executor.replace(command, now=now_ns / NS_PER_S)

    def lines(self) -> Lines:
        return self._lines

    def over(self) -> bool:
        verdict = self.task.verdict(self.world)
        self.success = verdict is True
        return verdict is not None or self.steps >= self._max_steps

    def step(self, t_ns: int) -> None:
        command = self.executor.command(t_ns / NS_PER_S, self.world.joints, self.velocity)
        self._seams.observe(command, self.executor.last_takeover)
        before = self.world.joints.copy()
        self.world.step(command, self._dt)
        self.velocity = (self.world.joints - before) / self._dt
        self.steps += 1

    def outcome(self, tally: Tally) -> Outcome:
        return Outcome(
            index=tally.index,
            episodes=tally.episodes,
            family=self.task.family,
            seed=self.task.seed,
            instruction=self.instruction,
            policy=tally.policy,
            success=self.success,
            contacts=self.task.contacts(self.world),
            start_ns=tally.start_ns,
            end_ns=tally.end_ns,
            duration_s=(tally.end_ns - tally.start_ns) / NS_PER_S,
            time_limit_s=self.task.time_limit,
            wall_s=tally.wall_s,
            steps=self.steps,
            accepted=tally.accepted,
            rejected=tally.rejected,
            seams=self._seams.summary(),
            limits=self.executor.violations,
            renders=tally.renders,
            render_wall_s=tally.render_wall_s,
            narration=tally.narration,
            memory=tally.memory,
        )
