"""oxygen_ros.tools.launch_outcome: when the launch files end the launch, and with what."""

from __future__ import annotations

import signal

from oxygen_ros.tools.launch_outcome import FAILED_TRANSITIONS, exit_error, transition_error


def test_a_clean_exit_is_no_error():
    assert exit_error("oxygen_node-1", 0) is None


def test_an_early_exit_names_its_code():
    # exit code 2: oxygen-node's answer to a bad parameter
    assert exit_error("oxygen_node-1", 2) == (
        "oxygen_node-1 exited with code 2 (see its log above)"
    )


def test_a_signal_death_names_the_signal():
    assert exit_error("oxygen_node-1", -signal.SIGINT) == "oxygen_node-1 was killed by SIGINT"
    assert exit_error("oxygen_node-1", -signal.SIGKILL) == "oxygen_node-1 was killed by SIGKILL"
    assert exit_error("oxygen_node-1", -200) == "oxygen_node-1 was killed by signal 200"


def test_failed_configure_and_activate_end_the_launch_other_transitions_do_not():
    assert transition_error("oxygen", "configuring", "unconfigured") == (
        "oxygen failed to configure and is unconfigured (see its log above)"
    )
    assert transition_error("oxygen", "activating", "inactive") == (
        "oxygen failed to activate and is inactive (see its log above)"
    )
    assert transition_error("oxygen", "configuring", "inactive") is None
    assert transition_error("oxygen", "activating", "active") is None
    assert transition_error("oxygen", "cleaningup", "unconfigured") is None
    assert len(FAILED_TRANSITIONS) == 2
