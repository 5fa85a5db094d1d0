"""The e-stop's two subscriptions in MotionSwitch: pressed while either's last word is true.

A latched publisher's messages arrive through both subscriptions, in order within each but
in any order between them; whatever the interleaving, a duplicate may only press.
"""

from __future__ import annotations

from oxygen_ros.diagnostics import NodeStats
from oxygen_ros.motion_switch import ENABLED, MotionSwitch
from oxygen_ros.topics import ACTION_CHUNK, COMMAND_CHUNK, JOINT_TRAJECTORY, ControllerGate


class Port:
    """Records what passes the gate (the lifecycle publishers are the node's)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def publish(self, name: str, msg: object, stream: str | None = None) -> bool:
        self.sent.append(msg)
        return True


def live_switch() -> tuple[MotionSwitch, Port]:
    port = Port()
    gate = ControllerGate(port)
    switch = MotionSwitch(
        gate,
        lambda reason: gate.publish(JOINT_TRAJECTORY, f"hold:{reason}"),
        NodeStats(),
        enabled=True,
    )
    switch.activated()
    switch.frame_starts()
    return switch, port


def test_a_volatile_press_stops_with_one_hold_and_its_release_resumes():
    switch, port = live_switch()
    assert switch.set_estop(True, "volatile") == "dry run: e-stop"
    assert port.sent == ["hold:e-stop"]
    assert switch.set_estop(False, "volatile") == ENABLED


def test_a_late_duplicate_of_a_press_presses_again_and_never_releases_early():
    switch, _ = live_switch()
    # press, release, press from a latched publisher: the volatile copy runs ahead.
    for pressed in (True, False, True):
        switch.set_estop(pressed, "volatile")
    assert switch.set_estop(True, "latched") == "dry run: e-stop"
    assert switch.set_estop(False, "latched") == "dry run: e-stop"  # volatile's last: true
    assert switch.set_estop(True, "latched") == "dry run: e-stop"


def test_released_only_when_both_last_words_are_false():
    switch, _ = live_switch()
    switch.set_estop(True, "latched")  # a button latched pressed before the node joined
    assert switch.set_estop(False, "volatile") == "dry run: e-stop"
    assert switch.set_estop(False, "latched") == ENABLED


def test_while_stopped_no_controller_output_passes_and_the_chunk_for_watching_does():
    switch, port = live_switch()
    gate = switch._gate
    switch.set_estop(True, "volatile")
    port.sent.clear()
    assert not gate.publish(COMMAND_CHUNK, "velocities")
    assert not gate.publish(JOINT_TRAJECTORY, "positions")
    assert gate.publish(ACTION_CHUNK, "chunk")
    assert port.sent == ["chunk"]
