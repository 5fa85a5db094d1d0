"""The worlds a sim hosts, each by its binding: what the world's episodes are as ROS.

A binding (`Binding`) is all a world adds on the ROS side of the one loop and the one
host (tools.sim.loop, tools.sim.node): its topic table, its sensor, command and outcome
messages, its own node parameters and how they build the world, and the run's summary
line. `binding(name)` imports a world's module only when asked, so the tabletop never
loads MuJoCo.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from oxygen_core.train.records import Dart
from oxygen_core.worlds import Refused, World, WorldEpisode
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.tools.commands import ALOHA, METAWORLD, TABLETOP
from oxygen_ros.tools.sim_host import SimTopic

_MODULES = {
    TABLETOP: "oxygen_ros.tools.sim.tabletop",
    METAWORLD: "oxygen_ros.tools.sim.metaworld",
    ALOHA: "oxygen_ros.tools.sim.aloha",
}
WORLDS = tuple(_MODULES)


class Binding(Protocol):
    """A world's messages and node parameters."""

    name: str
    world_class: type  # the world (oxygen_core.worlds.World): its policies, names, period
    node_name: str
    topics: tuple[SimTopic, ...]  # what the sim publishes, by key
    names_parameter: ParamDoc  # the families or tasks a run draws its episodes from
    parameters: tuple[ParamDoc, ...]  # the world's own node parameters
    command: ParamDoc  # the external policy's command topic, or a list of them, a parameter
    command_class: type
    shown_key: str  # the topic key of the expert's commands
    frames_known: bool  # whether a command says which frame of the node it came from
    summary_doc: str  # `oxygen-sim --world NAME --help`'s first paragraph
    examples: Sequence[str]

    def world(self, p: dict[str, Any]) -> World:
        """The world as the node's parameters `p` set it up."""
        ...

    def sensor_messages(self, sim: WorldEpisode, t_ns: int) -> Iterable[tuple[str, Any]]:
        """The drivers' messages but cameras at tick t_ns, by topic key."""
        ...

    def image_message(self, camera: str, pixels: Any, t_ns: int) -> tuple[str, Any]:
        """One camera's frame, by its topic key."""
        ...

    def command_msg(self, command: Any, t_ns: int) -> Any:
        """A sim-run policy's command as the node would send it."""
        ...

    def command_of(self, msg: Any, start_ns: int) -> Any | Refused:
        """A received command message as the world's command starting at start_ns, or
        why it cannot be one."""
        ...

    def command_frame(self, msg: Any) -> int | None:
        """The node's frame a command came from (None: it does not say)."""
        ...

    def outcome_msg(self, outcome: Any) -> Any:
        """A finished episode's record as the message on the "episode" key."""
        ...

    def outcome_line(self, outcome: Any) -> str:
        """One finished episode in a line (logged as it ends)."""
        ...

    def summary(self, outcomes: Sequence[Any]) -> str:
        """The run's world-specific figures (success per family or task, rejections)."""
        ...


def binding(name: str) -> Binding:
    """The binding of world `name` (one of WORLDS)."""
    if name not in _MODULES:
        raise ValueError(f"unknown world {name!r}; choose one of {', '.join(WORLDS)}")
    return importlib.import_module(_MODULES[name]).BINDING


def expert_noise(p: dict[str, Any], dart: Dart) -> Dart | None:
    """The expert's DART bursts the sim node's `expert_noise` sigma asks for (None: 0), in
    the world's `dart` otherwise; ValueError for a negative sigma or one on another policy."""
    sigma = p["expert_noise"]
    if sigma < 0 or (sigma > 0 and p["policy"] != "expert"):
        raise ValueError(f"expert_noise {sigma}: 0 or more, and only for policy expert")
    return dataclasses.replace(dart, sigma=sigma) if sigma > 0 else None
