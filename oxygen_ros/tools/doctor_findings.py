"""One finding of `oxygen-doctor`: a line a user reads, and a record a script reads.

Apart from the doctor and its checks, both of which use it, and free of ROS: the doctor
reports with it before it may import rclpy.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Level = Literal["ok", "warn", "FAIL"]
NOTHING = "nothing to do"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the report; `what` and `fix` are squeezed onto one line each, since a
    finding is read (and grepped) a line at a time."""

    level: Level
    check: str
    what: str
    fix: str = NOTHING

    def __post_init__(self) -> None:
        object.__setattr__(self, "what", " ".join(self.what.split()))
        object.__setattr__(self, "fix", " ".join(self.fix.split()))

    def line(self) -> str:
        return f"{self.level} {self.check}: {self.what} -> {self.fix}"
