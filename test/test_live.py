"""`--live`: the bag played onto ROS 2 topics drives the real node (docs/DESIGN.md section 6).

The oxygen lifecycle node (config/tiny.yaml, use_sim_time) runs in this process and is
activated before playback, so its clock reads 0 until the player's /clock arrives. The
player and the output recorder are rclpy nodes of their own context: everything between
them and the node goes over DDS. The node ticks when its timer sees /clock pass a tick;
under load that can be a clock step late, so the check is per frame: offline replay run
at the stamps of the node's own frames must give exactly its action chunks and texts.
Both run with d fixed at 0 (`rtc_delay_steps`): "auto" is the node's measured latency,
which an offline run on the bag clock cannot know.

The node's worker gathers the latest inputs just after its tick: a node that lagged the
clock by more than the time to the next sensor sample would already see that sample.
The bag is played slowly enough that even a loaded machine does not lag that far.
"""

from __future__ import annotations

import dataclasses
import io
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Time
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import Header

from oxygen_ros import topics
from oxygen_ros.msg import EngineStats, LanguageTokens
from oxygen_ros.node import OxygenNode
from oxygen_ros.tools.bagio import from_cdr, read_bag
from oxygen_ros.tools.configure import TopicNames
from oxygen_ros.tools.demo import Console
from oxygen_ros.tools.demo_bag import Scene, scene_topics, write_scene
from oxygen_ros.tools.live import replay_live
from oxygen_ros.tools.replay import replay_offline
from oxygen_ros.tools.replay_job import OUTPUT_BAG, Job

pytestmark = pytest.mark.ros

TINY = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
# Sensors at 10 Hz stamped mid-way between the 10 Hz frame ticks, played at a quarter of
# real time: the next sample comes 200 ms of wall time after a tick.
SCENE = Scene(seconds=3.0, sensor_hz=10.0)
RATE = 0.25


@pytest.fixture(scope="module")
def node():
    """The real node, configured (compiled) and active, spinning on its own thread."""
    rclpy.init()
    node = OxygenNode(
        cli_args=[
            *("--ros-args", "--params-file", str(TINY)),
            *("-p", "use_sim_time:=true", "-p", "rtc_delay_steps:=0"),
        ]
    )
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    assert node.autostart()
    yield node
    node.release()
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown()
    spinner.join(timeout=10)


def chunks(out: Path, topic: str) -> list:
    return [from_cdr(m.data, m.msgtype) for m in read_bag(out / OUTPUT_BAG, [topic])]


def stamp_ns(stamp: Time) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


@pytest.mark.slow
def test_live_play_drives_the_node_and_matches_offline_replay_frame_by_frame(node, tmp_path):
    write_scene(tmp_path / "bag", SCENE, scene_topics(TINY))
    job = Job.load(tmp_path / "bag", TINY, tmp_path / "live", overrides={"rtc_delay_steps": 0})
    before = node.stats().frames
    live = replay_live(job, rate=RATE, wait_s=30.0, progress=False)
    published = node.stats().frames - before  # the sender's own count

    live_chunks = chunks(job.out, job.names.output(topics.ACTION_CHUNK))
    ticks = len(job.ticks())
    assert published >= ticks // 2, f"{published} frames of {ticks} ticks"
    # Over DDS (reliable, but the node keeps only its newest chunk): in order, none twice,
    # none invented; a chunk overwritten before delivery is not the recorder's to see.
    sequences = [c.sequence for c in live_chunks]
    assert 0 < len(live_chunks) <= published and sequences == sorted(set(sequences))
    stamps = [stamp_ns(c.header.stamp) for c in live_chunks]
    assert job.ticks()[0] <= stamps[0] and stamps[-1] <= job.span_ns()[1]  # node = bag clock
    assert live["frames"] == len(live_chunks) and live["source"] == "live"

    # The frames' ticks are their EngineStats stamps (a chunk's stamp is when its row 0
    # runs: the first chunk, with nothing running, goes out stamped by the live latency,
    # a control step or more after its tick; offline, bag time stands still: at its tick).
    stats = chunks(job.out, job.names.output(topics.STATS))
    ticks_of = {s.frame: stamp_ns(s.header.stamp) for s in stats}
    live_chunks = [c for c in live_chunks if c.sequence in ticks_of]
    assert len(live_chunks) >= published // 2
    offline_job = dataclasses.replace(job, out=tmp_path / "offline")
    ticks = [ticks_of[c.sequence] for c in live_chunks]
    offline = replay_offline(offline_job, ticks=ticks, progress=False)
    assert offline["frames"] == len(live_chunks)
    offline_chunks = chunks(offline_job.out, job.names.output(topics.ACTION_CHUNK))
    for ours, theirs in zip(live_chunks, offline_chunks, strict=True):
        first = ours is live_chunks[0]
        assert first or stamp_ns(ours.header.stamp) == stamp_ns(theirs.header.stamp)
        np.testing.assert_array_equal(
            np.asarray(ours.actions), np.asarray(theirs.actions), err_msg=f"frame {ours.sequence}"
        )
    assert live["texts"] == offline["texts"] and live["requests_started"] >= 2
    assert live["warnings"] == offline["warnings"] == []


@pytest.mark.slow
def test_a_second_live_run_on_the_same_node_warns_that_its_counts_are_mixed(node, tmp_path):
    """The node's /diagnostics counters and request ids carry over from the first run."""
    write_scene(tmp_path / "bag", Scene(seconds=1.0, sensor_hz=10.0), scene_topics(TINY))
    if node.stats().frames == 0:  # run alone: give the node a first run of its own
        replay_live(Job.load(tmp_path / "bag", TINY, tmp_path / "first"), rate=RATE, progress=False)
    job = Job.load(tmp_path / "bag", TINY, tmp_path / "again")
    report = replay_live(job, rate=RATE, wait_s=30.0, progress=False)
    assert report["frames"] > 0
    assert len(report["warnings"]) == 1 and "it ran before" in report["warnings"][0]
    assert "**Warning:**" in (tmp_path / "again" / "report.md").read_text()


def test_console_prints_status_once_a_second_and_every_finished_text():
    published = tuple(
        dataclasses.replace(t, topic=t.topic.replace("~", "/oxygen"))
        for t in topics.output_topics(
            SimpleNamespace(
                stream_names=("narration",), joint_trajectory=False, command_chunk=False
            )
        )
    )
    names = TopicNames(
        node="/oxygen", cameras=(), joint_state="", instruction="", request="", published=published
    )
    out = io.StringIO()
    console = Console(names, origin_ns=10_000_000_000, out=out)
    header = Header(stamp=Time(sec=12, nanosec=500_000_000))
    tokens = LanguageTokens(header=header, stream="narration", request_id=4, text="a red")
    console.on_output("/oxygen/narration", tokens)
    stats = EngineStats(header=header, frame_s=0.012, budget_s=0.1, batch=3, k=2)
    stats.deadline_misses = 1
    for _ in range(3):  # within one second: one status line
        console.on_output("/oxygen/stats", stats)
    tokens.finished, tokens.finish_reason, tokens.text = True, "eos", "a red block"
    console.on_output("/oxygen/narration", tokens)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[bag   2.5 s]")
    assert "frame  12.0 ms of 100" in lines[0] and "misses 1" in lines[0]
    assert "batch 3 k 2" in lines[0] and "narration: 'a red'" in lines[0]
    assert lines[1] == "  narration #4 finished (eos): 'a red block'"
