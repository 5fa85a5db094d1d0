"""oxygen-eval sweep --world metaworld (tools.task_sweep, which sweeps ALOHA alike) and the
lockstep it runs in: every chunk takes over exactly d control steps after its frame
through the real node and sim, the cells resume, and the seam is measured from the chunks
as published.

The lockstep figures are read from the run's own output bag: the node stamps each
EngineStats with its frame's tick and each ActionChunk with the time its first row runs,
so their difference is the delay the robot saw.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from metaworld_harness import require_metaworld

require_metaworld()  # before anything imports mujoco

from oxygen_core.metaworld.episode import CONTROL_PERIOD_NS  # noqa: E402
from oxygen_ros.convert import stamp_to_ns  # noqa: E402
from oxygen_ros.tools import task_sweep  # noqa: E402
from oxygen_ros.tools.bagio import from_cdr, read_bag  # noqa: E402

pytestmark = pytest.mark.ros
P = CONTROL_PERIOD_NS


def test_a_seam_is_the_largest_arm_delta_jump_at_a_takeover_inside_an_episode():
    """Chunk b takes over at 12 from a (running since 10): a's row 1 (the step before) vs
    b's row 0 over dx, dy, dz only. c starts in another episode, d is stamped before a row
    of c runs: neither counts."""
    a = np.array([[0.0, 0.0, 0.0, 1.0], [0.1, -0.2, 0.3, 1.0], [0.5, 0.5, 0.5, 1.0]])
    b = np.array([[0.2, 0.4, 0.3, -1.0], [0.0, 0.0, 0.0, -1.0]])
    c, d = np.zeros((2, 4)), np.ones((2, 4))
    chunks = [(10 * P, a), (12 * P, b), (30 * P, c), (30 * P, d)]
    windows = [range(0, 20 * P), range(20 * P, 40 * P)]
    assert task_sweep.seam_jumps(chunks, windows, P, (0, 1, 2)) == pytest.approx([0.6])


def test_alohas_seam_is_over_both_arms_six_joints_not_the_grippers():
    pytest.importorskip("gym_aloha")
    sweep = task_sweep.aloha_sweep()
    assert (sweep.episode_topic, sweep.control_hz) == ("/aloha/episode", 50.0)
    assert sweep.arm == (0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12)  # 6 and 13: the grippers


@pytest.mark.slow
def test_a_lockstep_cell_runs_every_chunk_exactly_d_steps_after_its_frame(tmp_path: Path) -> None:
    """One cell (replace, d = 1) with the tiny random model (a frame every 3 ticks, 4
    rows): the sim waits for each of the node's frames, so every chunk is stamped one
    control step after its frame's tick and frames fall 3 ticks apart, whatever the
    machine's speed. Not the first two: the activation's first chunk goes out at its
    wall-clock latency (nothing runs yet), and the frame after it, at the timer's first due
    tick, continues that chunk's rows. The robot holds only until the first chunk. A rerun
    keeps the cell."""
    out = tmp_path / "sweep"
    args = ["--tasks", "reach-v3", "--episodes", "1", "--camera-size", "32"]
    args += ["--handovers", "replace", "--delays", "1", "--out", str(out)]
    assert task_sweep.metaworld(args) == 0
    cell = out / "replace-d1"
    report = json.loads((cell / "report.json").read_text())
    assert report["delay_steps"] == 1 and report["overrides"] == {"chunk_handover": "replace"}
    assert (
        "lockstep, every chunk 1 steps after its frame (0 frames timed out)"
        in (cell / "report.md").read_text()
    )
    chunks, ticks, outcome = {}, {}, None
    for m in read_bag(cell / "output_bag"):
        msg = from_cdr(m.data, m.msgtype)
        if m.topic == "/oxygen/action_chunk":
            chunks[msg.sequence] = stamp_to_ns(msg.header.stamp)
        elif m.topic == "/oxygen/stats":
            ticks[msg.frame] = stamp_to_ns(msg.header.stamp)
        elif m.topic == "/metaworld/episode":
            outcome = json.loads(msg.data)
    assert outcome is not None and outcome["lockstep_timeouts"] == 0
    settled = sorted(chunks)[2:]
    assert len(settled) >= 100  # a failed reach runs 500 steps: about 166 frames
    assert {chunks[f] - ticks[f] for f in settled} == {P}
    assert {ticks[b] - ticks[a] for a, b in itertools.pairwise(settled)} == {3 * P}
    # The node is switched off around the reset: the robot holds until the first chunk
    # stamped in the episode (the ones before came while the world settled, and were dropped).
    first = min(stamp for stamp in chunks.values() if stamp >= outcome["start_ns"])
    assert outcome["held_steps"] == (first - outcome["start_ns"]) // P
    (row,) = json.loads((out / "sweep.json").read_text())["rows"]
    assert (row["handover"], row["delay"], row["lockstep_timeouts"]) == ("replace", 1, 0)
    assert row["success"] == report["success"] and row["seams"] >= 100
    assert "| replace | 1 | 0/1 (0 %, 0-79) |" in (out / "sweep.md").read_text()
    written = (cell / "report.json").stat().st_mtime_ns
    assert task_sweep.metaworld(args) == 0  # kept: nothing runs again
    assert (cell / "report.json").stat().st_mtime_ns == written
    assert json.loads((out / "sweep.json").read_text())["rows"] == [row]
