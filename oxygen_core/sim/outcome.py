"""What the sim knows about a finished episode: the content of an EpisodeOutcome message.

A plain record, so the sim loop fills it without ROS and the evaluation reads it back
(oxygen_ros.tools.sim.messages.outcome_msg / outcome_of are the message's two directions).
"""

from __future__ import annotations

import dataclasses

from oxygen_core.sim.executor import LimitViolations
from oxygen_core.sim.seam import SeamSummary
from oxygen_core.sim.tasks import Contacts


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the sim knows about a finished episode (the message's content)."""

    index: int
    episodes: int
    family: str
    seed: int
    instruction: str
    policy: str
    success: bool
    contacts: Contacts  # how the target got where it is (grasp, release, pushes)
    start_ns: int
    end_ns: int
    duration_s: float
    time_limit_s: float
    wall_s: float
    steps: int
    accepted: int
    rejected: dict[str, int]
    seams: SeamSummary
    limits: LimitViolations  # commanded points outside the arm's limits
    renders: int
    render_wall_s: float
    narration: tuple[str, ...]
    memory: tuple[str, ...]
