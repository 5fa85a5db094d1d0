"""The one place where ROS messages become model inputs and engine results become messages.

The node and the rosbag replay tool both import these functions, so a bag replayed
offline is converted exactly as the live robot's topics are. Everything here is a pure
function of its arguments: no node, no clock, no state. Input converters read message
fields only, so they accept rclpy messages and rosbags' dataclasses alike.

Inputs fail loudly: a message the model cannot use raises `InputError` naming the field
and its value, which the frame assembler turns into a skipped frame with that reason.
Outputs fill arrays through `array.array` from raw bytes, because rclpy checks every
element of a Python list one by one (about 100x slower for an image or a chunk).

Inputs are bounded before they cost anything: an image whose header declares more than
`max_pixels` pixels is refused before it is copied or decompressed (see `image_header`),
and every piece of message text an error quotes (encodings, formats, joint names) is an
excerpt with its length (`oxygen_core.text`), so one hostile message cannot turn into
megabytes of log or /diagnostics.

Images have one decode path: Pillow for JPEG and PNG, numpy for raw encodings. ROS's
cv_bridge is deliberately not used, even where it is installed: the PyPI `cv-bridge` is
an unofficial repackaging of the ROS 1 package that fails on OpenCV 5, on padded rows
and on big-endian data; the upstream ROS 2 cv_bridge cuts padded rgb8 rows wrongly and
fails on big-endian 16-bit images under numpy 2; and in the robot's virtual environment
`import cv2` itself fails against numpy 2. The conversion here gave the right pixels in
every one of those cases (the tests build messages the way cv_bridge's cv2_to_imgmsg
does: padded `step`, and byte-swapped samples with is_bigendian set).
"""

from __future__ import annotations

import array
import io
import math
import textwrap
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import Point, Pose, Quaternion, Vector3
from PIL import Image
from sensor_msgs.msg import Image as ImageMsg
from sensor_msgs.msg import JointState
from std_msgs.msg import ColorRGBA, Header
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker, MarkerArray

from oxygen_core.clock import NS_PER_S
from oxygen_core.controller.shaping import Shaped
from oxygen_core.engine.types import ActionResult, LanguageResult, TokenEvent
from oxygen_core.image import to_rgb
from oxygen_core.text import excerpt, excerpt_list
from oxygen_ros.image_header import JPEG_SIGNATURE, PNG_SIGNATURE, HeaderError, declared_size
from oxygen_ros.msg import ActionChunk, EngineStats, LanguageTokens


class InputError(ValueError):
    """A message the model cannot use; the text names the field and the bad value."""


# encoding -> (sample type, channels, stored as BGR). Generic OpenCV types carry no
# colour order; like cv_bridge, their channels are taken as they come.
_ENCODINGS: dict[str, tuple[type[np.unsignedinteger], int, bool]] = {
    "rgb8": (np.uint8, 3, False),
    "bgr8": (np.uint8, 3, True),
    "rgba8": (np.uint8, 4, False),
    "bgra8": (np.uint8, 4, True),
    "mono8": (np.uint8, 1, False),
    "8UC1": (np.uint8, 1, False),
    "8UC3": (np.uint8, 3, False),
    "8UC4": (np.uint8, 4, False),
    "mono16": (np.uint16, 1, False),
    "rgb16": (np.uint16, 3, False),
    "bgr16": (np.uint16, 3, True),
}
_MAGIC = {"JPEG": JPEG_SIGNATURE, "PNG": PNG_SIGNATURE}
# Four 1920 x 1080 frames: every camera a robot sends the model (which sees 224 x 224)
# fits with room to spare, and the largest accepted image decodes to 25 MB of RGB.
DEFAULT_MAX_IMAGE_PIXELS = 4 * 1920 * 1080
# Pillow warns (DecompressionBombWarning) above this many pixels and refuses twice as
# many; a limit at or below it keeps the check here the first and only line of defence.
PILLOW_WARN_PIXELS = Image.MAX_IMAGE_PIXELS


# --------------------------------------------------------------------------- images


def image_to_rgb(msg: Any, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> np.ndarray:
    """sensor_msgs/Image or CompressedImage -> uint8 [H, W, 3] RGB.

    An image of more than `max_pixels` pixels (width x height, as declared by a raw
    image's fields or a compressed image's header) is refused before it is copied or
    decoded. A raw image comes back as a view of the message's buffer where its layout
    allows (rgb8 without row padding costs no copy); keep the message alive while used.
    """
    if hasattr(msg, "format"):
        return _compressed_to_rgb(msg, max_pixels)
    return _raw_to_rgb(msg, max_pixels)


def _check_pixels(what: str, width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise InputError(
            f"{what} is {width}x{height} = {width * height} pixels, over "
            f"max_image_pixels={max_pixels}"
        )


def _raw_to_rgb(msg: Any, max_pixels: int) -> np.ndarray:
    """View `data` as (height, step) bytes, cut the row padding, reinterpret the samples."""
    if msg.encoding not in _ENCODINGS:
        raise InputError(
            f"Image encoding {excerpt(msg.encoding)} is not one of {sorted(_ENCODINGS)}"
        )
    sample, channels, bgr = _ENCODINGS[msg.encoding]
    height, width, step = msg.height, msg.width, msg.step
    if height == 0 or width == 0:
        raise InputError(f"Image is empty: height={height} width={width}")
    _check_pixels("Image", width, height, max_pixels)
    row_bytes = width * channels * np.dtype(sample).itemsize
    if step < row_bytes:
        raise InputError(
            f"Image step={step} is shorter than a {msg.encoding} row of width={width} "
            f"({row_bytes} bytes)"
        )
    data = np.frombuffer(msg.data, dtype=np.uint8)
    if data.size != height * step:
        raise InputError(
            f"Image data has {data.size} bytes, expected height*step = {height}*{step} "
            f"= {height * step}"
        )
    dtype = np.dtype(sample).newbyteorder(">" if msg.is_bigendian else "<")
    rows = data.reshape(height, step)[:, :row_bytes]
    return _to_rgb8(rows.view(dtype).reshape(height, width, channels), bgr)


def _to_rgb8(pixels: np.ndarray, bgr: bool) -> np.ndarray:
    """uint8 or uint16 [H, W] / [H, W, C] in RGB(A) or BGR(A) order -> uint8 [H, W, 3].

    16-bit samples keep their high byte: the full 0..65535 range maps onto 0..255.
    """
    if pixels.dtype.itemsize == 2:
        pixels = (pixels >> 8).astype(np.uint8)
    if bgr:
        pixels = pixels[:, :, 2::-1]
    return to_rgb(pixels)


def _compressed_to_rgb(msg: Any, max_pixels: int) -> np.ndarray:
    """JPEG or PNG bytes -> RGB, recognised by their signature (`format` is free text)."""
    head = bytes(msg.data[:8])
    if not head:
        raise InputError(f"CompressedImage data is empty (format={excerpt(msg.format)})")
    if not any(head.startswith(magic) for magic in _MAGIC.values()):
        raise InputError(
            f"CompressedImage data is neither JPEG nor PNG (format={excerpt(msg.format)}, "
            f"first bytes {head.hex()})"
        )
    data = np.frombuffer(msg.data, dtype=np.uint8).tobytes()
    try:
        width, height = declared_size(data)
    except HeaderError as error:
        raise _undecodable(msg, error) from error
    _check_pixels("CompressedImage", width, height, max_pixels)
    return _to_rgb8(_decode(msg, data), bgr=False)


def _decode(msg: Any, data: bytes) -> np.ndarray:
    """Decode with Pillow: uint8 grey or RGB, or uint16 grey (16-bit PNG)."""
    try:
        with Image.open(io.BytesIO(data), formats=tuple(_MAGIC)) as img:
            if img.mode in ("L", "RGB") or img.mode.startswith("I;16"):
                return np.asarray(img)
            return np.asarray(img.convert("RGB"))
    # Pillow raises SyntaxError for a broken PNG chunk, next to OSError and ValueError.
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise _undecodable(msg, error) from error


def _undecodable(msg: Any, cause: object) -> InputError:
    return InputError(
        f"CompressedImage data ({len(msg.data)} bytes, format={excerpt(msg.format)}) "
        f"does not decode: {cause}"
    )


def rgb8_image_msg(pixels: np.ndarray, *, stamp: Time, frame_id: str) -> ImageMsg:
    """uint8 [H, W, 3] RGB -> sensor_msgs/Image rgb8 without row padding (the inverse of
    image_to_rgb for it)."""
    height, width, _ = pixels.shape
    return ImageMsg(
        header=Header(stamp=stamp, frame_id=frame_id),
        height=height,
        width=width,
        encoding="rgb8",
        is_bigendian=0,
        step=width * 3,
        data=np.ascontiguousarray(pixels, np.uint8).tobytes(),
    )


# --------------------------------------------------------------------------- joints


def joint_positions(msg: Any, joint_names: Sequence[str]) -> np.ndarray:
    """sensor_msgs/JointState -> float32 [len(joint_names)] in the model's joint order.

    The message may list joints in any order and carry joints the model does not use
    (see `unused_joints`); every model joint must be present with a finite position.
    """
    names = list(msg.name)
    positions = np.asarray(msg.position, dtype=np.float64)
    if positions.shape != (len(names),):
        raise InputError(f"JointState has {len(names)} names but {positions.size} positions")
    index = {name: i for i, name in enumerate(names)}
    # A repeat of a joint the model ignores (e.g. two controllers' states merged) is fine.
    repeated = sorted({name for name in joint_names if names.count(name) > 1})
    if repeated:
        raise InputError(f"JointState names joints more than once: {excerpt_list(repeated)}")
    missing = [name for name in joint_names if name not in index]
    if missing:
        raise InputError(
            f"JointState lacks joints {excerpt_list(missing)} (it has {excerpt_list(names)})"
        )
    state = positions[[index[name] for name in joint_names]].astype(np.float32)
    bad = [name for name, ok in zip(joint_names, np.isfinite(state), strict=True) if not ok]
    if bad:
        raise InputError(f"JointState positions are not finite for joints {excerpt_list(bad)}")
    return state


def joint_state_msg(
    joint_names: Sequence[str],
    positions: np.ndarray,
    *,
    stamp: Time,
    frame_id: str,
    velocities: np.ndarray | None = None,
) -> JointState:
    """Positions (and velocities) in joint_names order -> sensor_msgs/JointState (no
    effort); the inverse of joint_positions and joint_velocities."""
    msg = JointState(
        header=Header(stamp=stamp, frame_id=frame_id),
        name=list(joint_names),
        position=array.array("d", np.asarray(positions, np.float64).tobytes()),
    )
    if velocities is not None:
        msg.velocity = array.array("d", np.asarray(velocities, np.float64).tobytes())
    return msg


def joint_velocities(msg: Any, joint_names: Sequence[str]) -> np.ndarray | None:
    """sensor_msgs/JointState -> float64 velocities of joint_names (in that order), or None
    when the message carries none (an empty velocity field is allowed), lacks a joint or
    has a non-finite one: a hold then cannot ramp down and stops where the joints are."""
    names, velocities = list(msg.name), np.asarray(msg.velocity, np.float64)
    if velocities.shape != (len(names),) or any(names.count(n) != 1 for n in joint_names):
        return None
    picked = velocities[[names.index(n) for n in joint_names]]
    return picked if np.all(np.isfinite(picked)) else None


def unused_joints(msg: Any, joint_names: Sequence[str]) -> tuple[str, ...]:
    """Joints in the message that the model ignores, in message order (for diagnostics)."""
    used = set(joint_names)
    return tuple(name for name in msg.name if name not in used)


# --------------------------------------------------------------------------- time


def stamp_to_seconds(stamp: Any) -> float:
    """builtin_interfaces/Time (or Duration) -> float seconds."""
    return stamp.sec + stamp.nanosec / NS_PER_S


def _split_seconds(seconds: float) -> tuple[int, int]:
    """Whole seconds (floored, so negative times keep nanosec >= 0) and nanoseconds."""
    whole = math.floor(seconds)
    nanosec = round((seconds - whole) * NS_PER_S)
    if nanosec == NS_PER_S:
        return whole + 1, 0
    return whole, nanosec


def seconds_to_stamp(seconds: float) -> Time:
    """Float seconds -> builtin_interfaces/Time."""
    sec, nanosec = _split_seconds(seconds)
    return Time(sec=sec, nanosec=nanosec)


def stamp_to_ns(stamp: Any) -> int:
    """builtin_interfaces/Time (or Duration) -> integer nanoseconds (exact: for step
    arithmetic, and as a key that joins the messages of one frame)."""
    return stamp.sec * NS_PER_S + stamp.nanosec


def ns_to_stamp(time_ns: int) -> Time:
    """Integer nanoseconds -> builtin_interfaces/Time, exactly."""
    return Time(sec=time_ns // NS_PER_S, nanosec=time_ns % NS_PER_S)


def duration_msg(seconds: float) -> Duration:
    """Float seconds -> builtin_interfaces/Duration."""
    sec, nanosec = _split_seconds(seconds)
    return Duration(sec=sec, nanosec=nanosec)


# --------------------------------------------------------------------------- outputs


def _chunk_rows(result: ActionResult) -> np.ndarray:
    """The result's actions as a C-contiguous float32 [H, D] array."""
    actions = np.ascontiguousarray(result.actions, dtype=np.float32)
    if actions.ndim != 2:
        raise ValueError(f"actions must be [horizon, action_dim], got shape {actions.shape}")
    return actions


def action_chunk_msg(
    result: ActionResult,
    *,
    stamp: Time,
    sequence: int,
    joint_names: Sequence[str],
    control_period_s: float,
    latency_s: float,
    deadline_met: bool,
    frame_id: str = "",
) -> ActionChunk:
    """ActionResult -> oxygen_ros/ActionChunk; `actions` is the H x D chunk row-major.

    joint_names names the D action columns, or is empty when they have no joint names.
    """
    actions = _chunk_rows(result)
    horizon, action_dim = actions.shape
    if joint_names and len(joint_names) != action_dim:
        raise ValueError(f"{len(joint_names)} joint_names for action_dim {action_dim}")
    return ActionChunk(
        header=Header(stamp=stamp, frame_id=frame_id),
        sequence=int(sequence),
        horizon=horizon,
        action_dim=action_dim,
        actions=array.array("f", actions.tobytes()),
        joint_names=list(joint_names),
        control_period=duration_msg(control_period_s),
        latency=duration_msg(latency_s),
        deadline_met=bool(deadline_met),
    )


def action_chunk_rows(msg: ActionChunk, dtype: type = np.float64) -> np.ndarray:
    """An ActionChunk's actions as [horizon, action_dim] (action_chunk_msg's inverse); the
    caller has checked that they fill that shape."""
    return np.asarray(msg.actions, dtype).reshape(msg.horizon, msg.action_dim)


def shaped_trajectory_msg(joint_names: Sequence[str], shaped: Shaped) -> JointTrajectory:
    """A trajectory shaped for the controller (oxygen_core.controller.shaping) ->
    trajectory_msgs/JointTrajectory: a stamp of 0 is "on arrival"; velocities where the
    shape carries them (cubic segments), positions only otherwise."""
    if len(joint_names) != shaped.positions.shape[1]:
        raise ValueError(
            f"{len(joint_names)} joint_names for {shaped.positions.shape[1]} trajectory columns"
        )
    stamp = ns_to_stamp(shaped.stamp_ns)
    return trajectory_msg(
        joint_names, shaped.positions, shaped.times, stamp=stamp, velocities=shaped.velocities
    )


def trajectory_msg(
    joint_names: Sequence[str],
    rows: np.ndarray,
    times: Sequence[float],
    *,
    stamp: Time,
    velocities: np.ndarray | None = None,
) -> JointTrajectory:
    """Rows of positions (and velocities) at `times` (seconds after `stamp`) ->
    JointTrajectory, as given: the receiver judges names and values (the sim's
    `tools.sim.messages.trajectory_of` is the way back)."""
    return JointTrajectory(
        header=Header(stamp=stamp),
        joint_names=list(joint_names),
        points=trajectory_points(rows, times, velocities),
    )


def stop_chunk_msg(
    joint_names: Sequence[str], action_dim: int, *, control_period_s: float
) -> ActionChunk:
    """The hold of a controller that reads ~/command_chunk: a chunk of 0 rows, stamped
    zero (on arrival), meaning "run nothing more: stop" (a velocity controller commands
    zero velocity). No measured state is needed, unlike a position hold."""
    return ActionChunk(
        header=Header(stamp=Time()),
        horizon=0,
        action_dim=action_dim,
        joint_names=list(joint_names),
        control_period=duration_msg(control_period_s),
    )


def trajectory_points(
    rows: np.ndarray, times: Sequence[float], velocities: np.ndarray | None = None
) -> list[JointTrajectoryPoint]:
    """One JointTrajectoryPoint per row (float64 positions, and velocities when given) at
    its time_from_start."""
    rows = np.asarray(rows, np.float64)
    points = [
        JointTrajectoryPoint(
            positions=array.array("d", row.tobytes()), time_from_start=duration_msg(t)
        )
        for t, row in zip(times, rows, strict=True)
    ]
    if velocities is not None:
        for point, row in zip(points, np.asarray(velocities, np.float64), strict=True):
            point.velocities = array.array("d", row.tobytes())
    return points


def language_tokens_msg(event: TokenEvent, *, stamp: Time, origin_stamp: Time) -> LanguageTokens:
    """TokenEvent -> oxygen_ros/LanguageTokens; finish_reason is "" while running."""
    return LanguageTokens(
        header=Header(stamp=stamp),
        stream=event.stream,
        request_id=int(event.request_id),
        origin_stamp=origin_stamp,
        token_ids=array.array("i", event.token_ids),
        text_delta=event.text_delta,
        text=event.text,
        finished=bool(event.finished),
        finish_reason=event.finish_reason or "",
    )


def engine_stats_msg(
    *,
    stamp: Time,
    action: ActionResult,
    language: LanguageResult | None,
    frame_s: float,
    budget_s: float,
    deadline_misses: int,
    skipped_frames: int,
) -> EngineStats:
    """One frame's timings and load -> oxygen_ros/EngineStats.

    language is None for a frame without a language phase; its fields are then 0.
    active_requests counts the requests that still hold a KV row after the frame.
    """
    if language is not None and language.frame != action.frame:
        raise ValueError(f"language result of frame {language.frame} for frame {action.frame}")
    msg = EngineStats(
        header=Header(stamp=stamp),
        frame=int(action.frame),
        prefill_s=float(action.prefill_s),
        denoise_s=float(action.denoise_s),
        frame_s=float(frame_s),
        budget_s=float(budget_s),
        deadline_misses=int(deadline_misses),
        skipped_frames=int(skipped_frames),
        handover=str(action.handover),
        delay_steps=int(action.delay_steps),
        plan=action.plan or "",
        plan_s=float(action.plan_s),
    )
    if language is not None:
        msg.decode_s = float(language.decode_s)
        msg.k = int(language.k)
        msg.batch = int(language.batch)
        msg.bucket = int(language.bucket)
        msg.active_requests = int(language.pool_used)
        msg.queued_requests = int(language.queued)
        msg.pool_used = int(language.pool_used)
        msg.pool_capacity = int(language.pool_capacity)
    return msg


# Narration markers: text 8 cm high, a line every 12 cm, stacked upwards from the frame origin.
_TEXT_HEIGHT_M = 0.08
_LINE_SPACING_M = 0.12
_WRAP_CHARS = 60
_TEXT_COLOUR = ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0)


def marker_id(stream: str) -> int:
    """A marker id that stays the same for a stream across frames, runs and processes."""
    return zlib.crc32(stream.encode()) & 0x7FFFFFFF


def narration_markers(texts: Mapping[str, str], *, stamp: Time, frame_id: str) -> MarkerArray:
    """stream name -> text, as one camera-facing text marker per stream for rviz.

    Streams are stacked in name order, each "name: text" wrapped to short lines, so
    every stream keeps its place however the dict was built.
    """
    markers = []
    bottom = 0.0
    for stream in sorted(texts):
        text = textwrap.fill(f"{stream}: {texts[stream]}", _WRAP_CHARS)
        block = _LINE_SPACING_M * (text.count("\n") + 1)
        markers.append(
            Marker(
                header=Header(stamp=stamp, frame_id=frame_id),
                ns="oxygen",
                id=marker_id(stream),
                type=Marker.TEXT_VIEW_FACING,
                action=Marker.ADD,
                # rviz centres a text marker's lines on its position.
                pose=Pose(position=Point(z=bottom + block / 2), orientation=Quaternion(w=1.0)),
                scale=Vector3(z=_TEXT_HEIGHT_M),
                color=_TEXT_COLOUR,
                text=text,
            )
        )
        bottom += block
    return MarkerArray(markers=markers)


def msgtype(msg_class: type) -> str:
    """ "pkg/msg/Name" of an rclpy message class (module pkg.msg._name), as bags and
    `ros2 topic` name the type."""
    package, kind = msg_class.__module__.split(".")[:2]
    return f"{package}/{kind}/{msg_class.__name__}"
