"""The command a "jtc" controller runs, as the node expects it from what it sent.

Under "jtc" a trajectory starts from the robot's state when the controller takes it over.
The screen (`shaping.met`) judges the first segment from two estimates of that state:
where the running chunk's rows have the robot, and where the frame measured it. Neither
is where the robot is when the controller still runs the long first segment of the
trajectory before: one whose first point the screen moved later, or one that started
from a lagging arm. The arm follows its command, so that command is a third state to
screen from, and `ExpectedCommand` computes it: every trajectory the node sent, run by the
controller's rules (`jtc.Spline`) from the command at its take-over (the state the frame
measured for the first one). The take-over instant is known only within a window (publish
to publish + `controller_lead_s`), so it keeps one chain of trajectories taken over at
each end of the window. A hold forgets them: it starts from a state the node did not see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller import jtc
from oxygen_core.controller.shaping import Shaped

State = tuple[np.ndarray, np.ndarray]  # position, velocity


@dataclasses.dataclass
class _Chain:
    """The trajectories as the controller runs them when each takes over `lag_ns` after
    its publishing: the last two, so that an instant before the newest's take-over still
    has the one running then."""

    lag_ns: int
    splines: list[jtc.Spline]


class ExpectedCommand:
    """The controller's command at an instant, from the trajectories the node sent."""

    def __init__(self, lags_ns: Sequence[int]) -> None:
        """lags_ns: the take-over instants after publishing modelled (both ends of the
        window the controller takes a trajectory over in)."""
        self._chains = [_Chain(lag, []) for lag in sorted(set(lags_ns))]
        self._origin_ns = 0  # the chains' time zero: their first take-over

    def forget(self) -> None:
        """A hold went out, or the robot was reset: nothing sent before is running."""
        for chain in self._chains:
            chain.splines.clear()

    def states(self, at_ns: int) -> list[State]:
        """The command's position and velocity at `at_ns` in each chain that runs a
        trajectory then (none before the first take-over)."""
        found = (self._state(chain, at_ns) for chain in self._chains)
        return [state for state in found if state is not None]

    def sent(self, shaped: Shaped, published_ns: int, measured: State) -> None:
        """`shaped` went out at `published_ns`: each chain takes it over from its command
        then, or from `measured` (the frame's state) when it runs nothing."""
        if not any(chain.splines for chain in self._chains):
            self._origin_ns = published_ns
        for chain in self._chains:
            at_ns = published_ns + chain.lag_ns
            position, velocity = self._state(chain, at_ns) or measured
            chain.splines[:] = [
                *chain.splines[-1:],
                self._spline(shaped, at_ns, position, velocity),
            ]

    def _spline(
        self, shaped: Shaped, at_ns: int, position: np.ndarray, velocity: np.ndarray
    ) -> jtc.Spline:
        """`shaped` taken over at `at_ns` from (position, velocity): a zero stamp is then."""
        t = self._seconds(at_ns)
        start = t if shaped.stamp_ns == 0 else self._seconds(shaped.stamp_ns)
        return jtc.Spline(
            t,
            np.array(position, np.float64),
            np.array(velocity, np.float64),
            start + shaped.times,
            shaped.positions,
            shaped.velocities,
            None,
        )

    def _state(self, chain: _Chain, at_ns: int) -> State | None:
        t = self._seconds(at_ns)
        for spline in reversed(chain.splines):
            if t >= spline.before:
                return spline.at(t), spline.velocity(t)
        return None

    def _seconds(self, ns: int) -> float:
        return (ns - self._origin_ns) / NS_PER_S
