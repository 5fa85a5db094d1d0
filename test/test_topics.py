"""The one table of outputs (oxygen_ros.topics) and every consumer built from it.

The node's lifecycle publishers, the replay's bag outputs, the tools' resolved topic names
and the README's table must each hold exactly the table's rows: a row that one of them
misses fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from node_harness import wait_until

from oxygen_ros import topics
from oxygen_ros.params import NodeConfig

ROOT = Path(__file__).resolve().parents[1]
STREAMS = ("narration", "memory", "ask")
CFG = NodeConfig(stream_names=STREAMS, joint_trajectory=True)


def expected(cfg: NodeConfig, prefix: str = "/oxygen") -> dict[str, str]:
    """topic -> type the node publishes, written out by hand (not from the table)."""
    out = {
        f"{prefix}/action_chunk": "oxygen_ros/msg/ActionChunk",
        f"{prefix}/stats": "oxygen_ros/msg/EngineStats",
        f"{prefix}/markers": "visualization_msgs/msg/MarkerArray",
        "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
    }
    if cfg.joint_trajectory:
        out[f"{prefix}/joint_trajectory"] = "trajectory_msgs/msg/JointTrajectory"
    for s in cfg.stream_names:
        out[f"{prefix}/{s}"] = "oxygen_ros/msg/LanguageTokens"
        out[f"{prefix}/{s}/text"] = "std_msgs/msg/String"
    return out


def resolved(cfg: NodeConfig) -> dict[str, str]:
    return {t.topic.replace("~", "/oxygen"): t.output.msgtype for t in topics.output_topics(cfg)}


def test_table_rows_are_unique_and_expand_per_stream():
    assert len({o.name for o in topics.OUTPUTS}) == len(topics.OUTPUTS)
    assert resolved(CFG) == expected(CFG)
    off = NodeConfig(stream_names=("narration",), joint_trajectory=False)
    assert resolved(off) == expected(off)
    assert len(list(topics.output_topics(CFG))) == 5 + 2 * len(STREAMS)


def test_readme_table_is_the_generated_one():
    readme = (ROOT / "README.md").read_text()
    assert topics.markdown_table(("narration", "memory")) in readme


def test_gate_runs_nothing_while_closed():
    gate, ran = topics.LifecycleGate(), []
    assert gate.run(lambda: ran.append(1)) is False
    gate.open()
    assert gate.run(lambda: ran.append(2)) is True
    gate.close()
    assert gate.run(lambda: ran.append(3)) is False
    assert ran == [2]


class _Sink:
    """OutputSink's call shape, recording (topic, time, msg)."""

    def __init__(self) -> None:
        self.written: list[tuple[str, int, object]] = []

    def message(self, topic: str, time_ns: int, msg: object) -> None:
        self.written.append((topic, time_ns, msg))


@pytest.mark.ros
def test_tool_topic_names_and_bag_outputs_cover_every_row():
    from oxygen_ros.tools.configure import load_settings
    from oxygen_ros.tools.replay import BagOutputs

    overrides = {"stream_names": "[narration, memory, ask]", "streams.ask.prompt": "Ask"}
    settings, names = load_settings(ROOT / "config" / "tiny.yaml", overrides)
    assert names.outputs() == expected(settings.node)
    sink = _Sink()
    bag = BagOutputs(names, sink)
    bag.now_ns = 7
    for t in topics.output_topics(settings.node):
        assert bag.publish(t.output.name, t.key, t.stream) is True
    bag.flush()
    assert {topic for topic, _, _ in sink.written} == set(expected(settings.node))
    assert all(names.output(*msg) == topic and time == 7 for topic, time, msg in sink.written)


def _made(node) -> dict[str, str]:
    """The table's topics `node` publishes, by the graph: topic -> type."""
    own = dict(node.get_publisher_names_and_types_by_node("oxygen", "/"))
    return {t: types[0] for t, types in own.items() if t in expected(CFG)}


@pytest.mark.ros
def test_lifecycle_publishers_create_every_row():
    import rclpy
    from rclpy.lifecycle import LifecycleNode

    from oxygen_ros.publishers import LifecyclePublishers

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = LifecycleNode("oxygen", context=context, start_parameter_services=False)
        try:
            gate = topics.LifecycleGate()
            publishers = LifecyclePublishers(node, CFG, gate, on_deadline_missed=lambda n: None)
            # The graph cache fills asynchronously (DDS discovery, even of a node's own
            # endpoints): poll it rather than read it once.
            wait_until(lambda: _made(node) == expected(CFG), 10.0, "every row's publisher")
            assert publishers.publish(topics.STATS, None) is False  # gate closed: dropped
            publishers.destroy()
            wait_until(lambda: not _made(node), 10.0, "the publishers going away")
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
