"""How the launch files judge the node's fate, without importing launch.

`ros2 launch` keeps running as long as any action is alive or any event handler waits, so
a node that exits early (a bad parameter: exit code 2) or comes up unconfigured (a preset
that does not exist) would leave it hanging. The launch files end the launch in both
cases, and end it with an error unless the node did exit cleanly: launch returns 1 from
`LaunchService.run()` when an action raises, so the launch files raise the message made
here. Plain functions, so they are tested where launch is not installed.
"""

from __future__ import annotations

import signal

# The transitions autostart asks for, as (start state, failed goal state): a callback
# returning FAILURE sends the node back to where it was.
FAILED_TRANSITIONS = {
    ("configuring", "unconfigured"): "configure",
    ("activating", "inactive"): "activate",
}


def exit_error(executable: str, returncode: int | None) -> str | None:
    """Why a finished node ends the launch with an error; None for a clean exit."""
    if returncode == 0:
        return None
    if returncode is None:
        return f"{executable} ended without an exit code"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"{executable} was killed by {name}"
    return f"{executable} exited with code {returncode} (see its log above)"


def transition_error(node: str, start_state: str, goal_state: str) -> str | None:
    """Why a lifecycle transition ends the launch; None for any other transition."""
    failed = FAILED_TRANSITIONS.get((start_state, goal_state))
    if failed is None:
        return None
    return f"{node} failed to {failed} and is {goal_state} (see its log above)"
