"""The `oxygen` lifecycle node over real ROS 2 topics and services (docs/DESIGN.md
section 6).

One node (config/tiny.yaml, the tiny model) and one probe node run in this process, each
on its own executor thread; everything between them goes through DDS: lifecycle transitions over
/oxygen/change_state, synthetic cameras and joint states at 30 Hz, and every output
topic. The tests run in file order and walk the node through its life: a failed
configure, activation with missing inputs, normal frames, language, bad inputs, a
slow configuration whose frames miss their deadline, deactivation mid-frame, shutdown.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
from pathlib import Path

import numpy as np
import pytest
import rclpy
import yaml
from diagnostic_msgs.msg import DiagnosticStatus
from node_harness import (
    SIM_START_S,
    Probe,
    SensorFaults,
    Spinners,
    diagnostic_values,
    node_args,
    stamp_s,
    wait_until,
)
from rcl_interfaces.msg import Log
from rclpy.parameter import Parameter
from std_msgs.msg import String

from oxygen_core.config import model_preset
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import EMBEDDING, save_checkpoint
from oxygen_core.model.normalize import NormStats, identity_stats, write_norm_stats
from oxygen_ros.node import OxygenNode

pytestmark = pytest.mark.ros

TINY = Path(__file__).resolve().parents[1] / "config" / "tiny.yaml"
PARAMS = yaml.safe_load(TINY.read_text())["/**"]["ros__parameters"]
PERIOD_S = PARAMS["execute_horizon"] / PARAMS["control_rate_hz"]
CONTROL_PERIOD_S = 1.0 / PARAMS["control_rate_hz"]
DIAGNOSTICS_PERIOD_S = 0.2
BAD_CHECKPOINT = "/nonexistent/oxygen/pi05_checkpoint"
HEALTHY = SensorFaults()


@dataclasses.dataclass
class Rig:
    node: OxygenNode
    probe: Probe
    spinners: Spinners

    def add(self, node):
        return self.spinners.add(node)

    def inbox(self, topic: str):
        return self.probe.inbox[topic]

    def wait_diagnostics(self, status: str, ready, what: str, timeout_s: float = 10.0):
        """The first /diagnostics message from now on whose `status` satisfies ready()."""
        inbox = self.inbox("/diagnostics")
        start = len(inbox.items())

        def matches(items):
            reports = (diagnostic_values(x.msg, status) for x in items[start:])
            return [report for report in reports if ready(*report)]

        return matches(inbox.wait(lambda xs: bool(matches(xs)), timeout_s, what))[0]

    @contextlib.contextmanager
    def parameters(self, **values):
        """Set node parameters for the block; the previous values come back even when the
        block fails, so that one failed test does not leave the module's node
        misconfigured for every test after it."""
        before = [self.node.get_parameter(name) for name in values]
        self.node.set_parameters([Parameter(name, value=v) for name, v in values.items()])
        try:
            yield
        finally:
            self.node.set_parameters(before)

    def wait_log(self, containing: str, start: int = 0, timeout_s: float = 30.0) -> list[Log]:
        """The /oxygen node's /rosout messages from item `start` on that contain `containing`,
        once there is one.

        A timeout names the /rosout publishers on the graph: the node's gone means rcl
        dropped its rosout publisher; still there, that its samples were lost on the way.
        """
        inbox = self.inbox("/rosout")

        def lines(items: list) -> list[Log]:
            logs = (x.msg for x in items[start:])
            return [log for log in logs if log.name == "oxygen" and containing in log.msg]

        try:
            return lines(inbox.wait(lambda xs: bool(lines(xs)), timeout_s, repr(containing)))
        except AssertionError as error:
            publishers = self.probe.get_publishers_info_by_topic("/rosout")
            names = sorted(f"{p.node_namespace.rstrip('/')}/{p.node_name}" for p in publishers)
            raise AssertionError(f"{error}; /rosout publishers: {names}") from None


@pytest.fixture(scope="module")
def rig():
    # rcl keeps one /rosout publisher per logger name and process, and a node's teardown
    # drops the one of its name: a node named "oxygen" left for the garbage collector by
    # an earlier module must go before ours registers, or its finalizer would silence
    # ours mid-module (seen in full runs: /rosout went quiet after three lines).
    gc.collect()
    rclpy.init()
    node = OxygenNode(
        cli_args=node_args(
            TINY, diagnostics_period_s=str(DIAGNOSTICS_PERIOD_S), checkpoint_dir=BAD_CHECKPOINT
        )
    )
    probe = Probe(
        cameras=PARAMS["camera_topics"],
        joints=PARAMS["joint_names"],
        streams=PARAMS["stream_names"],
    )
    spinners = Spinners()
    rig = Rig(spinners.add(node), spinners.add(probe), spinners)
    yield rig
    node.release()
    spinners.shutdown()
    rclpy.shutdown()


def test_bad_checkpoint_fails_configure_and_names_the_path(rig):
    assert rig.probe.transition("configure", timeout_s=60) is False
    assert rig.probe.state() == "unconfigured"
    [line] = rig.wait_log(BAD_CHECKPOINT)
    assert line.level == Log.ERROR


def test_a_bad_topic_name_fails_configure_not_activate_and_names_the_parameter(rig):
    """Inputs are subscribed at activate; a bad name must not get that far."""
    rig.node.set_parameters([Parameter("checkpoint_dir", value="")])
    bad = [PARAMS["camera_topics"][0], "/camera/left wrist"]
    with rig.parameters(camera_topics=bad):
        assert rig.probe.transition("configure", timeout_s=60) is False
        [line] = rig.wait_log("camera_topics[1] '/camera/left wrist'")
    assert line.level == Log.ERROR


def _configure_error(rig, containing: str) -> str:
    """Configure fails; the one ERROR line from oxygen that names `containing`."""
    start = len(rig.inbox("/rosout").items())
    assert rig.probe.transition("configure", timeout_s=120) is False
    assert rig.probe.state() == "unconfigured"
    [line] = rig.wait_log(containing, start)
    assert line.level == Log.ERROR
    assert "\n" not in line.msg and "Traceback" not in line.msg
    return line.msg


def test_a_refused_instruction_parameter_fails_configure_in_one_line(rig):
    with rig.parameters(instruction="y" * 5000):
        line = _configure_error(rig, "instruction parameter refused")
    assert line.startswith(
        "configure failed: ConfigError: instruction parameter refused: instruction of 5000 "
        "chars is over max_instruction_chars=1000: 'yyy"
    )
    assert len(line) < 512


def test_a_checkpoint_of_another_vocabulary_fails_configure_in_one_line(rig, tmp_path):
    """PaliGemma's 257,152-row embedding with the bundled 512-piece tokenizer."""
    flat = P.flatten(P.init_params(model_preset("tiny"), seed=0))
    flat[EMBEDDING] = np.zeros((257_152, flat[EMBEDDING].shape[1]), np.float32)
    save_checkpoint(tmp_path / "ckpt", P.unflatten(flat))
    with rig.parameters(checkpoint_dir=str(tmp_path / "ckpt")):
        line = _configure_error(rig, "has a vocabulary of 257152 tokens")
    assert line.startswith(f"configure failed: ValueError: checkpoint {tmp_path / 'ckpt'}")
    assert "set tokenizer_path to the tokenizer the checkpoint was trained with" in line


def test_norm_stats_that_cannot_be_chosen_fail_configure_in_one_line(rig, tmp_path):
    """No stats at all, then two asset ids and none named: never identity on a guess."""
    ckpt = tmp_path / "ckpt"
    tree = P.init_params(model_preset("tiny"), seed=0)
    save_checkpoint(ckpt, tree)
    with rig.parameters(checkpoint_dir=str(ckpt)):
        line = _configure_error(rig, "has no assets/<asset_id>/norm_stats.json")
        stats = NormStats(state=identity_stats(7), actions=identity_stats(32))
        for asset_id in ("trossen", "physical-intelligence/aloha"):
            write_norm_stats(ckpt / "assets" / asset_id / "norm_stats.json", stats)
        line = _configure_error(rig, "several asset ids")
    assert "['physical-intelligence/aloha', 'trossen']: set asset_id" in line


def test_configure_succeeds_once_the_parameter_is_fixed(rig):
    assert rig.probe.transition("configure", timeout_s=300) is True
    assert rig.probe.state() == "inactive"
    # The loaded engine is out of the collector's full walks (a frame paid up to 200 ms).
    assert gc.get_freeze_count() > 0


def test_random_weights_start_in_a_dry_run_despite_start_enabled(rig):
    """tiny.yaml says start_enabled true, but has no checkpoint: only ~/enable lets out
    what random weights would do."""
    assert PARAMS.get("start_enabled", True) and not PARAMS.get("checkpoint_dir")
    [line] = rig.wait_log("random weights (checkpoint_dir is empty): starting in a dry run")
    assert line.level == Log.WARN
    assert rig.probe.enable(False) == "dry run: disabled"  # it was off already
    assert rig.probe.enable() == "enabled"


def test_action_publishers_offer_a_qos_deadline_with_a_margin_over_the_frame_period(rig):
    """qos_deadline_factor (default 1.5) frame periods: jitter raises no DDS event."""
    for topic in ("/oxygen/action_chunk", "/oxygen/joint_trajectory"):
        infos = rig.probe.get_publishers_info_by_topic(topic)
        assert len(infos) == 1, topic
        assert infos[0].qos_profile.deadline.nanoseconds == round(1.5 * PERIOD_S * 1e9), topic


def test_activation_skips_frames_until_every_input_arrived(rig):
    chunks = rig.inbox("/oxygen/action_chunk")
    assert chunks.items() == []  # inactive: nothing published
    assert rig.probe.transition("activate") is True

    def skipped(reason):
        return lambda level, values: int(values[f"skipped {reason}"]) > 0

    rig.wait_diagnostics("inputs", skipped("missing_joint_state"), "missing joint state")
    rig.probe.faults = dataclasses.replace(rig.probe.faults, joints_on=True)
    rig.wait_diagnostics("inputs", skipped("missing_camera"), "missing camera")
    assert chunks.items() == []
    rig.probe.faults = HEALTHY
    chunks.wait_count(1, timeout_s=20)
    assert rig.probe.state() == "active"


def _actions_report(rig) -> dict[str, str]:
    """The actions status of the next /diagnostics report: the node's own counts."""
    return rig.wait_diagnostics("actions", lambda level, values: True, "a report")[1]


def test_action_chunks_come_at_the_frame_rate_with_shape_order_and_stamps(rig):
    """Checked on what the node stamps and counts, not on when chunks arrive: its writer
    keeps only the newest chunk (one may be overwritten before delivery), and arrival
    times on a shared CPU measure the machine, not the node."""
    inbox = rig.inbox("/oxygen/action_chunk")
    received = inbox.wait_count(15, timeout_s=30)
    report = _actions_report(rig)  # counts every chunk that arrived by now, and more
    chunks = [r.msg for r in received]
    for chunk in chunks:
        # the rows from d on: the robot runs the d before while the chunk is computed
        assert 1 <= chunk.horizon <= PARAMS["action_horizon"] and chunk.action_dim == 7
        assert len(chunk.actions) == chunk.horizon * chunk.action_dim
        assert np.isfinite(np.asarray(chunk.actions)).all()
        assert list(chunk.joint_names) == PARAMS["joint_names"]
        assert stamp_s(chunk.control_period) == pytest.approx(CONTROL_PERIOD_S, abs=1e-9)
        # The node's deadline: out within one frame period of its tick (steady clock).
        assert chunk.deadline_met == (stamp_s(chunk.latency) <= PERIOD_S)
    sequences = [c.sequence for c in chunks]
    assert sequences == sorted(set(sequences))
    # Each chunk is stamped when its first row runs, d control periods on from the running
    # chunk's row its tick falls on (node clock): consecutive chunks are a whole number of
    # control periods apart, give or take the timer callback's jitter (a chunk with nothing
    # running is stamped from its tick).
    periods = np.diff([stamp_s(c.header.stamp) for c in chunks]) / CONTROL_PERIOD_S
    assert periods.min() > 0, periods
    assert np.median(np.abs(periods - np.round(periods))) < 0.15, periods
    # The node's own counts: it published at least what arrived, flagged late at least
    # the chunks that say so, and every miss it counts is a late chunk or an overrun.
    assert float(report["target frame rate (Hz)"]) == pytest.approx(1.0 / PERIOD_S, abs=0.01)
    arrived = [x.msg for x in inbox.items()]
    assert int(report["frames published"]) >= len(arrived)
    assert int(report["late chunks"]) >= sum(not c.deadline_met for c in arrived)
    misses, late, overruns = (
        int(report[k]) for k in ("deadline misses", "late chunks", "overruns")
    )
    assert misses == late + overruns
    # Meeting deadlines: most of these frames were out in time by the node's own clock.
    assert sum(c.deadline_met for c in chunks) > len(chunks) // 2, [
        stamp_s(c.latency) for c in chunks
    ]


def test_joint_trajectory_carries_the_chunk_shaped_for_the_controller(rig):
    """Chunk and trajectory writers each keep only their newest message, so not every
    chunk's trajectory arrives. Each trajectory that did is its chunk from the first row
    the controller (jtc, the default) can meet: stamped that row's time, every later row,
    then a stop (velocities, the last zero)."""
    chunks = rig.inbox("/oxygen/action_chunk")
    trajectories = rig.inbox("/oxygen/joint_trajectory")
    start = len(trajectories.items())
    period_ns = round(CONTROL_PERIOD_S * 1e9)

    def pairs(items) -> list:
        """(chunk, trajectory, rows dropped) for each trajectory whose chunk arrived."""
        by_stamp = {_ns(x.msg.header.stamp): x.msg for x in chunks.items()}
        found = []
        for t in (x.msg for x in items[start:]):
            for dropped in range(PARAMS["action_horizon"]):
                chunk = by_stamp.get(_ns(t.header.stamp) - dropped * period_ns)
                if chunk is not None:
                    found.append((chunk, t, dropped))
                    break
        return found

    matched = pairs(trajectories.wait(lambda xs: len(pairs(xs)) >= 3, 20, "3 chunks' stamps"))
    for chunk, trajectory, dropped in matched:
        assert list(trajectory.joint_names) == PARAMS["joint_names"]
        rows = np.asarray(chunk.actions, np.float32).reshape(chunk.horizon, chunk.action_dim)
        kept = rows[dropped:]
        positions = np.array([p.positions for p in trajectory.points], np.float32)
        np.testing.assert_array_equal(positions[: len(kept)], kept)
        assert len(trajectory.points) > len(kept)  # the stop after the rows
        assert not any(trajectory.points[-1].velocities)
        offsets = [stamp_s(p.time_from_start) for p in trajectory.points]
        np.testing.assert_allclose(offsets, np.arange(len(offsets)) * CONTROL_PERIOD_S, atol=1e-9)


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def test_parameters_are_refused_while_configured_with_the_reason(rig):
    """They are read at configure: a change now would silently not apply."""
    [result] = rig.node.set_parameters([Parameter("control_rate_hz", value=40.0)])
    assert not result.successful and "read at configure" in result.reason
    assert rig.node.get_parameter("control_rate_hz").value == PARAMS["control_rate_hz"]
    [clock] = rig.node.set_parameters([Parameter("use_sim_time", value=False)])  # rclpy's own
    assert clock.successful


def _requests(inbox):
    """request id -> its LanguageTokens in arrival order."""
    by_id: dict[int, list] = {}
    for item in inbox.items():
        by_id.setdefault(item.msg.request_id, []).append(item.msg)
    return by_id


def _check_request(messages, max_tokens: int) -> str:
    """The streamed pieces of one request add up to its final text; returns that text."""
    assert [m.finished for m in messages] == [False] * (len(messages) - 1) + [True]
    text = ""
    for m in messages:
        text += m.text_delta
        assert m.text == text
    final = messages[-1]
    assert final.finish_reason in ("eos", "max_tokens")
    tokens = sum(len(m.token_ids) for m in messages)
    assert tokens <= max_tokens
    if final.finish_reason == "max_tokens":
        assert tokens == max_tokens
    stamps = [stamp_s(m.header.stamp) for m in messages]
    assert stamps == sorted(set(stamps))  # one message per frame
    return final.text


def _finished_request(rig, stream: str, timeout_s: float = 30.0) -> list:
    inbox = rig.inbox(f"/oxygen/{stream}")
    inbox.wait(lambda xs: any(x.msg.finished for x in xs), timeout_s, "finished request")
    return next(msgs for msgs in _requests(inbox).values() if msgs[-1].finished)


def test_narration_tokens_assemble_into_the_finished_text(rig):
    messages = _finished_request(rig, "narration")
    limit = PARAMS["streams"]["narration"]["max_tokens"]
    text = _check_request(messages, limit)
    rig.inbox("/oxygen/narration/text").wait(
        lambda xs: any(x.msg.data == text for x in xs), 10, f"finished text {text!r}"
    )
    # The request started from a frame that ran: its origin is that frame's observation
    # time, its tick (EngineStats' stamp; the chunk's is when its first row runs).
    frame_stamps = {stamp_s(x.msg.header.stamp) for x in rig.inbox("/oxygen/stats").items()}
    assert stamp_s(messages[0].origin_stamp) in frame_stamps
    rig.inbox("/oxygen/markers").wait(
        lambda xs: any(m.text.startswith("narration:") for x in xs for m in x.msg.markers),
        10,
        "narration marker",
    )


def test_memory_stream_runs_when_the_instruction_changes(rig):
    probe = rig.probe
    wait_until(lambda: probe.instruction.get_subscription_count() > 0, 10, "instruction match")
    probe.instruction.publish(String(data="put the red block in the bowl"))
    messages = _finished_request(rig, "memory")
    text = _check_request(messages, PARAMS["streams"]["memory"]["max_tokens"])
    rig.inbox("/oxygen/memory/text").wait(
        lambda xs: any(x.msg.data == text for x in xs), 10, f"finished memory {text!r}"
    )


def test_a_request_message_starts_one_request_of_that_stream(rig):
    memory = rig.inbox("/oxygen/memory")
    known = set(_requests(memory))
    probe = rig.probe
    wait_until(lambda: probe.request.get_subscription_count() > 0, 10, "request match")
    probe.request.publish(String(data="memory"))
    memory.wait(lambda xs: any(x.msg.request_id not in known for x in xs), 10, "on-demand request")
    probe.request.publish(String(data="no_such_stream"))
    rig.wait_log("unknown stream 'no_such_stream'")
    assert probe.state() == "active"


BAD_INPUTS = {
    "wrong_encoding": ({"encoding": "yuv422"}, "bad_image"),
    "wrong_size": ({"truncate_image": True}, "bad_image"),
    "stale_camera": ({"camera_age_s": 2.0}, "stale_camera"),
    "camera_stopped": ({"silent_camera": 1}, "stale_camera"),
    "nan_joint": ({"nan_joint": True}, "bad_joint_state"),
    "unknown_joint_names": ({"rename_joints": True}, "bad_joint_state"),
}


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_bad_input_skips_frames_with_a_diagnostic_and_the_node_stays_active(rig, kind):
    faults, reason = BAD_INPUTS[kind]
    key = f"skipped {reason}"
    _, before = rig.wait_diagnostics("inputs", lambda level, values: True, "a report")
    rig.probe.faults = dataclasses.replace(HEALTHY, **faults)
    level, values = rig.wait_diagnostics(
        "inputs",
        lambda level, values: int(values[key]) > int(before[key]),
        f"{key} counted",
    )
    assert level == ord(DiagnosticStatus.WARN)
    assert rig.probe.state() == "active"
    rig.probe.faults = HEALTHY
    rig.inbox("/oxygen/action_chunk").wait_count(1, timeout_s=10)


def _report_bytes(array) -> int:
    """Characters of text in one /diagnostics message."""
    return sum(
        len(s.name) + len(s.message) + sum(len(kv.key) + len(kv.value) for kv in s.values)
        for s in array.status
    )


def test_a_megabyte_encoding_and_100000_joint_names_stay_excerpts_in_logs_and_diagnostics(rig):
    log_start = len(rig.inbox("/rosout").items())
    diagnostics_start = len(rig.inbox("/diagnostics").items())
    rig.probe.faults = dataclasses.replace(HEALTHY, encoding="e" * 1_000_000, extra_joints=100_000)
    try:
        _, values = rig.wait_diagnostics(
            "inputs",
            lambda level, values: (
                "(100001 items)" in values["joints ignored"] and "skipped bad_image" in values
            ),
            "100,001 ignored joints and a bad image reported",
        )
        rig.wait_log("Image encoding 'eee", log_start)
    finally:
        rig.probe.faults = HEALTHY
    assert values["joints ignored"].startswith("['finger_extra', 'extra_0', 'extra_1'")
    lines = rig.wait_log("", log_start)
    assert max(len(line.msg) for line in lines) < 1024
    reports = [x.msg for x in rig.inbox("/diagnostics").items()[diagnostics_start:]]
    assert max(_report_bytes(r) for r in reports) < 4096
    rig.inbox("/oxygen/action_chunk").wait_count(1, timeout_s=10)


def test_a_10_mb_instruction_is_refused_and_the_previous_one_kept(rig):
    log_start = len(rig.inbox("/rosout").items())
    _, before = rig.wait_diagnostics("inputs", lambda level, values: True, "a report")
    refused = int(before["instructions refused"])
    rig.probe.instruction.publish(String(data="x" * 10_000_000))
    level, values = rig.wait_diagnostics(
        "inputs",
        lambda level, values: int(values["instructions refused"]) == refused + 1,
        "the refusal counted",
    )
    assert level == ord(DiagnosticStatus.WARN)
    assert values["last instruction refusal"].startswith(
        "instruction of 10000000 chars is over max_instruction_chars=1000: 'xxx"
    )
    [line] = rig.wait_log("instruction refused", log_start)
    assert line.msg.startswith("instruction refused, the previous one stays: instruction of 100")
    assert len(line.msg) < 512
    rig.inbox("/oxygen/action_chunk").wait_count(3, timeout_s=10)  # the old task goes on


def test_a_flood_of_unknown_requests_is_counted_and_logged_once_per_period(rig):
    log_start = len(rig.inbox("/rosout").items())
    _, before = rig.wait_diagnostics("language", lambda level, values: True, "a report")
    start = int(before["unknown stream requests"])
    for i in range(1000):  # keep-last-10 queues drop some: at least 10 arrive
        rig.probe.request.publish(String(data=f"nope_{i}" * 1000))
    level, _ = rig.wait_diagnostics(
        "language",
        lambda level, values: int(values["unknown stream requests"]) >= start + 10,
        "the unknown requests counted",
    )
    assert level == ord(DiagnosticStatus.WARN)
    lines = rig.wait_log("unknown stream", log_start)
    assert len(lines) <= 3  # one per 2 s throttle period while the flood lasts
    assert all(len(line.msg) < 512 for line in lines)


def test_slow_frames_are_reported_as_deadline_misses(rig):
    """A 2 ms frame period (500 Hz, one action per frame): shorter than any tiny frame.

    The gate is off from here on: at 500 Hz the random model's chunks move the fictional
    arm of config/tiny.yaml faster than its limits, and the gate rightly rejects them all
    (test_frame.py and test_gate.py test that); so is the shaping for jtc, which refuses
    chunks all of whose rows are due before a late frame's trajectory could arrive
    (test_frame.py); these tests are about timing."""
    assert rig.probe.transition("deactivate") is True
    assert rig.probe.transition("cleanup") is True
    rig.node.set_parameters(
        [
            Parameter("control_rate_hz", value=500.0),
            Parameter("execute_horizon", value=1),
            Parameter("gate_policy", value="off"),
            Parameter("controller_model", value="none"),
        ]
    )
    assert rig.probe.transition("configure", timeout_s=300) is True
    rig.probe.enable()
    assert rig.probe.transition("activate") is True
    start = rig.probe.now_s()
    rig.inbox("/oxygen/action_chunk").wait(
        lambda xs: any(stamp_s(x.msg.header.stamp) > start and not x.msg.deadline_met for x in xs),
        20,
        "a chunk flagged late",
    )

    def missed(level, values):
        counts = ("deadline misses", "overruns", "QoS deadline events (DDS, not misses)")
        return level == ord(DiagnosticStatus.WARN) and all(int(values[k]) > 0 for k in counts)

    rig.wait_diagnostics("actions", missed, "deadline misses reported")
    rig.inbox("/oxygen/stats").wait(
        lambda xs: any(x.msg.deadline_misses > 0 for x in xs), 10, "stats with misses"
    )


def test_deactivate_mid_frame_publishes_nothing_after(rig):
    wait_until(lambda: rig.node.frame_running, 10, "a frame on the worker")
    assert rig.probe.transition("deactivate") is True
    done_at = rig.probe.now_s()
    assert rig.probe.state() == "inactive"
    assert not any(t.name == "oxygen-frames" for t in threading.enumerate())
    qos_events = rig.node.stats().qos_deadline_events

    def after(items):
        headers = [x.msg.markers[0] if hasattr(x.msg, "markers") else x.msg for x in items]
        return any(stamp_s(h.header.stamp) >= done_at for h in headers)

    with pytest.raises(AssertionError, match="no output after deactivation"):
        rig.inbox("/oxygen/action_chunk").wait(after, 10 * PERIOD_S, "output after deactivation")
    for topic in ("/oxygen/stats", "/oxygen/narration", "/oxygen/markers", "/diagnostics"):
        assert not after(rig.inbox(topic).items()), topic
    # Silent on purpose: DDS counts missed deadlines, the node does not.
    assert rig.node.stats().qos_deadline_events == qos_events
    # A new worker takes over the same engine.
    assert rig.probe.transition("activate") is True
    rig.inbox("/oxygen/action_chunk").wait(
        lambda xs: any(stamp_s(x.msg.header.stamp) > done_at for x in xs), 20, "new chunk"
    )
    assert rig.probe.transition("deactivate") is True


def test_shutdown_from_inactive_finalizes(rig):
    assert rig.probe.transition("shutdown_inactive") is True
    assert rig.probe.state() == "finalized"
    assert gc.get_freeze_count() == 0  # the released engine is the collector's again


def test_on_simulated_time_the_frame_timer_and_stamps_follow_the_clock_topic(rig):
    """As in bag replay: a node with use_sim_time, /clock running at half real time."""
    speed = 0.5  # a sim period is 200 ms of wall time: frames under load do not overrun it
    rig.probe.faults = SensorFaults(joints_on=False, cameras_on=False)  # silence the first probe
    node = OxygenNode(
        cli_args=[
            *("--ros-args", "-r", "__node:=oxygen_sim", "--params-file", str(TINY)),
            *("-p", "use_sim_time:=true"),
        ]
    )
    probe = Probe(
        cameras=PARAMS["camera_topics"],
        joints=PARAMS["joint_names"],
        streams=PARAMS["stream_names"],
        target="oxygen_sim",
        sim_speed=speed,
    )
    probe.faults = HEALTHY
    rig.add(node)
    rig.add(probe)
    try:
        assert probe.transition("configure", timeout_s=300) is True
        assert probe.transition("activate") is True
        received = probe.inbox["/oxygen_sim/action_chunk"].wait_count(20, timeout_s=60)
    finally:
        node.release()
        probe.faults = SensorFaults(joints_on=False, cameras_on=False)
    stamps = np.array([stamp_s(r.msg.header.stamp) for r in received])
    assert SIM_START_S < stamps[0] < stamps[-1] < SIM_START_S + 600  # not the wall clock
    # The timer fires every PERIOD_S of sim time: on the wall clock it would fire every
    # PERIOD_S of wall time, which the stamps (node clock = /clock) would show as
    # speed * PERIOD_S apart. Stamps only: how fast sim time runs against the wall is the
    # probe's /clock publisher, not the node, and varies with the machine's load; so do
    # frames that overrun the wall period (two sim periods apart; at twice real time a loaded
    # machine overran most of them), so the shortest gaps, not the median, carry the period.
    assert np.percentile(np.diff(stamps), 10) == pytest.approx(PERIOD_S, rel=0.15)
