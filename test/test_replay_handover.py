"""Chunk hand-over through offline replay of the bundled demo bag (data/demo_bag, 12 s).

Replay runs the node's own frame loop on the bag clock, so every tick, handover and stamp
is the same from run to run: with a fixed d (rtc_delay_steps 1) the guided chunks are a
deterministic function of the bag. The action phase is the same code in every engine
mode and the guidance only reads the prefix KV cache, so OxyGen and isolated must publish
the same guided chunks, bit for bit. replace waits out the same d (its chunks go out from row
d at the same stamps) but ignores the old chunk in the model. Seams compare each chunk's first row
with the previous chunk's row at the same time (BENCHMARKS.md, "In the node").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from oxygen_ros.tools import replay
from oxygen_ros.tools.bagio import from_cdr, read_bag
from oxygen_ros.tools.configure import load_settings
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.topics import ACTION_CHUNK, STATS

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
TINY, DEMO_BAG = ROOT / "config" / "tiny.yaml", ROOT / "data" / "demo_bag"
DELAY = 1


def _params(folder: Path, handover: str) -> Path:
    raw = yaml.safe_load(TINY.read_text())
    # The rows as released (controller_model none): the hand-over is about rows, and the
    # gate then judges straight segments, as every chunk here was measured with.
    raw["/**"]["ros__parameters"].update(
        chunk_handover=handover, rtc_delay_steps=DELAY, controller_model="none"
    )
    path = folder / f"{handover}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _replay(params: Path, out: Path, mode: str) -> tuple[list, list]:
    """(ActionChunk, EngineStats) messages of one replay of the demo bag, in frame order."""
    argv = [str(DEMO_BAG), "--params", str(params), "--out", str(out), "--no-progress"]
    assert replay.main([*argv, "--mode", mode]) == 0
    names = load_settings(params)[1]
    topics = [names.output(ACTION_CHUNK), names.output(STATS)]
    by_topic: dict[str, list] = {t: [] for t in topics}
    for m in read_bag(out / OUTPUT_BAG, topics):
        by_topic[m.topic].append(from_cdr(m.data, m.msgtype))
    return by_topic[topics[0]], by_topic[topics[1]]


def _ns(stamp) -> int:
    return stamp.sec * 10**9 + stamp.nanosec


def _seams(chunks: list) -> np.ndarray:
    """max |first row - the previous chunk's row at the same time| per consecutive pair."""
    jumps = []
    for prev, new in zip(chunks, chunks[1:], strict=False):
        k, rest = divmod(_ns(new.header.stamp) - _ns(prev.header.stamp), _ns(prev.control_period))
        assert rest == 0 and 0 <= k < prev.horizon  # one control grid, overlapping chunks
        rows = np.reshape(prev.actions, (prev.horizon, prev.action_dim))
        jumps.append(np.max(np.abs(np.asarray(new.actions[: new.action_dim]) - rows[k])))
    return np.asarray(jumps)


@pytest.fixture(scope="module")
def replays(tmp_path_factory) -> dict[tuple[str, str], tuple[list, list]]:
    folder = tmp_path_factory.mktemp("handover")
    runs = [("rtc", "oxygen"), ("rtc", "isolated"), ("replace", "oxygen")]
    return {
        (handover, mode): _replay(_params(folder, handover), folder / f"{handover}-{mode}", mode)
        for handover, mode in runs
    }


def test_oxygen_and_isolated_publish_the_same_guided_chunks(replays):
    oxygen, oxygen_stats = replays[("rtc", "oxygen")]
    isolated, isolated_stats = replays[("rtc", "isolated")]
    assert len(oxygen) == len(isolated) == 119  # 12 s at 10 frames/s, tick 0 before inputs
    for a, b in zip(oxygen, isolated, strict=True):
        assert (a.sequence, _ns(a.header.stamp), a.horizon) == (
            b.sequence,
            _ns(b.header.stamp),
            b.horizon,
        )
        np.testing.assert_array_equal(np.asarray(a.actions), np.asarray(b.actions))
    applied = [(s.handover, s.delay_steps) for s in oxygen_stats]
    assert applied == [("replace", 0)] + [("rtc", DELAY)] * 118  # no handover on frame 0
    assert applied == [(s.handover, s.delay_steps) for s in isolated_stats]


def test_guided_chunks_continue_the_previous_one_where_replace_jumps(replays):
    rtc, _ = replays[("rtc", "oxygen")]
    plain, plain_stats = replays[("replace", "oxygen")]
    applied = [(s.handover, s.delay_steps) for s in plain_stats]
    assert applied == [("replace", 0)] + [("replace", DELAY)] * 118
    # Frame 0 has nothing to hand over: the same chunk either way.
    np.testing.assert_array_equal(np.asarray(rtc[0].actions), np.asarray(plain[0].actions))
    # Both wait out d: later chunks start one control step after their tick's row, with
    # the rows from d on; only the guidance differs.
    for r, p in zip(rtc, plain, strict=True):
        assert (_ns(r.header.stamp), r.horizon) == (_ns(p.header.stamp), p.horizon)
    rtc_seams, plain_seams = _seams(rtc), _seams(plain)
    print(f"seam mean: replace {plain_seams.mean():.3f}, rtc {rtc_seams.mean():.3f}")
    assert rtc_seams.mean() < 0.5 * plain_seams.mean()
