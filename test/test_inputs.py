"""FrameAssembler: every skip reason, the blank-camera policy, staleness and sync edges."""

import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Header

from oxygen_core.config import IMAGE_SLOTS
from oxygen_core.observation import Observation, validate
from oxygen_core.policy import load_policy
from oxygen_core.text import excerpt
from oxygen_ros.convert import seconds_to_stamp
from oxygen_ros.inputs import SKIP_REASONS, FrameAssembler, Skip

TOPICS = ["/cam/base", "/cam/left"]
JOINTS = ["shoulder", "elbow", "wrist"]
SIZE = 8


def image(stamp: float, value: int, height=4, width=8) -> Image:
    return Image(
        header=Header(stamp=seconds_to_stamp(stamp)),
        height=height,
        width=width,
        encoding="mono8",
        step=width,
        data=bytes([value]) * (height * width),
    )


def joints(stamp: float, positions=(0.5, -1.0, 2.0), names=("wrist", "shoulder", "elbow", "hand")):
    return JointState(
        header=Header(stamp=seconds_to_stamp(stamp)),
        name=list(names),
        position=[positions[2], positions[0], positions[1], 7.0][: len(names)],
    )


SETTINGS = dict(
    camera_topics=TOPICS,
    joint_names=JOINTS,
    state_dim=3,
    image_size=SIZE,
    stale_timeout_s=0.5,
    sync_slop_s=0.25,
)


def assembler(missing_camera="skip", topics=TOPICS) -> FrameAssembler:
    return FrameAssembler(**{**SETTINGS, "camera_topics": topics}, missing_camera=missing_camera)


def fed(missing_camera="skip", stamp=10.0) -> FrameAssembler:
    """An assembler holding a full, fresh set of inputs stamped `stamp`."""
    frames = assembler(missing_camera)
    frames.on_instruction("  pick up the cup \n")
    frames.on_joint_state(joints(stamp))
    frames.on_image(0, image(stamp, 100))
    frames.on_image(1, image(stamp, 200))
    return frames


def reason(result) -> str:
    assert isinstance(result, Skip), result
    return result.reason


def test_full_inputs_give_an_exact_observation():
    frames = fed()
    obs = frames.assemble(10.1)
    assert isinstance(obs, Observation)
    assert sorted(obs.images) == sorted(IMAGE_SLOTS[:2])
    base = obs.images["base_0_rgb"]
    assert base.shape == (SIZE, SIZE, 3)
    # A 4x8 grey image fits the width of 8: rows 2..5 hold it, the rest is black.
    assert np.all(base[2:6] == 100) and np.all(base[:2] == 0) and np.all(base[6:] == 0)
    assert np.all(obs.images["left_wrist_0_rgb"][2:6] == 200)
    assert obs.state.dtype == np.float32
    np.testing.assert_array_equal(obs.state, [0.5, -1.0, 2.0])
    assert obs.prompt == "pick up the cup"
    validate(obs, IMAGE_SLOTS, 3)
    assert frames.ignored_joints == ("hand",)
    assert sum(frames.skip_counts.values()) == 0


def test_each_skip_reason_is_reported_and_counted():
    frames = assembler()
    assert reason(frames.assemble(10.0)) == "no_instruction"
    frames.on_instruction("go")
    assert reason(frames.assemble(10.0)) == "missing_joint_state"
    frames.on_joint_state(joints(9.0))
    assert reason(frames.assemble(10.0)) == "stale_joint_state"
    frames.on_joint_state(joints(10.0, names=("wrist", "shoulder")))
    skip = frames.assemble(10.0)
    assert reason(skip) == "bad_joint_state" and "['elbow']" in skip.detail
    frames.on_joint_state(joints(10.0, positions=(0.0, float("nan"), 0.0)))
    skip = frames.assemble(10.0)
    assert reason(skip) == "bad_joint_state" and "['elbow']" in skip.detail
    frames.on_joint_state(joints(10.0))
    skip = frames.assemble(10.0)
    assert reason(skip) == "missing_camera" and "/cam/base (base_0_rgb)" in skip.detail
    frames.on_image(0, image(9.0, 1))
    frames.on_image(1, image(10.0, 1))
    skip = frames.assemble(10.0)
    assert reason(skip) == "stale_camera" and "1.000 s old" in skip.detail
    frames.on_image(0, image(9.625, 1))
    assert reason(frames.assemble(10.0)) == "unsynced_cameras"
    bad = image(10.0, 1)
    bad.encoding = "yuv422"
    frames.on_image(0, bad)
    skip = frames.assemble(10.0)
    assert reason(skip) == "bad_image" and skip.detail.startswith("/cam/base (base_0_rgb): ")
    assert "'yuv422'" in skip.detail
    assert frames.skip_counts == {
        "no_instruction": 1,
        "missing_joint_state": 1,
        "stale_joint_state": 1,
        "bad_joint_state": 2,
        "missing_camera": 1,
        "stale_camera": 1,
        "unsynced_cameras": 1,
        "bad_image": 1,
    }
    assert tuple(frames.skip_counts) == SKIP_REASONS


def test_undecodable_compressed_image_is_a_bad_image():
    frames = fed()
    frames.on_image(1, CompressedImage(header=Header(stamp=seconds_to_stamp(10.0)), data=b"xx"))
    skip = frames.assemble(10.0)
    assert reason(skip) == "bad_image" and "/cam/left" in skip.detail


def test_blank_instruction_clears_the_instruction():
    frames = fed()
    frames.on_instruction("   ")
    assert reason(frames.assemble(10.0)) == "no_instruction"


def test_an_image_over_max_image_pixels_is_a_bad_image_and_the_next_frame_recovers():
    frames = FrameAssembler(**SETTINGS, max_image_pixels=32)  # the 4x8 test images fit exactly
    frames.on_instruction("go")
    frames.on_joint_state(joints(10.0))
    frames.on_image(0, image(10.0, 1))
    frames.on_image(1, image(10.0, 2, height=8, width=8))
    skip = frames.assemble(10.0)
    assert reason(skip) == "bad_image"
    assert skip.detail == (
        "/cam/left (left_wrist_0_rgb): Image is 8x8 = 64 pixels, over max_image_pixels=32"
    )
    frames.on_image(1, image(10.0, 2))
    assert isinstance(frames.assemble(10.0), Observation)
    assert frames.skip_counts["bad_image"] == 1


def test_an_over_long_instruction_is_refused_and_the_previous_one_kept():
    frames = FrameAssembler(**SETTINGS, max_instruction_chars=20)
    frames.on_joint_state(joints(10.0))
    frames.on_image(0, image(10.0, 1))
    frames.on_image(1, image(10.0, 2))
    assert frames.on_instruction("pick up the cup") is None
    huge = "x" * 10_000_000
    why = frames.on_instruction(huge)
    assert why == (
        "instruction of 10000000 chars is over max_instruction_chars=20: "
        f"'{'x' * 60}...' (10000000 chars)"
    )
    assert (frames.instruction_refusals, frames.instruction_refused) == (1, why)
    assert frames.assemble(10.0).prompt == "pick up the cup"
    assert frames.on_instruction("place it") is None
    assert (frames.instruction_refusals, frames.instruction_refused) == (1, "")
    assert frames.assemble(10.0).prompt == "place it"


def test_an_instruction_the_model_cannot_fit_is_refused_with_the_policy_reason():
    policy = load_policy(preset="tiny", robot="demo")
    frames = FrameAssembler(**SETTINGS, instruction_check=policy.instruction_problem)
    assert frames.on_instruction("pick up the cup") is None
    long = "pick up the red block and put it in the bowl " * 3
    why = frames.on_instruction(long)
    need = policy.tokenizer.prompt_len_bound(long, 7)
    assert why == (
        f"instruction needs up to {need} prompt tokens with the state, over the model's "
        f"max_token_len=48: {excerpt(long)}"
    )
    assert frames.instruction_refusals == 1
    assert frames.on_instruction("") is None  # blank still clears, unchecked
    assert reason(frames.assemble(10.0)) == "no_instruction"


@pytest.mark.parametrize(
    ("old", "expected"), [("camera", "stale_camera"), ("joint", "stale_joint_state")]
)
def test_an_input_exactly_stale_timeout_old_is_still_fresh(old, expected):
    frames = fed(stamp=10.5)
    if old == "camera":
        frames.on_image(0, image(10.0, 100))
        frames.on_image(1, image(10.0, 200))
    else:
        frames.on_joint_state(joints(10.0))
    assert isinstance(frames.assemble(10.5), Observation)  # age 0.5 = stale_timeout_s
    assert reason(frames.assemble(10.5 + 1e-6)) == expected


def test_stale_joint_state_is_checked_before_the_cameras():
    frames = fed()
    frames.on_joint_state(joints(9.0))
    assert reason(frames.assemble(10.0)) == "stale_joint_state"


def test_camera_spread_equal_to_the_slop_is_in_sync():
    frames = fed()
    frames.on_image(1, image(10.25, 200))
    assert isinstance(frames.assemble(10.25), Observation)
    frames.on_image(1, image(10.25 + 1e-6, 200))
    skip = frames.assemble(10.25)
    assert reason(skip) == "unsynced_cameras"
    assert "sync_slop_s=0.25" in skip.detail and "/cam/left (left_wrist_0_rgb) at 10.250" in (
        skip.detail
    )


@pytest.mark.parametrize(
    ("ahead", "expected"), [("camera", "stale_camera"), ("joint", "stale_joint_state")]
)
def test_stamps_from_the_future_are_fresh_within_the_timeout_and_stale_beyond(ahead, expected):
    frames = fed(stamp=10.5)
    assert isinstance(frames.assemble(10.0), Observation)  # 0.5 s ahead: a clock skew
    # A bag that looped: the clock went back 40 s; what was stored is from the future.
    if ahead == "camera":
        frames.on_joint_state(joints(0.0))
    else:
        frames.on_image(0, image(0.0, 100))
        frames.on_image(1, image(0.0, 200))
    skip = frames.assemble(0.05)
    assert reason(skip) == expected and "s in the future" in skip.detail


def test_blank_policy_leaves_a_missing_or_stale_camera_out():
    frames = assembler("blank", topics=[*TOPICS, "/cam/right"])
    frames.on_instruction("go")
    frames.on_joint_state(joints(10.0))
    frames.on_image(0, image(10.0, 100))
    frames.on_image(1, image(8.0, 200))  # stale: blanked, and not part of the sync check
    obs = frames.assemble(10.0)
    assert isinstance(obs, Observation)
    assert list(obs.images) == ["base_0_rgb"]
    assert frames.blank_counts == {"base_0_rgb": 0, "left_wrist_0_rgb": 1, "right_wrist_0_rgb": 1}
    assert frames.blanked == {
        "left_wrist_0_rgb": "/cam/left (left_wrist_0_rgb) image is 2.000 s old "
        "(stale_timeout_s=0.5)",
        "right_wrist_0_rgb": "no image received yet from /cam/right (right_wrist_0_rgb)",
    }
    assert sum(frames.skip_counts.values()) == 0


def test_blank_policy_still_needs_one_camera():
    frames = assembler("blank")
    frames.on_instruction("go")
    frames.on_joint_state(joints(10.0))
    assert reason(frames.assemble(10.0)) == "missing_camera"
    frames.on_image(1, image(1.0, 0))
    assert reason(frames.assemble(10.0)) == "missing_camera"  # the first problem found
    assert frames.blank_counts == {"base_0_rgb": 0, "left_wrist_0_rgb": 0}


def test_blank_policy_leaves_an_undecodable_camera_out_and_says_why():
    frames = fed("blank")
    frames.on_image(1, CompressedImage(header=Header(stamp=seconds_to_stamp(10.0)), data=b"xx"))
    obs = frames.assemble(10.0)
    assert isinstance(obs, Observation) and list(obs.images) == ["base_0_rgb"]
    assert frames.blank_counts == {"base_0_rgb": 0, "left_wrist_0_rgb": 1}
    assert list(frames.blanked) == ["left_wrist_0_rgb"]
    assert frames.blanked["left_wrist_0_rgb"].startswith("/cam/left (left_wrist_0_rgb): ")
    frames.on_image(0, CompressedImage(header=Header(stamp=seconds_to_stamp(10.0)), data=b"yy"))
    skip = frames.assemble(10.0)  # no camera left to see by
    assert reason(skip) == "bad_image" and "/cam/base" in skip.detail and "/cam/left" in skip.detail


def test_a_decoder_raising_its_own_exception_type_is_a_bad_image(monkeypatch):
    """Third-party decoders raise more than InputError (Pillow: SyntaxError for a broken
    PNG chunk); whatever they raise must skip the frame, not fail it."""

    calls = []

    def decoder_bug(msg, max_pixels):
        calls.append(msg)
        raise SyntaxError("broken PNG file")

    monkeypatch.setattr("oxygen_ros.inputs.image_to_rgb", decoder_bug)
    frames = fed()
    for now in (10.0, 10.1):  # the same corrupt message is not decoded again
        skip = frames.assemble(now)
        assert reason(skip) == "bad_image" and "SyntaxError: broken PNG file" in skip.detail
    assert len(calls) == 1


def test_blank_policy_still_checks_sync_between_present_cameras():
    frames = fed("blank")
    frames.on_image(1, image(9.5, 200))
    assert reason(frames.assemble(10.0)) == "unsynced_cameras"


def test_a_message_is_decoded_once_however_many_frames_use_it():
    frames = fed()
    first = frames.assemble(10.0)
    second = frames.assemble(10.1)
    assert first.images["base_0_rgb"] is second.images["base_0_rgb"]
    frames.on_image(0, image(10.1, 50))
    third = frames.assemble(10.1)
    assert third.images["base_0_rgb"] is not first.images["base_0_rgb"]
    assert np.all(third.images["base_0_rgb"][2:6] == 50)
    assert third.images["left_wrist_0_rgb"] is first.images["left_wrist_0_rgb"]


def test_freshness_reports_ages_by_slot():
    frames = assembler()
    assert frames.freshness(5.0) == {
        "base_0_rgb": float("inf"),
        "left_wrist_0_rgb": float("inf"),
        "joint_state": float("inf"),
    }
    frames.on_image(0, image(4.75, 0))
    frames.on_joint_state(joints(4.5))
    assert frames.freshness(5.0) == {
        "base_0_rgb": 0.25,
        "left_wrist_0_rgb": float("inf"),
        "joint_state": 0.5,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"camera_topics": []}, "0 topics; the model has 1 to 3 image slots"),
        ({"camera_topics": ["a", "b", "c", "d"]}, "4 topics"),
        ({"state_dim": 4}, "3 joint_names for state_dim 4"),
        ({"missing_camera": "zero"}, "'zero' is not one of \\['skip', 'blank'\\]"),
        ({"image_size": 0}, "image_size >= 1"),
        ({"stale_timeout_s": 0.0}, "stale_timeout_s > 0"),
        ({"sync_slop_s": -0.1}, "sync_slop_s >= 0"),
        ({"max_image_pixels": 0}, "max_image_pixels=0 is outside \\[1, 89478485\\]"),
        ({"max_image_pixels": 89478486}, "Pillow's own decompression-bomb check"),
        ({"max_instruction_chars": 0}, "max_instruction_chars must be >= 1, got 0"),
    ],
)
def test_misconfiguration_fails_at_construction(change, message):
    with pytest.raises(ValueError, match=message):
        FrameAssembler(**{**SETTINGS, **change})


def test_image_callback_rejects_a_slot_without_a_topic():
    with pytest.raises(IndexError, match="slot_index 2 outside \\[0, 2\\)"):
        assembler().on_image(2, image(0.0, 0))


def test_measured_positions_are_the_latest_state_stale_or_not():
    frames = assembler()
    assert frames.measured_positions(JOINTS) is None  # nothing received: nothing to hold at
    frames.on_joint_state(joints(1.0))
    np.testing.assert_array_equal(frames.measured_positions(["elbow", "hand"]), [-1.0, 7.0])
    assert frames.measured_positions(["knee"]) is None
    frames.on_joint_state(joints(2.0, positions=(np.nan, 0.0, 0.0)))
    assert frames.measured_positions(["shoulder"]) is None
    np.testing.assert_array_equal(frames.measured_positions(["elbow"]), [0.0])


def test_the_commanded_joints_come_from_the_frames_joint_state_with_its_velocities():
    """The gate and the trajectory's first segment read the frame's own JointState: a later
    message (the latest, where a hold stops) does not change what the frame measured."""
    frames = FrameAssembler(**SETTINGS, commanded_names=("hand", "wrist"))
    frames.on_instruction("pick")
    frames.on_image(0, image(10.0, 100))
    frames.on_image(1, image(10.0, 200))
    moving = joints(10.0)
    moving.velocity = [0.3, 0.1, 0.2, -0.4]  # wrist, shoulder, elbow, hand
    frames.on_joint_state(moving)
    assert isinstance(frames.assemble(10.0), Observation)
    assert frames.commanded.tolist() == [7.0, 2.0]
    assert frames.commanded_velocities.tolist() == [-0.4, 0.3]
    frames.on_joint_state(joints(10.1))  # no velocities
    assert frames.commanded_velocities.tolist() == [-0.4, 0.3]
    assert frames.measured_velocities(["hand"]) is None
    assert isinstance(frames.assemble(10.1), Observation)
    assert frames.commanded_velocities is None
