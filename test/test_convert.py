"""Message conversions with real message objects: exact pixels, joints, stamps and fields."""

import dataclasses
import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Duration, Time
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image as PilImage
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

from oxygen_core.controller.shaping import Shaped
from oxygen_core.engine.types import ActionResult, LanguageResult, TokenEvent
from oxygen_ros.convert import (
    InputError,
    action_chunk_msg,
    duration_msg,
    engine_stats_msg,
    image_to_rgb,
    joint_positions,
    joint_state_msg,
    joint_velocities,
    language_tokens_msg,
    marker_id,
    msgtype,
    narration_markers,
    ns_to_stamp,
    rgb8_image_msg,
    seconds_to_stamp,
    shaped_trajectory_msg,
    stamp_to_ns,
    stamp_to_seconds,
    trajectory_msg,
    trajectory_points,
    unused_joints,
)
from oxygen_ros.image_header import JPEG_SIGNATURE, PNG_SIGNATURE, HeaderError, declared_size
from oxygen_ros.msg import ActionChunk

MSG_DIR = Path(__file__).resolve().parents[1] / "msg"
RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, (3, 5, 3), dtype=np.uint8)
GREY = RNG.integers(0, 256, (3, 5), dtype=np.uint8)
ALPHA = RNG.integers(0, 256, (3, 5, 1), dtype=np.uint8)
LOW = RNG.integers(0, 256, (3, 5, 3), dtype=np.uint16)  # low bytes that 16 -> 8 bits drop


def raw_image(pixels: np.ndarray, encoding: str, *, bigendian=False, pad=0) -> Image:
    """An Image message of `pixels` with `pad` garbage bytes after every row."""
    height, width = pixels.shape[:2]
    stored = pixels.astype(pixels.dtype.newbyteorder(">" if bigendian else "<"))
    rows = stored.reshape(height, -1).view(np.uint8)
    padded = np.concatenate([rows, np.full((height, pad), 0xEE, np.uint8)], axis=1)
    return Image(
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=int(bigendian),
        step=padded.shape[1],
        data=padded.tobytes(),
    )


def grey3(grey: np.ndarray) -> np.ndarray:
    return np.repeat(grey[:, :, None], 3, axis=2)


def wide(eight_bit: np.ndarray) -> np.ndarray:
    """16-bit samples whose high byte is `eight_bit`."""
    low = LOW if eight_bit.ndim == 3 else LOW[:, :, 0]
    return eight_bit.astype(np.uint16) * 256 + low


ENCODED = {
    "rgb8": (RGB, RGB),
    "bgr8": (RGB[:, :, ::-1], RGB),
    "rgba8": (np.concatenate([RGB, ALPHA], axis=2), RGB),
    "bgra8": (np.concatenate([RGB[:, :, ::-1], ALPHA], axis=2), RGB),
    "mono8": (GREY, grey3(GREY)),
    "8UC1": (GREY, grey3(GREY)),
    "8UC3": (RGB, RGB),  # generic types keep their channel order, as cv_bridge does
    "8UC4": (np.concatenate([RGB, ALPHA], axis=2), RGB),
    "mono16": (wide(GREY), grey3(GREY)),
    "rgb16": (wide(RGB), RGB),
    "bgr16": (wide(RGB[:, :, ::-1]), RGB),
}


@pytest.mark.parametrize("encoding", sorted(ENCODED))
@pytest.mark.parametrize("pad", [0, 3])
@pytest.mark.parametrize("bigendian", [False, True])
def test_every_encoding_gives_exact_rgb(encoding, pad, bigendian):
    stored, expected = ENCODED[encoding]
    out = image_to_rgb(raw_image(stored, encoding, bigendian=bigendian, pad=pad))
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)


def test_big_endian_mono16_takes_the_high_byte():
    values = np.array([[0, 255, 256, 0x1234, 65535]], dtype=np.uint16)
    msg = raw_image(values, "mono16", bigendian=True, pad=1)  # odd step: unaligned rows
    assert bytes(msg.data[:4]) == b"\x00\x00\x00\xff"
    np.testing.assert_array_equal(image_to_rgb(msg)[0, :, 0], [0, 0, 1, 0x12, 255])


def test_unpadded_rgb8_is_a_view_of_the_message():
    msg = raw_image(RGB, "rgb8")
    assert np.shares_memory(image_to_rgb(msg), np.frombuffer(msg.data, np.uint8))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"encoding": "yuv422"}, "encoding 'yuv422' is not one of"),
        ({"height": 0, "data": b""}, "empty: height=0 width=5"),
        ({"width": 0}, "empty: height=3 width=0"),
        ({"step": 14}, "step=14 is shorter than a rgb8 row of width=5 \\(15 bytes\\)"),
        ({"data": bytes(44)}, "44 bytes, expected height\\*step = 3\\*15 = 45"),
        ({"data": bytes(46)}, "46 bytes, expected"),
    ],
)
def test_bad_raw_images_name_the_field(change, message):
    msg = raw_image(RGB, "rgb8")
    for field, value in change.items():
        setattr(msg, field, value)
    with pytest.raises(InputError, match=message):
        image_to_rgb(msg)


def compressed(pixels: np.ndarray, fmt: str, **save) -> CompressedImage:
    buffer = io.BytesIO()
    PilImage.fromarray(pixels).save(buffer, format=fmt, **save)
    return CompressedImage(format=fmt.lower(), data=buffer.getvalue())


def test_png_round_trips_exactly():
    np.testing.assert_array_equal(image_to_rgb(compressed(RGB, "PNG")), RGB)
    np.testing.assert_array_equal(image_to_rgb(compressed(GREY, "PNG")), grey3(GREY))
    rgba = np.concatenate([RGB, ALPHA], axis=2)
    np.testing.assert_array_equal(image_to_rgb(compressed(rgba, "PNG")), RGB)


def test_sixteen_bit_png_keeps_the_high_byte():
    np.testing.assert_array_equal(image_to_rgb(compressed(wide(GREY), "PNG")), grey3(GREY))


def test_jpeg_round_trips_within_compression_error():
    y, x = np.mgrid[0:48, 0:64]
    smooth = np.stack([x * 4, y * 5, (x + y) * 2], axis=2).astype(np.uint8)
    out = image_to_rgb(compressed(smooth, "JPEG", quality=95))
    assert out.shape == smooth.shape
    error = np.abs(out.astype(int) - smooth)
    assert error.mean() < 1.5 and error.max() <= 12
    grey = image_to_rgb(compressed(smooth[:, :, 0], "JPEG", quality=95))
    assert np.abs(grey[:, :, 1].astype(int) - smooth[:, :, 0]).max() <= 8


def broken_png_chunk() -> bytes:
    """A PNG whose image data is cut short and followed by a chunk type of non-letters (bit
    rot): Pillow raises SyntaxError for it, not OSError."""
    png = compressed(RGB, "PNG").data.tobytes()
    at = png.index(b"IDAT") - 4
    half = struct.unpack(">I", png[at : at + 4])[0] // 2
    rotten = b"\0" * 4 + b"\0\0\0\x01\xa7\x96L\x8f"
    return png[:at] + struct.pack(">I", half) + png[at + 4 : at + 8 + half] + rotten


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "data is empty \\(format='jpeg'\\)"),
        (b"GIF89a....", "neither JPEG nor PNG \\(format='jpeg', first bytes 474946"),
        (compressed(RGB, "JPEG").data[:40].tobytes(), "40 bytes, format='jpeg'\\) does not decode"),
        (compressed(RGB, "PNG").data[:30].tobytes(), "30 bytes, format='jpeg'\\) does not decode"),
        (broken_png_chunk(), "format='jpeg'\\) does not decode: broken PNG file"),
    ],
)
def test_bad_compressed_images_raise_input_error(data, message):
    with pytest.raises(InputError, match=message):
        image_to_rgb(CompressedImage(format="jpeg", data=data))


def cv2_to_imgmsg_layout(parent: np.ndarray, width: int, encoding: str) -> Image:
    """An Image laid out as cv_bridge's cv2_to_imgmsg fills one from an OpenCV array that is
    a crop of a wider image: height and width from the crop, `step` the parent's row length
    (the rest of each row is padding), is_bigendian from the dtype's byte order and data
    the parent's bytes as stored (byte-swapped for a big-endian dtype). Built from the
    sensor_msgs/Image definition; cv_bridge itself is not used (see convert's docstring)."""
    return Image(
        height=parent.shape[0],
        width=width,
        encoding=encoding,
        is_bigendian=int(parent.dtype.byteorder == ">"),
        step=parent.strides[0],
        data=parent.tobytes(),
    )


@pytest.mark.parametrize(
    ("encoding", "parent", "expected"),
    [
        ("rgb8", np.concatenate([RGB, RGB[:, :2]], axis=1), RGB),
        ("bgr8", np.concatenate([RGB[:, :, ::-1], RGB[:, :1]], axis=1), RGB),
        ("mono8", np.concatenate([GREY, GREY[:, :3]], axis=1), grey3(GREY)),
        ("mono16", np.concatenate([wide(GREY), wide(GREY)[:, :1]], axis=1).astype(">u2"), None),
        ("rgb16", np.concatenate([wide(RGB), wide(RGB)[:, :2]], axis=1).astype(">u2"), RGB),
        ("bgr16", np.concatenate([wide(RGB[:, :, ::-1])] * 2, axis=1).astype(">u2"), RGB),
    ],
)
def test_cv_bridge_style_messages_give_exact_pixels(encoding, parent, expected):
    """Padded rows (a crop's stride) and byte-swapped big-endian samples, over rclpy's
    serialisation as a subscriber receives them."""
    msg = cv2_to_imgmsg_layout(parent, RGB.shape[1], encoding)
    received = deserialize_message(serialize_message(msg), Image)
    expected = grey3(GREY) if expected is None else expected
    np.testing.assert_array_equal(image_to_rgb(received), expected)


def test_rosbags_messages_convert_like_rclpy_messages():
    """Replay may deserialize with rosbags: its dataclasses hold numpy arrays."""
    store = get_typestore(Stores.ROS2_KILTED)
    image = raw_image(wide(RGB), "rgb16", bigendian=True, pad=2)
    bag_image = store.deserialize_cdr(serialize_message(image), "sensor_msgs/msg/Image")
    np.testing.assert_array_equal(image_to_rgb(bag_image), RGB)
    jpeg = compressed(RGB, "JPEG")
    bag_jpeg = store.deserialize_cdr(serialize_message(jpeg), "sensor_msgs/msg/CompressedImage")
    np.testing.assert_array_equal(image_to_rgb(bag_jpeg), image_to_rgb(jpeg))
    # Empty velocity/effort would make rclpy add padding that rosbags rejects (ROS2_ENV.md).
    joints = JointState(name=["b", "a"], position=[2.0, 1.0], velocity=[0.0] * 2, effort=[0.0] * 2)
    bag_joints = store.deserialize_cdr(serialize_message(joints), "sensor_msgs/msg/JointState")
    np.testing.assert_array_equal(joint_positions(bag_joints, ["a", "b"]), [1.0, 2.0])


# --------------------------------------------------------------------------- joints


def test_joints_are_matched_by_name_in_any_order():
    msg = JointState(name=["elbow", "gripper", "shoulder", "wrist"], position=[3.0, 9.0, 1.5, 4.0])
    state = joint_positions(msg, ["shoulder", "elbow", "wrist"])
    assert state.dtype == np.float32
    np.testing.assert_array_equal(state, [1.5, 3.0, 4.0])
    assert unused_joints(msg, ["shoulder", "elbow", "wrist"]) == ("gripper",)


def test_a_repeated_joint_the_model_ignores_is_not_an_error():
    msg = JointState(name=["b", "x", "a", "x"], position=[2.0, 9.0, 1.0, 8.0])
    np.testing.assert_array_equal(joint_positions(msg, ["a", "b"]), [1.0, 2.0])


def test_shuffled_messages_give_the_same_state():
    names = [f"j{i}" for i in range(7)]
    positions = np.linspace(-1.0, 1.0, 7)
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(7)
        msg = JointState(name=[names[i] for i in order], position=positions[order].tolist())
        np.testing.assert_array_equal(joint_positions(msg, names), positions.astype(np.float32))


@pytest.mark.parametrize(
    ("names", "positions", "message"),
    [
        (["a", "c"], [1.0, 2.0], r"lacks joints \['b'\]"),
        (["a", "b"], [1.0], "2 names but 1 positions"),
        (["a", "b", "a"], [1.0, 2.0, 3.0], r"more than once: \['a'\]"),
        (["b", "a", "x", "a", "x"], [1.0, 2.0, 3.0, 4.0, 5.0], r"more than once: \['a'\]"),
        (["a", "b"], [float("nan"), 2.0], r"not finite for joints \['a'\]"),
        (["b", "a"], [float("inf"), float("-inf")], r"not finite for joints \['a', 'b'\]"),
    ],
)
def test_bad_joint_states_name_the_joints(names, positions, message):
    with pytest.raises(InputError, match=message):
        joint_positions(JointState(name=names, position=positions), ["a", "b"])


# --------------------------------------------------------------------------- time


def test_stamps_and_durations():
    assert stamp_to_seconds(Time(sec=3, nanosec=500_000_000)) == 3.5
    assert seconds_to_stamp(1.25) == Time(sec=1, nanosec=250_000_000)
    assert seconds_to_stamp(-0.25) == Time(sec=-1, nanosec=750_000_000)
    assert seconds_to_stamp(2.9999999999) == Time(sec=3, nanosec=0)
    assert duration_msg(0.02) == Duration(sec=0, nanosec=20_000_000)
    epoch = Time(sec=1_700_000_000, nanosec=123_456_789)
    back = seconds_to_stamp(stamp_to_seconds(epoch))
    assert back.sec == epoch.sec and abs(back.nanosec - epoch.nanosec) < 1_000


# --------------------------------------------------------------------------- outputs

STAMP = Time(sec=12, nanosec=340_000_000)


def chunk(horizon=4, dim=3, frame=5) -> ActionResult:
    actions = np.arange(horizon * dim, dtype=np.float32).reshape(horizon, dim) / 4
    return ActionResult(frame=frame, actions=actions, prefill_s=0.01, denoise_s=0.02)


def test_action_chunk_fields_are_exact_and_row_major():
    msg = action_chunk_msg(
        chunk(),
        stamp=STAMP,
        sequence=17,
        joint_names=["x", "y", "z"],
        control_period_s=0.02,
        latency_s=0.125,
        deadline_met=np.bool_(True),
        frame_id="base",
    )
    assert msg.header == Header(stamp=STAMP, frame_id="base")
    assert (msg.sequence, msg.horizon, msg.action_dim) == (17, 4, 3)
    assert msg.actions.tolist() == [i / 4 for i in range(12)]
    assert msg.joint_names == ["x", "y", "z"]
    assert msg.control_period == Duration(sec=0, nanosec=20_000_000)
    assert msg.latency == Duration(sec=0, nanosec=125_000_000)
    assert msg.deadline_met is True


def test_action_chunk_of_a_transposed_float64_array_is_still_row_major():
    actions = np.arange(6, dtype=np.float64).reshape(3, 2).T  # logical [[0, 2, 4], [1, 3, 5]]
    result = ActionResult(frame=0, actions=actions, prefill_s=0.0, denoise_s=0.0)
    msg = action_chunk_msg(
        result,
        stamp=STAMP,
        sequence=0,
        joint_names=[],
        control_period_s=0.1,
        latency_s=0.0,
        deadline_met=False,
    )
    assert msg.actions.tolist() == [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]
    assert (msg.horizon, msg.action_dim, msg.joint_names) == (2, 3, [])


def test_action_chunk_rejects_names_that_do_not_fit():
    with pytest.raises(ValueError, match="2 joint_names for action_dim 3"):
        action_chunk_msg(
            chunk(),
            stamp=STAMP,
            sequence=0,
            joint_names=["x", "y"],
            control_period_s=0.02,
            latency_s=0.0,
            deadline_met=True,
        )


def test_action_chunk_survives_serialization():
    msg = action_chunk_msg(
        chunk(horizon=10, dim=7),
        stamp=STAMP,
        sequence=2**40,
        joint_names=[f"j{i}" for i in range(7)],
        control_period_s=0.02,
        latency_s=0.0315,
        deadline_met=True,
    )
    wire = serialize_message(msg)
    assert deserialize_message(wire, ActionChunk) == msg
    # The replay tool reads bags with rosbags: the .msg text must decode the same bytes.
    store = get_typestore(Stores.ROS2_KILTED)
    store.register(
        get_types_from_msg((MSG_DIR / "ActionChunk.msg").read_text(), "oxygen_ros/msg/ActionChunk")
    )
    from_bag = store.deserialize_cdr(wire, "oxygen_ros/msg/ActionChunk")
    np.testing.assert_array_equal(from_bag.actions, chunk(horizon=10, dim=7).actions.ravel())
    assert from_bag.sequence == 2**40 and from_bag.latency.nanosec == 31_500_000


def test_a_shaped_trajectory_carries_its_stamp_times_and_velocities():
    shaped = Shaped(
        3_500_000_000,
        np.array([0.0, 0.02]),
        np.array([[0.5, 1.0], [0.75, 1.0]]),
        np.array([[12.5, 0.0], [0.0, 0.0]]),
    )
    msg = shaped_trajectory_msg(["x", "y"], shaped)
    assert msg.header.stamp == Time(sec=3, nanosec=500_000_000) and msg.joint_names == ["x", "y"]
    assert [list(p.positions) for p in msg.points] == [[0.5, 1.0], [0.75, 1.0]]
    assert [list(p.velocities) for p in msg.points] == [[12.5, 0.0], [0.0, 0.0]]
    assert msg.points[1].time_from_start == Duration(sec=0, nanosec=20_000_000)
    positions_only = shaped_trajectory_msg(
        ["x", "y"], Shaped(0, np.zeros(1), np.ones((1, 2)), None)
    )
    assert positions_only.header.stamp == Time() and list(positions_only.points[0].velocities) == []
    with pytest.raises(ValueError, match="1 joint_names for 2 trajectory columns"):
        shaped_trajectory_msg(["x"], shaped)


def event(finished: bool) -> TokenEvent:
    return TokenEvent(
        request_id=9,
        stream="narration",
        origin_frame=3,
        token_ids=(5, 70_000),
        text_delta=" a cup",
        text="I see a cup",
        finished=finished,
        finish_reason="eos" if finished else None,
    )


def test_language_tokens_running_and_finished():
    origin = Time(sec=11, nanosec=0)
    running = language_tokens_msg(event(False), stamp=STAMP, origin_stamp=origin)
    assert (running.stream, running.request_id, running.token_ids.tolist()) == (
        "narration",
        9,
        [5, 70_000],
    )
    assert (running.text_delta, running.text) == (" a cup", "I see a cup")
    assert running.header.stamp == STAMP and running.origin_stamp == origin
    assert (running.finished, running.finish_reason) == (False, "")
    done = language_tokens_msg(event(True), stamp=STAMP, origin_stamp=origin)
    assert (done.finished, done.finish_reason) == (True, "eos")


def language(frame=5) -> LanguageResult:
    return LanguageResult(
        frame=frame,
        events=(),
        decode_s=0.03,
        k=4,
        batch=6,
        bucket=8,
        admitted=1,
        rejected=0,
        queued=2,
        pool_used=5,
        pool_capacity=32,
    )


def test_engine_stats_from_both_phases():
    msg = engine_stats_msg(
        stamp=STAMP,
        action=chunk(),
        language=language(),
        frame_s=0.07,
        budget_s=0.1,
        deadline_misses=3,
        skipped_frames=1,
    )
    assert msg.header.stamp == STAMP and msg.frame == 5
    assert (msg.prefill_s, msg.denoise_s, msg.decode_s) == (0.01, 0.02, 0.03)
    assert (msg.frame_s, msg.budget_s) == (0.07, 0.1)
    assert (msg.k, msg.batch, msg.bucket) == (4, 6, 8)
    assert (msg.active_requests, msg.queued_requests) == (5, 2)
    assert (msg.pool_used, msg.pool_capacity) == (5, 32)
    assert (msg.deadline_misses, msg.skipped_frames) == (3, 1)
    assert (msg.plan, msg.plan_s) == ("", 0.0)  # a policy without a plan stage


def test_engine_stats_carry_a_two_stage_policys_plan():
    action = dataclasses.replace(chunk(), plan="r2 c5 to r3 c1", plan_s=0.004)
    msg = engine_stats_msg(
        stamp=STAMP,
        action=action,
        language=None,
        frame_s=0.05,
        budget_s=0.1,
        deadline_misses=0,
        skipped_frames=0,
    )
    assert (msg.plan, msg.plan_s) == ("r2 c5 to r3 c1", 0.004)


def test_engine_stats_without_language_and_with_mixed_frames():
    common = dict(stamp=STAMP, action=chunk(), frame_s=0.05, budget_s=0, deadline_misses=0)
    msg = engine_stats_msg(language=None, skipped_frames=0, **common)
    assert (msg.decode_s, msg.k, msg.batch, msg.pool_capacity) == (0.0, 0, 0, 0)
    assert msg.budget_s == 0.0
    with pytest.raises(ValueError, match="language result of frame 4 for frame 5"):
        engine_stats_msg(language=language(frame=4), skipped_frames=0, **common)


def test_narration_markers_have_stable_ids_and_stack_by_name():
    texts = {"narration": "picking up the red cup", "memory": "the cup was on the left"}
    markers = narration_markers(texts, stamp=STAMP, frame_id="head").markers
    assert [m.text for m in markers] == [
        "memory: the cup was on the left",
        "narration: picking up the red cup",
    ]
    again = narration_markers({"narration": "other"}, stamp=STAMP, frame_id="head").markers
    assert again[0].id == markers[1].id == marker_id("narration") != markers[0].id
    for marker in markers:
        assert (marker.ns, marker.type, marker.action) == ("oxygen", Marker.TEXT_VIEW_FACING, 0)
        assert marker.header == Header(stamp=STAMP, frame_id="head")
        assert marker.scale.z > 0 and marker.color.a == 1.0
        assert marker.pose.orientation.w == 1.0
    assert markers[0].pose.position.z < markers[1].pose.position.z


def test_long_narration_wraps_and_pushes_the_next_stream_up():
    long = "word " * 40
    markers = narration_markers({"a": long, "b": "x"}, stamp=STAMP, frame_id="").markers
    lines = markers[0].text.count("\n") + 1
    assert lines >= 3 and max(len(line) for line in markers[0].text.split("\n")) <= 60
    gap = markers[1].pose.position.z - markers[0].pose.position.z
    assert gap == pytest.approx(0.12 * (lines + 1) / 2)


# ------------------------------------------------------------------------ bounds


def with_png_size(png: bytes, width: int, height: int) -> bytes:
    """The PNG with its IHDR declaring width x height (CRC fixed), pixel data unchanged."""
    ihdr = b"IHDR" + struct.pack(">II", width, height) + png[24:29]
    return png[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + png[33:]


def with_jpeg_size(jpeg: bytes, width: int, height: int) -> bytes:
    at = next(i for i in range(2, len(jpeg)) if jpeg[i] == 0xFF and jpeg[i + 1] in (0xC0, 0xC2))
    return jpeg[: at + 5] + struct.pack(">HH", height, width) + jpeg[at + 9 :]


@pytest.mark.parametrize(
    ("fmt", "save"),
    [
        ("PNG", {}),
        ("JPEG", {}),
        ("JPEG", {"progressive": True}),  # SOF2
        ("JPEG", {"exif": b"Exif\0\0" + bytes(3000), "icc_profile": bytes(5000)}),  # APPn first
    ],
)
def test_declared_size_is_read_from_the_header(fmt, save):
    pixels = RNG.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    data = compressed(pixels, fmt, **save).data.tobytes()
    assert declared_size(data) == (53, 37)
    assert declared_size(compressed(pixels[:, :, 0], fmt, **save).data.tobytes()) == (53, 37)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_an_image_declaring_too_many_pixels_is_refused_before_decoding(fmt):
    """8000 x 8000 declared over 3 x 5 pixels of data: a decoder would fail on the data, so
    the pixel count in the error shows the header alone decided."""
    data = compressed(RGB, fmt).data.tobytes()
    lying = with_png_size(data, 8000, 8000) if fmt == "PNG" else with_jpeg_size(data, 8000, 8000)
    with pytest.raises(InputError) as err:
        image_to_rgb(CompressedImage(format="png", data=lying))
    assert str(err.value) == (
        "CompressedImage is 8000x8000 = 64000000 pixels, over max_image_pixels=8294400"
    )


def test_an_image_at_the_pixel_limit_decodes_and_one_above_does_not():
    msg = compressed(RGB, "PNG")
    np.testing.assert_array_equal(image_to_rgb(msg, max_pixels=15), RGB)
    with pytest.raises(
        InputError, match="CompressedImage is 5x3 = 15 pixels, over max_image_pixels=14"
    ):
        image_to_rgb(msg, max_pixels=14)
    raw = raw_image(RGB, "rgb8")
    np.testing.assert_array_equal(image_to_rgb(raw, max_pixels=15), RGB)
    with pytest.raises(InputError, match="Image is 5x3 = 15 pixels, over max_image_pixels=14"):
        image_to_rgb(raw, max_pixels=14)


def test_a_huge_raw_image_is_refused_before_its_data_is_looked_at():
    msg = Image(height=100_000, width=100_000, encoding="rgb8", step=300_000, data=b"")
    with pytest.raises(InputError, match="100000x100000 = 10000000000 pixels, over max_image"):
        image_to_rgb(msg)


@settings(max_examples=300, deadline=None)
@given(tail=st.binary(max_size=40), png=st.booleans())
def test_a_mangled_header_is_a_header_error_never_a_crash(tail: bytes, png: bool):
    data = (PNG_SIGNATURE if png else JPEG_SIGNATURE) + tail
    try:
        width, height = declared_size(data)
    except HeaderError:
        return
    assert 0 <= width < 2**32 and 0 <= height < 2**32


def test_a_jpeg_without_a_frame_header_is_undecodable():
    data = JPEG_SIGNATURE + b"\xe0\x00\x04ab\xff\xda\x00\x02"
    with pytest.raises(InputError, match="does not decode: JPEG has no frame header"):
        image_to_rgb(CompressedImage(format="jpeg", data=data))


def test_quoted_message_text_is_an_excerpt_with_its_length():
    """A 1 MB encoding or format, 100,000 joint names: errors stay short and say how long."""
    huge = "x" * 1_048_576
    messages = []
    for msg in (
        raw_image(RGB, "rgb8"),
        CompressedImage(format=huge, data=b"GIF89a"),
        CompressedImage(format=huge, data=b""),
    ):
        if isinstance(msg, Image):
            msg.encoding = huge
        with pytest.raises(InputError) as err:
            image_to_rgb(msg)
        messages.append(str(err.value))
    names = [f"joint_{i}" for i in range(100_000)]
    for state in (
        JointState(name=names, position=[0.0] * len(names)),
        JointState(name=["a", "a"] * 50_000, position=[0.0] * 100_000),
    ):
        with pytest.raises(InputError) as err:
            joint_positions(state, ["a", "b"])
        messages.append(str(err.value))
    assert all("(1048576 chars)" in m for m in messages[:3])
    assert "(100000 items)" in messages[3]
    assert messages[4] == "JointState names joints more than once: ['a']"
    assert max(map(len, messages)) < 1000


# --------------------------------------------------------------------------- builders


def test_rgb8_image_msg_is_the_inverse_of_image_to_rgb():
    stamp = ns_to_stamp(1_700_000_000_025_000_000)
    msg = rgb8_image_msg(RGB, stamp=stamp, frame_id="cam")
    assert (msg.encoding, msg.height, msg.width, msg.step) == ("rgb8", 3, 5, 15)
    assert msg.header.stamp == stamp and msg.header.frame_id == "cam"
    np.testing.assert_array_equal(image_to_rgb(msg), RGB)


def test_joint_state_msg_is_the_inverse_of_joint_positions():
    positions = np.array([0.25, -1.5, 3.0])
    msg = joint_state_msg(["a", "b", "c"], positions, stamp=Time(sec=4), frame_id="base_link")
    assert list(msg.position) == [0.25, -1.5, 3.0] and list(msg.velocity) == []
    np.testing.assert_array_equal(joint_positions(msg, ["c", "a"]), [3.0, 0.25])


def test_trajectory_msg_holds_the_rows_at_their_times_exactly():
    rows = np.array([[0.5, 1.0], [0.75, -2.0], [1.0, 0.125]])
    msg = trajectory_msg(("j1", "j2"), rows, [0.0, 0.05, 0.1], stamp=Time(sec=7))
    assert msg.points == trajectory_points(rows, [0.0, 0.05, 0.1])
    assert msg.joint_names == ["j1", "j2"] and msg.header.stamp == Time(sec=7)
    assert [stamp_to_ns(p.time_from_start) for p in msg.points] == [0, 50_000_000, 100_000_000]
    assert [list(p.positions) for p in msg.points] == rows.tolist()


def test_msgtype_names_a_class_as_bags_do():
    assert msgtype(Image) == "sensor_msgs/msg/Image"
    assert msgtype(ActionChunk) == "oxygen_ros/msg/ActionChunk"


def test_joint_velocities_are_read_only_when_every_joint_has_a_finite_one():
    msg = joint_state_msg(
        ["a", "b", "c"], np.zeros(3), stamp=Time(), frame_id="", velocities=np.array([1, 2, 3.0])
    )
    np.testing.assert_array_equal(joint_velocities(msg, ["c", "a"]), [3.0, 1.0])
    assert joint_velocities(msg, ["d"]) is None
    assert (
        joint_velocities(joint_state_msg(["a"], np.zeros(1), stamp=Time(), frame_id=""), ["a"])
        is None
    )
    msg.velocity[1] = float("nan")
    assert joint_velocities(msg, ["b"]) is None and joint_velocities(msg, ["a"]) is not None
