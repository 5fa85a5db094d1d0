"""The closed-loop run's collector (oxygen_ros.tools.closed_loop): an episode outcome out of
the run's order (another simulator on the same ROS domain) is kept out and fails the run
in one line, instead of counting as one of its episodes."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from oxygen_ros.msg import EpisodeOutcome
from oxygen_ros.tools.closed_loop import Collector, wait_for_episodes
from oxygen_ros.tools.configure import load_settings
from oxygen_ros.tools.sim.evaluate import TABLETOP

pytestmark = pytest.mark.ros
ROOT = Path(__file__).resolve().parents[1]


def _outcome(collector: Collector, index: int) -> None:
    message = types.SimpleNamespace(topic=TABLETOP.topics["episode"])
    collector.on_output(message, EpisodeOutcome(index=index, episodes=3, success=True))


def test_an_outcome_out_of_order_is_kept_out_and_fails_the_run(tmp_path):
    _, names = load_settings(ROOT / "config" / "sim.yaml")
    collector = Collector(names, TABLETOP)
    _outcome(collector, 0)
    _outcome(collector, 7)  # another run's eighth episode
    _outcome(collector, 1)
    assert [o.index for o in collector.outcomes] == [0, 1] and collector.foreign == 1
    sim = subprocess.Popen([sys.executable, "-c", "pass"])
    sim.wait()
    with pytest.raises(RuntimeError, match="another simulator publishes on ROS_DOMAIN_ID"):
        wait_for_episodes(sim, None, collector, 3, 5.0, tmp_path)
