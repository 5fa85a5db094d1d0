"""The action joints split over the trajectory controllers that own them.

A robot with two arms and two grippers (ALOHA), or arms, hands and a head (a humanoid),
runs one joint_trajectory_controller per group, and each refuses a joint it does not own
and, unless `allow_partial_joints_goal`, a goal that lacks one of its own
(validate_trajectory_msg; oxygen_core.controller.jtc). So each chunk goes out as one
trajectory per controller, with its joints only, all with the same stamp and times. The
split is decided once, at configure: every action joint in exactly one controller, and no
controller naming a joint the chunk does not command.

A controller whose joints are all setpoints (no velocity bound: a gripper) gets positions
only. The node sends setpoints no velocity (they reach every row at rest), so between two
rows they move fast, and Jazzy's controller starts a trajectory arriving then from that
measured velocity: the cubic into a row at the bound passes it. Linear segments never
leave the range of their ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from oxygen_core.controller.shaping import Shaped


@dataclasses.dataclass(frozen=True)
class ControllerJoints:
    """One trajectory controller: where its trajectories go and the joints it owns."""

    name: str
    topic: str
    joints: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Part:
    """One controller's share of a chunk: its name and the chunk's columns, in its order."""

    controller: ControllerJoints
    columns: tuple[int, ...]

    def of(self, shaped: Shaped, setpoints: np.ndarray | None = None) -> Shaped:
        """This controller's trajectory: its joints' columns of `shaped`, positions only
        when every one of them is a setpoint (`setpoints`: a mask over the chunk's
        columns, `shaping.setpoints`; None: none is)."""
        columns = list(self.columns)
        velocities = None if shaped.velocities is None else shaped.velocities[:, columns]
        if setpoints is not None and np.all(setpoints[columns]):
            velocities = None
        return dataclasses.replace(
            shaped, positions=shaped.positions[:, columns], velocities=velocities
        )


def split(action_names: Sequence[str], controllers: Sequence[ControllerJoints]) -> tuple[Part, ...]:
    """Each controller's columns of a chunk over `action_names`; a ValueError in one line
    when a controller names no joint or one not commanded, when a joint is in two
    controllers or in none, or when two controllers share a topic."""
    index = {name: i for i, name in enumerate(action_names)}
    owners: dict[str, str] = {}
    topics: dict[str, str] = {}
    for c in controllers:
        if not c.joints:
            raise ValueError(f"controllers.{c.name}.joints is empty")
        unknown = [j for j in c.joints if j not in index]
        if unknown:
            raise ValueError(
                f"controllers.{c.name}.joints names {unknown}, which the chunk does not "
                f"command (action joints: {list(action_names)})"
            )
        for joint in c.joints:
            if joint in owners:
                raise ValueError(f"joint {joint!r} is in controllers {owners[joint]} and {c.name}")
            owners[joint] = c.name
        if c.topic in topics:
            raise ValueError(f"controllers {topics[c.topic]} and {c.name} share topic {c.topic}")
        topics[c.topic] = c.name
    orphans = [name for name in action_names if name not in owners]
    if orphans:
        raise ValueError(f"action joints {orphans} are in no controller (controllers.*.joints)")
    return tuple(Part(c, tuple(index[j] for j in c.joints)) for c in controllers)
