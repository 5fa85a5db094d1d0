"""The motion authority: the one object that decides whether anything reaches the
controller, and the one that sends holds.

The controller outputs (`topics.CONTROLLER_OUTPUTS`: ~/joint_trajectory, and
~/command_chunk for a robot whose controller takes velocities or end-effector commands) pass
only while the authority is live; everything else (~/action_chunk, language, stats) always
passes, so frames keep showing what the model would do: a dry run. It is live while the
node is active and enabled:

- enabled = the ~/enable service's last word (until it speaks, NodeConfig.starts_enabled:
  start_enabled, never with random weights) is true AND the e-stop (estop_topic, true =
  pressed) is released. The e-stop is heard through two subscriptions (`ESTOP_SOURCES`),
  since one QoS cannot hear every publisher: a transient local one reads a latched
  button's state as soon as it matches, and a volatile one hears every publisher, `ros2
  topic pub` and other volatile ones included (a transient local subscription is
  QoS-incompatible with them and would never hear their stop). The e-stop counts as
  pressed while either subscription's last word is `true`, so a duplicate arriving late
  through the other one can only press, never release.
- becoming not enabled, and a lifecycle transition away from active (`halt`), act at
  once, from the call that brought them: one hold, then nothing more to the controller.
  Someone else may drive the robot meanwhile, so nothing else from the node reaches it,
  not even a hold. `halt` lasts until the next activation (`activated`).
- becoming live again waits for the start of the next frame (`frame_starts`, on the
  worker), so no frame that began in the dry run sends its trajectory. Frames of the dry
  run left the control step a running chunk the robot never got: the resume holds once
  more (where the robot stands already), which makes the first chunk hand over from
  nothing.

Holds from anywhere else (the control step's gate streak and watchdog, a failed frame)
come through `hold` too, and pass only while live. What a hold is (the stop from the
measured joints, per controller) is the frame's (`HoldSource`): the authority asks for the
messages and says whether they went out. One lock orders every change, every hold and
every controller publish: a trajectory a frame is publishing when a stop comes goes out
before the hold or not at all, never after it. The lifecycle publishers' own gate
(`topics.LifecycleGate`) is taken inside it, never around it.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from oxygen_ros.diagnostics import NodeStats
from oxygen_ros.topics import CONTROLLER_OUTPUTS, OutputPort

ENABLED = "enabled"
ESTOP_SOURCES = ("latched", "volatile")  # the e-stop's subscriptions, by durability
RESUME_HOLD = "enabled"  # the hold's reason when a resume follows dry-run frames

Outgoing = tuple[str, Any, "str | None"]  # (output name, message, stream or controller)


class HoldSource(Protocol):
    """What a hold is: the frame's to say (oxygen_ros.frame.FrameLoop)."""

    def hold_messages(self, reason: str) -> list[Outgoing]:
        """The hold on each controller output; [] when there is nothing to hold at."""
        ...

    def held(self, reason: str, sent: bool) -> None:
        """A hold was decided (`sent`: it reached the controller outputs)."""
        ...


class MotionAuthority:
    """An `OutputPort` in front of the node's outputs that passes the controller's only
    while live, and sends every hold (module docstring)."""

    def __init__(self, port: OutputPort, stats: NodeStats, *, enabled: bool) -> None:
        """port: the outputs (the lifecycle publishers, a bag, a test's recorder).
        enabled: start_enabled."""
        self._port, self._stats = port, stats
        self._lock = threading.Lock()
        self._source: HoldSource | None = None
        self._enabled = enabled
        self._pressed = dict.fromkeys(ESTOP_SOURCES, False)  # each subscription's last word
        self._halted = True  # until activated: no frame may make it live
        self._live = False  # controller outputs pass
        self._dry = False  # a frame ran while the controller got nothing
        stats.motion_changed(self.state)

    def serve(self, source: HoldSource) -> None:
        """The frame that says what a hold is (once, as it is built)."""
        if self._source is not None:
            raise ValueError("the motion authority already serves a frame")
        self._source = source

    # ------------------------------------------------------------------ the outputs

    def publish(self, name: str, msg: Any, stream: str | None = None) -> bool:
        """Publish `msg` on output `name`; a controller output only while live."""
        if name not in CONTROLLER_OUTPUTS:
            return self._port.publish(name, msg, stream)
        with self._lock:
            return self._live and self._port.publish(name, msg, stream)

    @property
    def live(self) -> bool:
        with self._lock:
            return self._live

    def hold(self, reason: str) -> bool:
        """Hold the robot where it is (any thread), if live; whether the hold went out."""
        with self._lock:
            return self._hold(reason)

    # ------------------------------------------------------------------ the switches

    @property
    def state(self) -> str:
        """ENABLED, or "dry run: " and why (the service's reply and the diagnostics value)."""
        why = [
            w for w, on in (("disabled", not self._enabled), ("e-stop", self.estop_pressed)) if on
        ]
        return f"dry run: {' and '.join(why)}" if why else ENABLED

    @property
    def estop_pressed(self) -> bool:
        """Whether either e-stop subscription's last word is `true`."""
        return any(self._pressed.values())

    def set_enabled(self, enabled: bool) -> str:
        """The ~/enable service asked; the state after it."""
        with self._lock:
            self._enabled = enabled
            return self._changed("disabled")

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
            return self._go_dark(reason)

    def activated(self) -> None:
        """Activation, before frames start: the first frame may go live. The frames before
        it reset the control step as they ended, so no dry-run chunk is left."""
        with self._lock:
            self._halted, self._dry = False, False

    def frame_starts(self) -> None:
        """On the worker, before each frame: go live if enabled."""
        with self._lock:
            if self._halted or self._live:
                return
            if self.state != ENABLED:
                self._dry = True
                return
            self._live = True
            if self._dry:
                self._dry = False
                self._hold(RESUME_HOLD)

    # ------------------------------------------------------------------ under the lock

    def _changed(self, reason: str) -> str:
        """Go dark now if no longer enabled (going live waits for a frame); report it."""
        state = self.state
        if state != ENABLED:
            self._go_dark(reason)
        self._stats.motion_changed(state)
        return state

    def _go_dark(self, reason: str) -> bool:
        """If live: the hold, then nothing more; whether it was live."""
        if not self._live:
            return False
        try:
            self._hold(reason)
        finally:
            self._live = False
        return True

    def _hold(self, reason: str) -> bool:
        if self._source is None:
            return False
        messages = self._source.hold_messages(reason)
        if not messages:
            return False
        sent = False
        if self._live:
            for name, msg, stream in messages:
                sent = self._port.publish(name, msg, stream) or sent
        self._source.held(reason, sent)
        return sent
