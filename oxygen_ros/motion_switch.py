"""Whether the controller gets trajectories: the ~/enable service, the e-stop, the lifecycle.

Enabled = the ~/enable service's last word (until it speaks, NodeConfig.starts_enabled:
start_enabled, never with random weights) is true AND the e-stop (estop_topic, true =
pressed) is released. The e-stop is heard through two subscriptions (`ESTOP_SOURCES`), since
one QoS cannot hear every publisher: a transient local one reads a latched button's state as
soon as it matches, and a volatile one hears every publisher, `ros2 topic pub` and other
volatile ones included (a transient local subscription is QoS-incompatible with them and
would never hear their stop). A latched publisher's live messages reach both. The e-stop
counts as pressed while either subscription's last word is `true`, so a duplicate arriving
late through the other one can only press, never release. Becoming not enabled acts at once,
from the callback that brought it, not at the next frame: one hold to the controller
(FrameLoop.hold, reason "disabled" or "e-stop"), then nothing more on the controller output
(topics.ControllerGate, which makes the two one step against a frame publishing on the
worker). Frames keep running and ~/action_chunk keeps showing what the model would do: a dry
run. Someone else may drive the robot meanwhile, so nothing else from the node reaches the
controller, not even a hold.

Becoming enabled again acts at the start of the next frame, on the worker (`frame_starts`),
so no frame that began in the dry run sends its trajectory. Frames of the dry run left the
frame loop a running chunk the robot never got: the resume then holds once more (where the
robot stands already), which makes the first chunk hand over from nothing.

A lifecycle transition away from active (`halt`) stops the same way with its own reason,
and nothing resumes until the next activation (`activated`), at its first frame. One lock
orders every change, and is taken before the gate's, never after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from oxygen_ros.diagnostics import NodeStats
from oxygen_ros.topics import ControllerGate

ENABLED = "enabled"
ESTOP_SOURCES = ("latched", "volatile")  # the e-stop's subscriptions, by durability
RESUME_HOLD = "enabled"  # the hold's reason when a resume follows dry-run frames


class MotionSwitch:
    """The enable service and the e-stop in front of the controller output (module doc)."""

    def __init__(
        self,
        gate: ControllerGate,
        hold: Callable[[str], bool],
        stats: NodeStats,
        *,
        enabled: bool,
    ) -> None:
        """hold: FrameLoop.hold. enabled: start_enabled."""
        self._gate, self._hold, self._stats = gate, hold, stats
        self._lock = threading.Lock()
        self._enabled = enabled
        self._pressed = dict.fromkeys(ESTOP_SOURCES, False)  # each subscription's last word
        self._halted = True  # until activated: no frame may resume the controller output
        self._dry = False  # a frame ran while the controller got nothing
        stats.motion_changed(self.state)

    @property
    def state(self) -> str:
        """ENABLED, or "dry run: " and why (the service's reply and the diagnostics value)."""
        why = [
            w for w, on in (("disabled", not self._enabled), ("e-stop", self.estop_pressed)) if on
        ]
        return f"dry run: {' and '.join(why)}" if why else ENABLED

    def set_enabled(self, enabled: bool) -> str:
        """The ~/enable service asked; the state after it."""
        with self._lock:
            self._enabled = enabled
            return self._changed("disabled")

    @property
    def estop_pressed(self) -> bool:
        """Whether either e-stop subscription's last word is `true`."""
        return any(self._pressed.values())

    def set_estop(self, pressed: bool, source: str) -> str:
        """The e-stop topic said, through the subscription `source` (one of
        ESTOP_SOURCES); the state after it."""
        with self._lock:
            self._pressed[source] = pressed
            return self._changed("e-stop")

    def halt(self, reason: str) -> bool:
        """A transition away from active (any thread): hold, then nothing reaches the
        controller until `activated`; whether the controller output was live."""
        with self._lock:
            self._halted = True
            return self._gate.stop(lambda: self._hold(reason))

    def activated(self) -> None:
        """Activation, before the worker starts: its first frame may resume. The worker
        before it reset the frame loop as it ended, so no dry-run chunk is left."""
        with self._lock:
            self._halted, self._dry = False, False

    def frame_starts(self) -> None:
        """On the worker, before each frame: resume the controller output if enabled."""
        with self._lock:
            if self._halted or self._gate.live:
                return
            if self.state != ENABLED:
                self._dry = True
                return
            self._gate.start()
            if self._dry:
                self._dry = False
                self._hold(RESUME_HOLD)

    def _changed(self, reason: str) -> str:
        """Stop now if no longer enabled (a resume waits for the next frame); report it."""
        state = self.state
        if state != ENABLED:
            self._gate.stop(lambda: self._hold(reason))
        self._stats.motion_changed(state)
        return state
