"""Chunk hand-over in the running node, over real ROS 2 topics (docs/DESIGN.md, "Chunk
hand-over").

Two `oxygen` nodes on the tiny model (config/tiny.yaml: 4 rows, 2 per frame, 20 Hz, random
weights) run side by side on the same synthetic cameras and joint states, one with
chunk_handover replace, one with rtc and a fixed d of one control step. Each published
trajectory is compared with the previous one at its first point's time: with random
weights consecutive chunks are unrelated, so with replace that seam is as large as the
actions themselves, while rtc guides the new chunk onto the one the robot runs. (Not
against the command one step earlier: a random-weight chunk moves as much between its own
rows as across a seam; BENCHMARKS.md, "In the node".)
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest
import rclpy
import yaml
from node_harness import Probe, Received, SensorFaults, Spinners, stamp_s

from oxygen_ros.node import OxygenNode

pytestmark = [pytest.mark.ros, pytest.mark.slow]

TINY = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]
CONTROL_PERIOD_S = 1.0 / PARAMS["control_rate_hz"]
MODES = ("replace", "rtc")
DELAY = 1  # rtc_delay_steps of the rtc node
FRAMES = 40


@dataclasses.dataclass
class Pair:
    nodes: dict[str, OxygenNode]
    probes: dict[str, Probe]


@pytest.fixture(scope="module")
def pair():
    rclpy.init()
    spinners = Spinners()
    nodes, probes = {}, {}
    for mode in MODES:
        nodes[mode] = spinners.add(
            OxygenNode(
                cli_args=[
                    *("--ros-args", "-r", f"__node:=oxygen_{mode}", "--params-file", str(TINY)),
                    *("-p", f"chunk_handover:={mode}", "-p", f"rtc_delay_steps:={DELAY}"),
                    # The rows as released on the trajectory: the hand-over is about rows
                    # (what jtc makes of them: test_frame, test_node).
                    *("-p", "controller_model:=none"),
                ]
            )
        )
        probes[mode] = spinners.add(
            Probe(
                cameras=PARAMS["camera_topics"],
                joints=PARAMS["joint_names"],
                streams=PARAMS["stream_names"],
                target=f"oxygen_{mode}",
            )
        )
    yield Pair(nodes, probes)
    for node in nodes.values():
        node.release()
    spinners.shutdown()
    rclpy.shutdown()


def _engine(node: OxygenNode):
    return node._configured.engine  # introspection: the engine the node configured


def _kept_up_rows(trajectories: list[Received], chunks: list[Received]) -> list[int]:
    """Rows of each trajectory (after the first) whose frame kept up: published within the
    d control periods it was given, one frame after the trajectory before. A frame the
    machine's load made later goes out from a later row, and one after a frame that never
    came, with nothing left running, whole: what the node guarantees is the rows of a frame
    that kept up."""
    period_ns = round(CONTROL_PERIOD_S * 1e9)
    latency_s = {_ns(c.msg.header.stamp): stamp_s(c.msg.latency) for c in chunks}
    rows = []
    for before, now in itertools.pairwise(trajectories):
        t0, t1 = _ns(before.msg.header.stamp), _ns(now.msg.header.stamp)
        on_time = latency_s.get(t1, float("inf")) < DELAY * CONTROL_PERIOD_S
        if on_time and t1 - t0 == PARAMS["execute_horizon"] * period_ns:
            rows.append(len(now.msg.points))
    return rows


def _ns(stamp) -> int:
    return stamp.sec * 10**9 + stamp.nanosec


def seams(trajectories: list[Received]) -> np.ndarray:
    """max |first point - the previous trajectory's point at the same time| per pair of
    consecutive trajectories whose times overlap (robot units)."""
    jumps = []
    for prev, new in zip(trajectories, trajectories[1:], strict=False):
        prev_t, new_t = stamp_s(prev.msg.header.stamp), stamp_s(new.msg.header.stamp)
        k = round((new_t - prev_t) / CONTROL_PERIOD_S)
        if 0 <= k < len(prev.msg.points):
            first = np.asarray(new.msg.points[0].positions)
            jumps.append(np.max(np.abs(first - np.asarray(prev.msg.points[k].positions))))
    return np.asarray(jumps)


def test_rtc_trajectories_continue_the_previous_chunk_without_recompiling(pair):
    for mode in MODES:
        assert pair.probes[mode].transition("configure", timeout_s=300) is True
        pair.probes[mode].enable()
    compiled = _engine(pair.nodes["rtc"]).compile_count()  # warm-up compiled every shape
    for mode in MODES:
        assert pair.probes[mode].transition("activate") is True
    pair.probes["rtc"].faults = SensorFaults()  # one probe feeds both nodes the same inputs
    try:
        got = {
            mode: pair.probes[mode]
            .inbox[f"/oxygen_{mode}/joint_trajectory"]
            .wait_count(FRAMES, timeout_s=60)
            for mode in MODES
        }
        stats = {
            mode: pair.probes[mode].inbox[f"/oxygen_{mode}/stats"].wait_count(2, timeout_s=10)
            for mode in MODES
        }
    finally:
        pair.probes["rtc"].faults = SensorFaults(joints_on=False, cameras_on=False)
    assert _engine(pair.nodes["rtc"]).compile_count() == compiled

    # Both modes publish from row d on (replace ignores the old chunk in the model only);
    # an activation's first chunk has nothing running, so d is 0 for it.
    for mode in MODES:
        chunks = pair.probes[mode].inbox[f"/oxygen_{mode}/action_chunk"].items()
        rows = _kept_up_rows(got[mode], chunks)
        assert len(rows) >= FRAMES // 4 and set(rows) == {PARAMS["action_horizon"] - DELAY}, rows
        assert {(s.msg.handover, s.msg.delay_steps) for s in stats[mode][1:]} == {(mode, DELAY)}
        # A chunk that continues the one before it (the next frame's, that one still
        # running: fewer than H rows) stays on its control grid: stamps whole steps apart,
        # to the nanosecond. (One sent whole, after the robot ran out of rows while the
        # machine was too loaded to keep up, starts a grid of its own; a sample DDS did not
        # deliver leaves its pair out.)
        period_ns = round(CONTROL_PERIOD_S * 1e9)
        ordered = sorted((c.msg for c in chunks), key=lambda m: m.sequence)
        continued = [
            _ns(now.header.stamp) - _ns(before.header.stamp)
            for before, now in itertools.pairwise(ordered)
            if now.sequence == before.sequence + 1 and now.horizon < PARAMS["action_horizon"]
        ]
        assert len(continued) >= FRAMES // 4 and {d % period_ns for d in continued} == {0}

    jumps = {mode: seams(got[mode]) for mode in MODES}
    assert min(len(j) for j in jumps.values()) >= FRAMES // 2
    print({mode: (float(j.mean()), float(np.median(j))) for mode, j in jumps.items()})
    assert jumps["rtc"].mean() < 0.5 * jumps["replace"].mean()
    assert pair.nodes["rtc"].stats().stamps_back == 0
