"""What a trajectory controller commands from a bag's trajectories, update by update.

`oxygen-bag limit-check --controller jtc` (or jtc_replacement) runs the bag's trajectories
through the sim's model of that controller (`oxygen_core.sim.executor`, rules in
`oxygen_core.controller.jtc`) at `--update-rate`, each handed over at its log time (its
arrival) and taken over at the first update from then, and counts the commanded samples
outside the limits:

- position: a sample outside [min_position, max_position];
- velocity: (c_k - c_{k-1}) / dt between two consecutive updates;
- acceleration: the change of those velocities over dt.

So the segment the controller runs from the state at each arrival, and the stop at the
end of a trajectory, are counted with the rest, which the per-point count cannot see.

Where the trajectory starts. Under "jtc" the controller takes a trajectory over from the
measured joints (oxygen_core.controller.jtc): where the bag logs joint states naming every
joint of the topic, the latest one at or before the take-over update (at most
STATE_MAX_AGE_S old), its positions moved on at its velocities for its age, and its
velocities (none logged: the controller starts at rest). The differences at that update
are taken from that state, not from the last command: the step between the two is the
tracking error, which the controller, not the sender, turns into a command (the node
plans each trajectory from the measured state as the controller will run it). Without
such a state (none logged, or none within STATE_MAX_AGE_S, or one that lacks a joint of
the topic) the arm is taken to follow its command: the state at an update is the previous
command, its velocity the last step's. A controller that interpolates from its desired
state (`interpolate_from_desired_state`, which the node's params name) reads no state: it
takes each trajectory over from its running command. Each run of trajectories between two resets
(see limit_check) starts with its first trajectory that is not a hold (stamped zero),
from the arm at rest at the joint state logged last before that trajectory (its first
point when the bag has no joint state naming every joint): there is no previous command
to take it over from, the holds before it stop an arm the reset has already moved (the
node is switched off around the sim's resets; the sim drops what arrives meanwhile), and
the controller takes that trajectory over from the state the reset left. A value counts
when it exceeds its limit by more than 1e-9; once per sample and kind, the worst joint
named, with `point` the number of updates since the running trajectory took over (0: its
arrival's).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller.jtc import JtcParams
from oxygen_core.safety.limits import JointLimits
from oxygen_core.sim.executor import Controller, Trajectory, TrajectoryExecutor
from oxygen_ros.tools.limit_findings import Finding, outside, over

# A logged joint state older than this at a take-over is not taken for the arm's: the
# node's own stale_timeout_s default, past which it does not trust a state either.
STATE_MAX_AGE_S = 0.5


@dataclasses.dataclass(frozen=True)
class JointSample:
    """One logged joint state: positions and velocities by joint name."""

    stamp_ns: int
    positions: dict[str, float]
    velocities: dict[str, float]  # empty when the message carries none


@dataclasses.dataclass(frozen=True)
class Arrival:
    """One trajectory of the bag as the controller receives it."""

    index: int  # its number on the topic, from 0
    arrival_ns: int  # its log time
    trajectory: Trajectory  # seconds; a zero stamp already resolved to the arrival
    hold: bool  # stamped zero: "stop on arrival"
    after_reset: bool  # a reset came between the trajectory before and this one
    measured: dict[str, float] | None = None  # the last joint state logged before it


class MeasuredStates:
    """The logged joint states that name every joint of a topic, in time order, as the
    controller would read them at a take-over (module docstring)."""

    def __init__(self, samples: Sequence[JointSample], names: Sequence[str]) -> None:
        kept = sorted(
            (s for s in samples if all(n in s.positions for n in names)),
            key=lambda s: s.stamp_ns,
        )
        self._stamps = np.array([s.stamp_ns for s in kept], np.int64)
        self._positions = np.array([[s.positions[n] for n in names] for s in kept], np.float64)
        moving = [s for s in kept if all(n in s.velocities for n in names)]
        self._velocities = (
            np.array([[s.velocities[n] for n in names] for s in kept], np.float64)
            if kept and len(moving) == len(kept)
            else None
        )

    def at(self, t_ns: int) -> tuple[np.ndarray, np.ndarray | None] | None:
        """(position, velocity or None) of the arm at `t_ns`; None when no state is logged
        at or before it within STATE_MAX_AGE_S."""
        i = int(np.searchsorted(self._stamps, t_ns, side="right")) - 1
        if i < 0 or t_ns - self._stamps[i] > STATE_MAX_AGE_S * NS_PER_S:
            return None
        if self._velocities is None:
            return self._positions[i].copy(), None
        age_s = (t_ns - self._stamps[i]) / NS_PER_S
        return self._positions[i] + self._velocities[i] * age_s, self._velocities[i].copy()


def sampled(
    arrivals: Sequence[Arrival],
    limits: JointLimits,
    controller: Controller,
    rate_hz: float,
    states: Sequence[JointSample] = (),
    from_desired: bool = False,
) -> tuple[list[Finding], int]:
    """The samples over a limit, and how many updates were sampled (module docstring).
    states: the bag's joint states, from which "jtc" takes trajectories over, unless it
    interpolates `from_desired` (its last command)."""
    dt_ns = round(NS_PER_S / rate_hz)
    runs = _runs(arrivals)
    read = controller == "jtc" and not from_desired
    measured = MeasuredStates(states if read else (), limits.names)
    jtc = None
    if controller == "jtc":
        jtc = JtcParams(dt_ns / NS_PER_S, interpolate_from_desired_state=from_desired)
    found: list[Finding] = []
    updates = 0
    for k, run in enumerate(runs):
        stop_ns = runs[k + 1][0].arrival_ns if k + 1 < len(runs) else None
        run_found, run_updates = _run(run, stop_ns, limits, controller, jtc, dt_ns, measured)
        found += run_found
        updates += run_updates
    return found, updates


def _runs(arrivals: Sequence[Arrival]) -> list[list[Arrival]]:
    """The arrivals cut at every reset, each run from its first trajectory not a hold."""
    runs: list[list[Arrival]] = []
    for arrival in arrivals:
        if arrival.after_reset or not runs:
            runs.append([])
        if runs[-1] or not arrival.hold:
            runs[-1].append(arrival)
    return [run for run in runs if run]


def _run(
    run: list[Arrival],
    stop_ns: int | None,
    limits: JointLimits,
    controller: Controller,
    jtc: JtcParams | None,
    dt_ns: int,
    measured: MeasuredStates,
) -> tuple[list[Finding], int]:
    """One run's samples over a limit and its number of updates: from the first update at
    or after its first arrival to the end of its last trajectory, or to the next run."""
    dt = dt_ns / NS_PER_S
    command = _start(run[0], limits.names)
    velocity = np.zeros_like(command)
    bounds = (np.stack([limits.lower, limits.upper], axis=1), limits.velocity)
    executor = TrajectoryExecutor(
        command, tuple(limits.names), bounds, controller=controller, jtc=jtc
    )
    pending = collections.deque(run)
    end_ns = max(_end_ns(a) for a in run)
    t_ns = -(-run[0].arrival_ns // dt_ns) * dt_ns
    if stop_ns is not None:
        end_ns = min(end_ns, stop_ns - 1)
    found: list[Finding] = []
    running, since, updates = -1, 0, 0
    while t_ns <= end_ns + dt_ns:
        took_over = False
        while pending and pending[0].arrival_ns <= t_ns:
            arrival = pending.popleft()
            if executor.replace(arrival.trajectory, now=t_ns / NS_PER_S) is None:
                running, since, took_over = arrival.index, 0, True
        # The controller reads the state only when it takes a trajectory over, which is
        # at this update for one accepted now.
        state = measured.at(t_ns) if took_over else None
        if state is None:  # the arm follows its command
            now = executor.command(t_ns / NS_PER_S, command, velocity)
        else:  # the controller's own step to the measured state is not counted
            now = executor.command(t_ns / NS_PER_S, *state)
            command = state[0]
            velocity = np.zeros_like(command) if state[1] is None else state[1]
        step = (now - command) / dt
        acceleration = (step - velocity) / dt
        found += outside(running, since, t_ns, now, limits)
        for kind, values, bound in (
            ("velocity", step, limits.velocity),
            ("acceleration", acceleration, limits.acceleration),
        ):
            found += over(kind, running, since, t_ns, values, bound, limits.names)
        command, velocity = now, step
        since, updates, t_ns = since + 1, updates + 1, t_ns + dt_ns
    return found, updates


def _start(arrival: Arrival, names: Sequence[str]) -> np.ndarray:
    """Where the arm stands before a run: the joint state before its first trajectory, or
    that trajectory's first point when the state does not name every joint."""
    measured = arrival.measured or {}
    if all(n in measured for n in names):
        return np.array([measured[n] for n in names], np.float64)
    first = dict(zip(arrival.trajectory.joint_names, arrival.trajectory.positions[0], strict=True))
    return np.array([first[n] for n in names], np.float64)


def _end_ns(arrival: Arrival) -> int:
    """When a trajectory's last point is due."""
    traj = arrival.trajectory
    return round((traj.start + traj.times[-1]) * NS_PER_S)
