"""The motion authority (oxygen_ros.motion): what reaches the controller, and every hold.

The e-stop's two subscriptions: pressed while either's last word is true (a latched
publisher's messages arrive through both, in order within each but in any order between
them; whatever the interleaving, a duplicate may only press). The controller outputs pass
only while live; a stop sends one hold and then nothing; holds from anywhere pass only while
live; and under e-stop, disable, outage and gate-streak holds and frames from several
threads at once, nothing but a stop's own hold reaches the controller while stopped.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from node_harness import wait_until

from oxygen_ros.diagnostics import NodeStats
from oxygen_ros.motion import ENABLED, MotionAuthority
from oxygen_ros.topics import ACTION_CHUNK, COMMAND_CHUNK, JOINT_TRAJECTORY


class Port:
    """Records what passes (the lifecycle publishers are the node's) and, for each
    controller message, whether the authority was enabled as it went out (the port is
    called under the authority's lock, so that is the state it was sent in)."""

    def __init__(self) -> None:
        self.sent: list[object] = []
        self.enabled_then: list[bool] = []
        self.authority: MotionAuthority | None = None

    def publish(self, name: str, msg: object, stream: str | None = None) -> bool:
        self.sent.append(msg)
        if name != ACTION_CHUNK and self.authority is not None:
            self.enabled_then.append(self.authority.state == ENABLED)
        return True


class Holds:
    """The frame's side of a hold: one trajectory named by its reason."""

    def __init__(self) -> None:
        self.decided: list[tuple[str, bool]] = []

    def hold_messages(self, reason: str) -> list:
        return [(JOINT_TRAJECTORY, f"hold:{reason}", None)]

    def held(self, reason: str, sent: bool) -> None:
        self.decided.append((reason, sent))


def live_authority(enabled: bool = True) -> tuple[MotionAuthority, Port, Holds]:
    port, holds = Port(), Holds()
    authority = MotionAuthority(port, NodeStats(), enabled=enabled)
    authority.serve(holds)
    port.authority = authority
    authority.activated()
    authority.frame_starts()
    return authority, port, holds


def test_nothing_reaches_the_controller_before_the_first_frame_after_activation():
    port = Port()
    authority = MotionAuthority(port, NodeStats(), enabled=True)
    authority.serve(Holds())
    assert not authority.publish(JOINT_TRAJECTORY, "t0")  # never activated
    authority.activated()
    assert not authority.hold("watchdog") and not authority.live
    authority.frame_starts()
    assert authority.publish(JOINT_TRAJECTORY, "t1") and port.sent == ["t1"]


def test_a_volatile_press_stops_with_one_hold_and_its_release_resumes_at_a_frame():
    authority, port, holds = live_authority()
    assert authority.set_estop(True, "volatile") == "dry run: e-stop"
    assert port.sent == ["hold:e-stop"] and holds.decided == [("e-stop", True)]
    assert authority.set_estop(False, "volatile") == ENABLED
    assert not authority.live  # until the next frame starts
    authority.frame_starts()
    assert authority.live


def test_a_late_duplicate_of_a_press_presses_again_and_never_releases_early():
    authority, _, _ = live_authority()
    # press, release, press from a latched publisher: the volatile copy runs ahead.
    for pressed in (True, False, True):
        authority.set_estop(pressed, "volatile")
    assert authority.set_estop(True, "latched") == "dry run: e-stop"
    assert authority.set_estop(False, "latched") == "dry run: e-stop"  # volatile's last: true
    assert authority.set_estop(True, "latched") == "dry run: e-stop"


def test_released_only_when_both_last_words_are_false():
    authority, _, _ = live_authority()
    authority.set_estop(True, "latched")  # a button latched pressed before the node joined
    assert authority.set_estop(False, "volatile") == "dry run: e-stop"
    assert authority.set_estop(False, "latched") == ENABLED


def test_while_stopped_no_controller_output_or_hold_passes_and_the_chunk_for_watching_does():
    authority, port, holds = live_authority()
    authority.set_estop(True, "volatile")
    port.sent.clear()
    assert not authority.publish(COMMAND_CHUNK, "velocities")
    assert not authority.publish(JOINT_TRAJECTORY, "positions")
    assert not authority.hold("watchdog")  # decided (the frame forgets its chunk), not sent
    assert authority.publish(ACTION_CHUNK, "chunk")
    assert port.sent == ["chunk"] and holds.decided[-1] == ("watchdog", False)


def test_a_resume_after_dry_run_frames_holds_once_more():
    authority, port, _ = live_authority()
    authority.set_enabled(False)
    authority.frame_starts()  # a frame of the dry run
    authority.set_enabled(True)
    port.sent.clear()
    authority.frame_starts()
    assert port.sent == ["hold:enabled"] and authority.live


def test_a_halt_holds_once_and_nothing_goes_live_until_activated():
    authority, port, _ = live_authority()
    assert authority.halt("deactivate") and not authority.halt("shutdown")
    authority.frame_starts()
    assert not authority.live and port.sent == ["hold:deactivate"]
    authority.activated()
    authority.frame_starts()
    assert authority.live


def test_no_controller_output_after_the_stop_under_every_source_at_once():
    """Frames publishing, the e-stop, ~/enable, the watchdog and the gate streak, each on
    its own thread, then a halt: every trajectory went out while enabled, the last
    controller message is the halt's hold, and nothing passes after it."""
    authority, port, _ = live_authority()
    done = threading.Event()

    def frames() -> None:
        while not done.is_set():
            authority.frame_starts()
            authority.publish(JOINT_TRAJECTORY, "trajectory")

    def repeatedly(call: Callable[[random.Random], object]) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(0)
            while not done.is_set():
                call(rng)

        return run

    threads = [
        threading.Thread(target=t)
        for t in (
            frames,
            repeatedly(lambda rng: authority.set_estop(rng.random() < 0.5, "volatile")),
            repeatedly(lambda rng: authority.set_enabled(rng.random() < 0.5)),
            repeatedly(lambda rng: authority.hold("watchdog")),
            repeatedly(lambda rng: authority.hold("the gate rejected 3 chunks in a row")),
        )
    ]
    for t in threads:
        t.start()
    try:
        wanted = {"trajectory", "hold:watchdog", "hold:e-stop", "hold:disabled"}
        wait_until(lambda: wanted <= set(port.sent), 30.0, "every source to reach the port")
        authority.halt("deactivate")
        halted_at = len(port.sent)
        threading.Event().wait(0.2)  # every thread keeps trying
    finally:
        done.set()
        for t in threads:
            t.join()
    sent = list(zip(port.sent, port.enabled_then, strict=True))
    stops = {"hold:e-stop", "hold:disabled", "hold:deactivate"}
    # Only a stop's own hold goes out while not enabled; trajectories and the outage's and
    # the streak's holds only while enabled.
    assert all(enabled or msg in stops for msg, enabled in sent)
    assert len(port.sent) == halted_at  # nothing after the halt
    assert port.sent[-1] in stops  # the controller's last word is a stop's hold
