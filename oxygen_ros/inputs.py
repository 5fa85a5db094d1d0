"""The frame's inputs: what the callbacks store and how one frame gathers them.

Subscription callbacks run on the executor thread and must stay cheap, so they only
keep a reference to the latest message. The frame loop (another thread) calls
`assemble(now_s)` once per frame: it takes one snapshot of those references, checks
that every input is there, fresh and consistent, and only then decodes and resizes the
images. Replacing a reference is atomic in Python, so no lock is needed.

A frame that cannot be assembled is not an error but a `Skip` with a reason from a
fixed set (counted per reason, for /diagnostics) and a sentence for the log. Times are
plain float seconds passed in by the caller: node-clock time on the robot, bag time in
replay, so the assembler never reads a clock itself. Ages and camera sync are measured
from header stamps.

An input is stale when its stamp is more than stale_timeout_s away from now in either
direction: a stamp from the future is as suspect as an old one (a bag that looped, a
sensor whose clock runs ahead), and would otherwise stay "fresh" long after it stopped.

Camera topics fill the model's image slots in order. A camera without a usable image
(missing, stale or undecodable) either skips the frame ("skip") or is left out of the
observation ("blank"), which the model turns into a zero image with mask False, as openpi
does for an absent camera; `blanked` then says why, by image slot, for the log.

Inputs from the graph are bounded here, since any peer may publish on these topics. An
image over max_image_pixels is a `bad_image` before it is decoded. An instruction over
max_instruction_chars, or one the policy says cannot fit its prompt (`instruction_check`,
run once when the instruction arrives), is refused: the previous instruction stays in
force, and `instruction_refusals` and `instruction_refused` (why, as a short excerpt)
say so for /diagnostics.

The robot's runtime conventions that act on messages are applied here, as openpi's
clients apply them before the server: a camera's rotation (`RobotConfig.camera_rotations`)
before resizing, and the policy's check that the measured state is in the units the robot
spec says (`state_check`, e.g. a gripper far outside its range: a `bad_joint_state`). A
frame also reads the commanded joints' positions and velocities from the same JointState
(`commanded_names`, then `commanded` and `commanded_velocities`): the chunk gate and the
trajectory's first segment judge commands against them, and a controller's joint may be
another joint than the state's (ALOHA's gripper command is the gripper's angle, its state
the finger position).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from oxygen_core.config import IMAGE_SLOTS
from oxygen_core.image import resize_with_pad
from oxygen_core.observation import Observation
from oxygen_core.text import excerpt
from oxygen_ros.convert import (
    DEFAULT_MAX_IMAGE_PIXELS,
    PILLOW_WARN_PIXELS,
    InputError,
    image_to_rgb,
    joint_positions,
    joint_velocities,
    stamp_to_seconds,
    unused_joints,
)

SkipReason = Literal[
    "no_instruction",
    "missing_joint_state",
    "stale_joint_state",
    "bad_joint_state",
    "missing_camera",
    "stale_camera",
    "unsynced_cameras",
    "bad_image",
]
SKIP_REASONS: tuple[SkipReason, ...] = typing.get_args(SkipReason)
MissingCameraPolicy = Literal["skip", "blank"]
MISSING_CAMERA_POLICIES: tuple[MissingCameraPolicy, ...] = typing.get_args(MissingCameraPolicy)
JOINT_STATE = "joint_state"  # freshness() key of the joint state, next to the slot names
# A spoken or typed task is a sentence or two; pi0.5's largest prompt is 200 tokens.
DEFAULT_MAX_INSTRUCTION_CHARS = 1000
InstructionCheck = Callable[[str], str | None]  # why an instruction is refused, or None
StateCheck = Callable[[np.ndarray, Sequence[str]], str | None]  # why a state is unusable


@dataclasses.dataclass(frozen=True)
class _Usable:
    """Cameras a frame can use, and (under "blank") why the others cannot be."""

    cameras: list[int]
    problems: dict[int, Skip]  # camera index -> why it cannot be used


@dataclasses.dataclass(frozen=True)
class Skip:
    """Why a frame was not assembled: a reason to count and a sentence to log."""

    reason: SkipReason
    detail: str


class FrameAssembler:
    """Latest messages in, one `Observation` (or a `Skip`) per frame out."""

    def __init__(
        self,
        *,
        camera_topics: Sequence[str],
        joint_names: Sequence[str],
        state_dim: int,
        image_size: int,
        stale_timeout_s: float,
        sync_slop_s: float,
        missing_camera: MissingCameraPolicy = "skip",
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
        max_instruction_chars: int = DEFAULT_MAX_INSTRUCTION_CHARS,
        instruction_check: InstructionCheck | None = None,
        state_check: StateCheck | None = None,
        commanded_names: Sequence[str] = (),
        camera_rotations: Sequence[int] = (),
    ) -> None:
        """camera_rotations: degrees per camera topic (() = none)."""
        self.camera_topics = tuple(camera_topics)
        self.slots = IMAGE_SLOTS[: len(camera_topics)]
        self.joint_names = tuple(joint_names)
        self.image_size = image_size
        self.stale_timeout_s = stale_timeout_s
        self.sync_slop_s = sync_slop_s
        self.missing_camera = missing_camera
        self.max_image_pixels = max_image_pixels
        self.max_instruction_chars = max_instruction_chars
        self._instruction_check = instruction_check
        self._state_check = state_check
        self.commanded_names = tuple(commanded_names)
        self.camera_rotations = tuple(camera_rotations) or (0,) * len(self.camera_topics)
        self._check_settings(state_dim)
        self.skip_counts: dict[SkipReason, int] = dict.fromkeys(SKIP_REASONS, 0)
        self.instruction_refusals = 0
        self.instruction_refused = ""  # why the latest instruction was refused; "" if taken
        self.blank_counts: dict[str, int] = dict.fromkeys(self.slots, 0)
        self.ignored_joints: tuple[str, ...] = ()  # joints of the last JointState not used
        # The commanded joints' positions and velocities in the last assembled frame's
        # JointState (None without commanded_names; velocities None when it carries none).
        self.commanded: np.ndarray | None = None
        self.commanded_velocities: np.ndarray | None = None
        self.blanked: dict[str, str] = {}  # image slot -> why it was left out of the last frame
        self._images: list[Any | None] = [None] * len(self.slots)
        self._joint_state: Any | None = None
        self._instruction = ""
        # (message, resized image or why it does not decode) per slot: a camera slower
        # than the frame rate is decoded once, not once per frame, and so is a corrupt
        # image. Touched by assemble() only.
        self._decoded: list[tuple[Any, np.ndarray | str] | None] = [None] * len(self.slots)

    # Callbacks: store the reference, nothing else.

    def on_image(self, slot_index: int, msg: Any) -> None:
        """Keep the latest sensor_msgs/Image or CompressedImage of one camera slot."""
        if not 0 <= slot_index < len(self._images):
            raise IndexError(f"slot_index {slot_index} outside [0, {len(self._images)})")
        self._images[slot_index] = msg

    def on_joint_state(self, msg: Any) -> None:
        """Keep the latest sensor_msgs/JointState."""
        self._joint_state = msg

    def measured_positions(self, names: Sequence[str]) -> np.ndarray | None:
        """The latest JointState's positions of `names` (in that order), stale or not: where
        a hold keeps the robot. None before the first message, or when it lacks a name or
        has a non-finite value (there is nothing safe to hold at)."""
        if self._joint_state is None:
            return None
        try:
            return joint_positions(self._joint_state, names)
        except InputError:
            return None

    def measured_velocities(self, names: Sequence[str]) -> np.ndarray | None:
        """The latest JointState's velocities of `names`, or None when it carries none for
        them (a hold then stops where the joints are, and a trajectory's first segment is
        judged from rest)."""
        return None if self._joint_state is None else joint_velocities(self._joint_state, names)

    def on_instruction(self, text: str) -> str | None:
        """Take a new task instruction, or refuse it and keep the previous one.

        Blank text clears the instruction (frames skip until a new one). Returns why the
        instruction was refused (also kept in `instruction_refused`), or None.
        """
        reason = self._instruction_problem(text)
        if reason is None:
            self._instruction = text.strip()
            self.instruction_refused = ""
            return None
        self.instruction_refusals += 1
        self.instruction_refused = reason
        return reason

    def _instruction_problem(self, text: str) -> str | None:
        if len(text) > self.max_instruction_chars:  # before any pass over the text
            return (
                f"instruction of {len(text)} chars is over max_instruction_chars="
                f"{self.max_instruction_chars}: {excerpt(text)}"
            )
        if not text.strip() or self._instruction_check is None:
            return None
        problem = self._instruction_check(text.strip())
        return None if problem is None else f"{problem}: {excerpt(text)}"

    # The frame's gather step.

    def assemble(self, now_s: float) -> Observation | Skip:
        """Check, decode and resize the latest inputs into one observation at `now_s`."""
        images, joint_state, prompt = list(self._images), self._joint_state, self._instruction
        result = self._gather(now_s, images, joint_state, prompt)
        if isinstance(result, Skip):
            self.skip_counts[result.reason] += 1
        return result

    def freshness(self, now_s: float) -> dict[str, float]:
        """Age in seconds of every input by header stamp (inf before the first message)."""
        ages = {slot: _age(msg, now_s) for slot, msg in zip(self.slots, self._images, strict=True)}
        ages[JOINT_STATE] = _age(self._joint_state, now_s)
        return ages

    def _gather(
        self, now_s: float, images: list[Any | None], joint_state: Any | None, prompt: str
    ) -> Observation | Skip:
        if not prompt:
            return Skip("no_instruction", "no instruction received yet, or it was blank")
        state = self._state(joint_state, now_s)
        if isinstance(state, Skip):
            return state
        used = self._usable_cameras(images, now_s)
        if isinstance(used, Skip):
            return used
        decoded: dict[str, np.ndarray] = {}
        blanked = {self.slots[i]: problem.detail for i, problem in used.problems.items()}
        for i in used.cameras:
            try:
                decoded[self.slots[i]] = self._decode(i, images[i])
            except InputError as error:
                bad = Skip("bad_image", f"{self._camera(i)}: {error}")
                if self.missing_camera == "skip":
                    return bad
                blanked[self.slots[i]] = bad.detail
        if not decoded:
            return Skip(
                "bad_image", "; ".join(blanked.values())
            )  # "blank" needs one camera to see by
        for slot in self.slots:
            if slot not in decoded:
                self.blank_counts[slot] += 1
        self.blanked = blanked
        return Observation(images=decoded, state=state, prompt=prompt)

    def _state(self, msg: Any | None, now_s: float) -> np.ndarray | Skip:
        if msg is None:
            return Skip("missing_joint_state", "no JointState received yet")
        stale = self._staleness("JointState", msg, now_s)
        if stale:
            return Skip("stale_joint_state", stale)
        try:
            state = joint_positions(msg, self.joint_names)
            commanded = joint_positions(msg, self.commanded_names) if self.commanded_names else None
        except InputError as error:
            return Skip("bad_joint_state", str(error))
        problem = self._state_check(state, self.joint_names) if self._state_check else None
        if problem:
            return Skip("bad_joint_state", problem)
        self.ignored_joints = unused_joints(msg, self.joint_names + self.commanded_names)
        self.commanded = commanded
        self.commanded_velocities = (
            joint_velocities(msg, self.commanded_names) if self.commanded_names else None
        )
        return state

    def _usable_cameras(self, images: list[Any | None], now_s: float) -> _Usable | Skip:
        """Cameras with a fresh image, synchronised (and the others' problems under
        "blank"); or why the frame skips."""
        usable: list[int] = []
        problems: dict[int, Skip] = {}
        for i, msg in enumerate(images):
            problem = self._camera_problem(i, msg, now_s)
            if problem is None:
                usable.append(i)
            elif self.missing_camera == "skip":
                return problem
            else:
                problems[i] = problem
        if not usable:
            return problems[0]  # "blank" still needs one camera to look through: the first
        stamps = {i: stamp_to_seconds(images[i].header.stamp) for i in usable}
        spread = max(stamps.values()) - min(stamps.values())
        if spread > self.sync_slop_s:
            listed = ", ".join(f"{self._camera(i)} at {t:.3f}" for i, t in stamps.items())
            return Skip(
                "unsynced_cameras",
                f"camera stamps spread {spread:.3f} s > sync_slop_s={self.sync_slop_s}: {listed}",
            )
        return _Usable(usable, problems)

    def _camera_problem(self, i: int, msg: Any | None, now_s: float) -> Skip | None:
        if msg is None:
            return Skip("missing_camera", f"no image received yet from {self._camera(i)}")
        stale = self._staleness(f"{self._camera(i)} image", msg, now_s)
        return Skip("stale_camera", stale) if stale else None

    def _staleness(self, what: str, msg: Any, now_s: float) -> str:
        """Why `msg` is stale at now_s ("" when it is fresh)."""
        age, limit = _age(msg, now_s), self.stale_timeout_s
        if not is_stale(age, limit):
            return ""
        if age > 0:
            return f"{what} is {age:.3f} s old (stale_timeout_s={limit})"
        return f"{what} is stamped {-age:.3f} s in the future (stale_timeout_s={limit})"

    def _decode(self, i: int, msg: Any) -> np.ndarray:
        cached = self._decoded[i]
        if cached is None or cached[0] is not msg:
            cached = self._decoded[i] = (msg, self._decode_new(msg, self.camera_rotations[i]))
        if isinstance(cached[1], str):
            raise InputError(cached[1])  # a new exception each frame: no growing traceback
        return cached[1]

    def _decode_new(self, msg: Any, rotation: int) -> np.ndarray | str:
        """The model's image, turned by `rotation` degrees (0 or 180), or why the message
        does not give one."""
        try:
            rgb = image_to_rgb(msg, self.max_image_pixels)
            if rotation == 180:
                rgb = rgb[::-1, ::-1]
            return resize_with_pad(rgb, self.image_size)
        except InputError as error:
            return str(error)
        except Exception as error:  # a decoder's own exception types: still a bad image
            return f"does not decode: {type(error).__name__}: {error}"

    def _check_settings(self, state_dim: int) -> None:
        """Misconfiguration fails at construction (configure time), naming value and limit."""
        if not 1 <= len(self.camera_topics) <= len(IMAGE_SLOTS):
            raise ValueError(
                f"camera_topics has {len(self.camera_topics)} topics; the model has 1 to "
                f"{len(IMAGE_SLOTS)} image slots {IMAGE_SLOTS}"
            )
        if len(self.joint_names) != state_dim:
            raise ValueError(f"{len(self.joint_names)} joint_names for state_dim {state_dim}")
        if len(self.camera_rotations) != len(self.camera_topics):
            raise ValueError(
                f"{len(self.camera_rotations)} camera_rotations for "
                f"{len(self.camera_topics)} camera_topics"
            )
        if self.missing_camera not in MISSING_CAMERA_POLICIES:
            raise ValueError(
                f"missing_camera {self.missing_camera!r} is not one of "
                f"{list(MISSING_CAMERA_POLICIES)}"
            )
        if not 1 <= self.max_image_pixels <= PILLOW_WARN_PIXELS:
            raise ValueError(
                f"max_image_pixels={self.max_image_pixels} is outside [1, {PILLOW_WARN_PIXELS}] "
                "(above it Pillow's own decompression-bomb check would act first)"
            )
        if self.max_instruction_chars < 1:
            raise ValueError(
                f"max_instruction_chars must be >= 1, got {self.max_instruction_chars}"
            )
        if self.image_size < 1 or self.stale_timeout_s <= 0 or self.sync_slop_s < 0:
            raise ValueError(
                f"need image_size >= 1, stale_timeout_s > 0, sync_slop_s >= 0; got "
                f"{self.image_size}, {self.stale_timeout_s}, {self.sync_slop_s}"
            )

    def _camera(self, i: int) -> str:
        return f"{self.camera_topics[i]} ({self.slots[i]})"


def is_stale(age_s: float, stale_timeout_s: float) -> bool:
    """The staleness rule of `FrameAssembler`, for reports of `freshness()` ages."""
    return abs(age_s) > stale_timeout_s


def _age(msg: Any | None, now_s: float) -> float:
    if msg is None:
        return float("inf")
    return now_s - stamp_to_seconds(msg.header.stamp)
