"""The generated oxygen_ros messages: importable, shaped as msg/ says, and wire-compatible.

rclpy (live topics) and rosbags (bag files, replay) each build these types on their own,
one from the rosidl-generated code, the other from the msg/ text. They must agree on every
byte and on the type hash, or recorded bags would not replay onto the node's topics.
"""

import array
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Duration, Time
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from std_msgs.msg import Header

import oxygen_ros.msg
from oxygen_ros.msg import ActionChunk, EngineStats, LanguageTokens

pytestmark = pytest.mark.ros

REPO = Path(__file__).resolve().parents[1]
MSG_DIR = REPO / "msg"
HEADER = Header(stamp=Time(sec=1_700_000_012, nanosec=345_000_000), frame_id="base_link")


def sample_messages() -> list:
    """One filled instance per message; floats exact in float32 so equality is meaningful."""
    chunk = ActionChunk(
        header=HEADER,
        sequence=2**40 + 7,
        horizon=2,
        action_dim=3,
        actions=[0.5, -1.25, 2.0, 0.0, 3.75, -0.125],
        joint_names=["shoulder", "elbow", "wrist"],
        control_period=Duration(sec=0, nanosec=20_000_000),
        latency=Duration(sec=0, nanosec=1_500_000),
        deadline_met=True,
    )
    tokens = LanguageTokens(
        header=HEADER,
        stream="narration",
        request_id=42,
        origin_stamp=Time(sec=1_700_000_011, nanosec=999),
        token_ids=[2, 651, 2134, 1],
        text_delta=" world",
        text="hello world",
        finished=True,
        finish_reason="eos",
    )
    stats = EngineStats(
        header=HEADER,
        frame=9,
        prefill_s=0.125,
        denoise_s=0.25,
        decode_s=0.0625,
        frame_s=0.4375,
        budget_s=0.5,
        k=5,
        batch=3,
        bucket=64,
        active_requests=3,
        queued_requests=1,
        pool_used=4,
        pool_capacity=8,
        deadline_misses=2**33,
        skipped_frames=1,
    )
    return [chunk, tokens, stats]


def type_name(msg) -> str:
    return f"oxygen_ros/msg/{type(msg).__name__}"


def msg_field_names(name: str) -> list[str]:
    """Field names in declaration order, read from msg/<name>.msg (comments dropped)."""
    text = (MSG_DIR / f"{name}.msg").read_text()
    lines = (line.split("#", 1)[0].split() for line in text.splitlines())
    return [words[1] for words in lines if words]


@pytest.fixture(scope="module")
def typestore():
    """rosbags' Kilted types plus ours, registered from the msg/ text alone."""
    store = get_typestore(Stores.ROS2_KILTED)
    for path in sorted(MSG_DIR.glob("*.msg")):
        store.register(get_types_from_msg(path.read_text(), f"oxygen_ros/msg/{path.stem}"))
    return store


def assert_same_fields(ours, theirs, where: str = "") -> None:
    """Compare an rclpy message with a rosbags one field by field, recursing into messages."""
    for name in ours.get_fields_and_field_types():
        mine, other = getattr(ours, name), getattr(theirs, name)
        if hasattr(mine, "get_fields_and_field_types"):
            assert_same_fields(mine, other, f"{where}{name}.")
        elif isinstance(mine, array.array):
            assert other.dtype == np.dtype(mine.typecode), f"{where}{name}"
            np.testing.assert_array_equal(other, np.asarray(mine), err_msg=f"{where}{name}")
        else:
            assert mine == other, f"{where}{name}"


def test_cmake_generates_every_msg_file():
    listed = re.findall(r"msg/(\w+)\.msg", (REPO / "CMakeLists.txt").read_text())
    assert sorted(listed) == sorted(p.stem for p in MSG_DIR.glob("*.msg"))
    assert all(hasattr(oxygen_ros.msg, name) for name in listed)


@pytest.mark.parametrize("msg", sample_messages(), ids=lambda m: type(m).__name__)
def test_fields_follow_the_msg_file(msg):
    assert list(msg.get_fields_and_field_types()) == msg_field_names(type(msg).__name__)


@pytest.mark.parametrize("msg", sample_messages(), ids=lambda m: type(m).__name__)
def test_rclpy_round_trip(msg):
    restored = deserialize_message(serialize_message(msg), type(msg))
    assert restored == msg


def test_action_chunk_values_survive_the_wire():
    chunk = deserialize_message(serialize_message(sample_messages()[0]), ActionChunk)
    actions = np.frombuffer(chunk.actions, dtype=np.float32).reshape(chunk.horizon, -1)
    np.testing.assert_array_equal(actions, [[0.5, -1.25, 2.0], [0.0, 3.75, -0.125]])
    assert chunk.sequence == 1_099_511_627_783
    assert chunk.control_period.nanosec == 20_000_000


@pytest.mark.parametrize("msg", sample_messages(), ids=lambda m: type(m).__name__)
def test_rosbags_decodes_rclpy_bytes(msg, typestore):
    decoded = typestore.deserialize_cdr(serialize_message(msg), type_name(msg))
    assert_same_fields(msg, decoded)


@pytest.mark.parametrize("msg", sample_messages(), ids=lambda m: type(m).__name__)
def test_rclpy_decodes_rosbags_bytes(msg, typestore):
    decoded = typestore.deserialize_cdr(serialize_message(msg), type_name(msg))
    # Not byte-equal: Fast CDR leaves alignment padding unset, rosbags writes zeros there.
    raw = typestore.serialize_cdr(decoded, type_name(msg))
    assert deserialize_message(bytes(raw), type(msg)) == msg


@pytest.mark.parametrize("msg", sample_messages(), ids=lambda m: type(m).__name__)
def test_rosbags_type_hash_matches_rosidl(msg, typestore):
    # <prefix>/lib/pythonX.Y/site-packages/oxygen_ros/msg/__init__.py -> <prefix>/share/...
    prefix = Path(oxygen_ros.msg.__file__).resolve().parents[5]
    name = type(msg).__name__
    description = json.loads((prefix / "share/oxygen_ros/msg" / f"{name}.json").read_text())
    hashes = {h["type_name"]: h["hash_string"] for h in description["type_hashes"]}
    assert typestore.hash_rihs01(type_name(msg)) == hashes[type_name(msg)]


@pytest.mark.parametrize("where", ["repo", "elsewhere"])
def test_sources_and_generated_msgs_share_one_package(where, tmp_path):
    """The editable sources and the generated msg subpackage import side by side."""
    script = (
        "import oxygen_ros, oxygen_ros.msg\n"
        "from oxygen_ros.msg import ActionChunk\n"
        "print(oxygen_ros.__file__)\n"
        "print(oxygen_ros.msg.__file__)\n"
    )
    cwd = REPO if where == "repo" else tmp_path
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, check=True
    )
    package_init, msg_init = (Path(line) for line in result.stdout.split())
    assert package_init == REPO / "oxygen_ros" / "__init__.py"
    assert msg_init.parent.name == "msg"
    assert not msg_init.is_relative_to(REPO / "oxygen_ros")
