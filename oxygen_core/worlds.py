"""What a simulated world is to the sim that runs it as a robot: one small interface.

The sim's loop (oxygen_ros.tools.sim.loop) owns everything worlds share: the episode
order, sim time and its ticks, the instruction each second, cameras on their cadence, the
inbox of a policy's commands with its link delay and overflow, the stale-stamp rule, the
reset bracket that switches the policy off and on, lockstep with a policy node, the
counts of accepted and refused commands, and the outcomes. A world (`World`) only says
what differs: how an episode is reset from a seed, what its sensors read, how a command
runs, when it is over and what its outcome records. The tabletop
(`oxygen_core.sim.episode`) and Meta-World (`oxygen_core.metaworld.episode`) are the two;
a third is one module here and one binding of its messages in oxygen_ros.tools.sim.

Commands are each world's own type (a joint trajectory, an action chunk): the loop never
looks inside one; the world's ROS binding turns messages into them and back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import numpy as np

EXTERNAL = "external"  # the policy is a node that sends commands over ROS


@dataclasses.dataclass(frozen=True)
class Refused:
    """Why a world refused a command: a kind to count by and the one-line detail."""

    kind: str
    reason: str


@dataclasses.dataclass(frozen=True)
class SimActs:
    """What a policy the sim runs itself (the expert, a baseline) sends at one tick."""

    command: Any  # the world's command, applied as a received one is
    shown: Any | None = None  # the expert's command as published on its topic (None: not)


@dataclasses.dataclass(frozen=True)
class Lines:
    """The episode's language at one tick: its phase (None: none yet) and a memory line
    on the tick that completes a sub-goal."""

    narration: str | None = None
    memory: str | None = None


@dataclasses.dataclass(frozen=True)
class Tally:
    """What the loop counted over one episode: the part of an outcome every world shares."""

    index: int
    episodes: int
    policy: str
    start_ns: int
    end_ns: int
    wall_s: float
    accepted: int
    rejected: dict[str, int]
    renders: int
    render_wall_s: float
    narration: tuple[str, ...]
    memory: tuple[str, ...]
    lockstep_timeouts: int


class WorldEpisode(Protocol):
    """One episode of a world, from its reset to its outcome."""

    instruction: str

    @property
    def steps(self) -> int:
        """World steps taken since the reset."""
        ...

    def render(self, camera: str) -> np.ndarray:
        """One of the world's cameras now, uint8 H x W x 3."""
        ...

    def sim_acts(self, step: int, t_ns: int) -> SimActs | None:
        """The sim-run policy's command at the episode's `step` (sim time t_ns); None:
        nothing this tick (or the policy is external)."""
        ...

    def accept(self, command: Any, now_ns: int) -> Refused | None:
        """Run `command` from its own start on (it supersedes what runs), or say why not."""
        ...

    def lines(self) -> Lines:
        """The episode's narration and memory at this tick."""
        ...

    def over(self) -> bool:
        """Success or the time limit: the episode ends at this tick (after the policy saw
        it)."""
        ...

    def step(self, t_ns: int) -> None:
        """One control period of what runs at sim time t_ns."""
        ...

    def outcome(self, tally: Tally) -> Any:
        """The finished episode's record (the world's own type)."""
        ...


class World(Protocol):
    """A world the sim runs: its control period, cameras, policies and episodes."""

    name: str
    period_ns: int  # one tick of sim time
    cameras: tuple[str, ...]
    sim_policies: tuple[str, ...]  # the policies the sim runs itself: the expert, baselines
    episode_names: tuple[str, ...]  # what an episode is drawn from: families, tasks

    def episode(self, name: str, seed: int, policy: str, t_ns: int) -> WorldEpisode:
        """A fresh episode of `name` at `seed` driven by `policy`, reset at sim time t_ns."""
        ...

    def close(self) -> None:
        """Free what the world holds (renderers, envs)."""
        ...


def policies(world: World) -> tuple[str, ...]:
    """Every policy a world's episode may be driven by."""
    return (EXTERNAL, *world.sim_policies)
