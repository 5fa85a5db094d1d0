"""From ROS messages to controller commands, against openpi's runtime arithmetic, per robot.

For each shipped robot preset a checkpoint is written exactly as openpi's training lays
it out (small random weights, quantile norm stats under a nested asset id), loaded
through the node's own configure path (its params YAML read by the node's parameter code,
`make_pipeline`), fed ROS messages in the robot driver's units (a JointState with extra
joints in another order, Image or CompressedImage, the instruction) through the node's
FrameAssembler, and acted on with a given start noise. The commands must equal (float
tolerance) what openpi's runtime would command for the same messages and noise, computed
here by an independent numpy restatement of openpi's client, policy transforms and
normalisation, written from openpi's source (the files are named at each step; the
robot's own driver conventions where openpi leaves them to the robot). The model itself
(prefill and denoise) is the one shared part: its equality with openpi's is
test_model's.

The last tests give each mistake of a real deployment its one-line error: a misnamed
asset_id, missing norm stats, a horizon mismatch, a gripper out of its range.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from builtin_interfaces.msg import Time
from PIL import Image as PILImage
from sensor_msgs.msg import CompressedImage, Image, JointState

from oxygen_core.config import IMAGE_SLOTS, model_preset
from oxygen_core.model import pi05
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import TRAIN_CONFIG, save_checkpoint
from oxygen_core.model.normalize import NormStats, Stats
from oxygen_ros.inputs import Skip
from oxygen_ros.pipeline import Pipeline, make_pipeline
from oxygen_ros.tools.configure import load_settings

pytestmark = pytest.mark.ros

NOW_S = 100.0
STEPS = 3  # denoise steps, the same on both sides
PROMPT = "put_the red cube\nin the bowl "  # openpi cleans "_" and "\n" out of it


# ---------------------------------------------------------------- openpi, restated in numpy


def quantile_normalize(x: np.ndarray, q01: np.ndarray, q99: np.ndarray) -> np.ndarray:
    """openpi shared/normalize.py, use_quantiles (pi0.5): [q01, q99] -> [-1, 1]."""
    n = x.shape[-1]
    return (x - q01[:n]) / (q99[:n] - q01[:n] + 1e-6) * 2.0 - 1.0


def quantile_unnormalize(x: np.ndarray, q01: np.ndarray, q99: np.ndarray) -> np.ndarray:
    n = q01.shape[-1]
    return (x[..., :n] + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01


def resize_with_pad(image: np.ndarray, size: int) -> np.ndarray:
    """openpi_client/image_tools.py resize_with_pad: PIL bilinear, zero padding."""
    height, width = image.shape[:2]
    if (height, width) == (size, size):
        return image
    ratio = max(width / size, height / size)
    new_h, new_w = int(height / ratio), int(width / ratio)
    resized = np.asarray(
        PILImage.fromarray(image).resize((new_w, new_h), resample=PILImage.BILINEAR)
    )
    out = np.zeros((size, size, 3), np.uint8)
    top, left = int((size - new_h) / 2), int((size - new_w) / 2)
    out[top : top + new_h, left : left + new_w] = resized
    return out


def prompt_ids(tokenizer, prompt: str, state: np.ndarray | None) -> list[int]:
    """openpi models/tokenizer.py PaligemmaTokenizer.tokenize (pi0.5)."""
    cleaned = prompt.strip().replace("_", " ").replace("\n", " ")
    if state is None:
        return tokenizer.encode(cleaned, bos=True) + tokenizer.encode("\n")
    bins = np.digitize(state, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
    full = f"Task: {cleaned}, State: {' '.join(map(str, bins))};\nAction: "
    return tokenizer.encode(full, bos=True)


def openpi_model_actions(
    pipeline: Pipeline, images: dict[str, np.ndarray], state: np.ndarray | None, noise
) -> np.ndarray:
    """openpi models/model.py preprocess (uint8 -> [-1, 1], absent slots zero and masked)
    and the prompt, then the shared model: the [H, 32] chunk before unnormalisation."""
    policy = pipeline.engine.policy
    config = policy.config
    size = config.vision.image_size
    pixels = np.zeros((len(IMAGE_SLOTS), size, size, 3), np.float32)
    mask = np.zeros(len(IMAGE_SLOTS), bool)
    for i, slot in enumerate(IMAGE_SLOTS):
        if slot in images:
            pixels[i] = resize_with_pad(images[slot], size) / 255.0 * 2.0 - 1.0
            mask[i] = True
    ids = prompt_ids(policy.tokenizer, PROMPT, state)
    tokens = np.zeros(config.max_token_len, np.int32)
    tokens[: len(ids)] = ids
    inputs = pi05.PrefixInputs(
        images=pixels[None],
        image_mask=mask[None],
        tokens=tokens[None],
        token_mask=(np.arange(config.max_token_len) < len(ids))[None],
    )
    cache = pi05.prefill(policy.params, config, inputs)
    return np.asarray(pi05.denoise(policy.params, config, cache, noise[None], STEPS))[0]


# ALOHA: examples/aloha_real/constants.py and policies/aloha_policy.py.
FINGER_OPEN, FINGER_CLOSE = 0.05800, 0.01844  # PUPPET_GRIPPER_POSITION_OPEN / _CLOSE (m)
JOINT_OPEN, JOINT_CLOSE = 1.4910, -0.6213  # PUPPET_GRIPPER_JOINT_OPEN / _CLOSE (rad)
FLIP = np.array([1, -1, -1, 1, 1, 1, 1, 1, -1, -1, 1, 1, 1, 1], np.float64)


def gripper_to_angular(value: np.ndarray) -> np.ndarray:
    """aloha_policy._gripper_to_angular."""
    position = value * (FINGER_OPEN - FINGER_CLOSE) + FINGER_CLOSE
    arm_length, horn_radius = 0.036, 0.022
    sine = (horn_radius**2 + position**2 - arm_length**2) / (2 * horn_radius * position)
    radians = np.arcsin(np.clip(sine, -1.0, 1.0))
    return (radians - 0.5476) / (1.6296 - 0.5476)


def gripper_from_angular(value: np.ndarray) -> np.ndarray:
    """aloha_policy._gripper_from_angular."""
    return (value + 0.5476 - JOINT_CLOSE) / (JOINT_OPEN - JOINT_CLOSE)


def aloha_reference(pipeline, images, positions, noise) -> np.ndarray:
    norm = pipeline.engine.policy.norm
    # real_env.get_qpos: the arm joints as read, the gripper as its finger position.
    state = positions["arm"].copy()
    state[[6, 13]] = (positions["finger"] - FINGER_CLOSE) / (FINGER_OPEN - FINGER_CLOSE)
    # AlohaInputs (adapt_to_pi): _decode_state.
    state = FLIP * state
    state[[6, 13]] = gripper_to_angular(state[[6, 13]])
    prompt_state = quantile_normalize(state, norm.state.q01, norm.state.q99)
    model = openpi_model_actions(pipeline, images, prompt_state, noise)
    actions = quantile_unnormalize(model, norm.actions.q01, norm.actions.q99)
    # AbsoluteActions(make_bool_mask(6, -1, 6, -1)).
    mask = np.array([True] * 6 + [False] + [True] * 6 + [False])
    actions = actions + np.where(mask, state, 0.0)
    # AlohaOutputs (adapt_to_pi): _encode_actions.
    actions = FLIP * actions[:, :14]
    actions[:, [6, 13]] = gripper_from_angular(actions[:, [6, 13]])
    # real_env.set_gripper_pose: PUPPET_GRIPPER_JOINT_UNNORMALIZE_FN.
    actions[:, [6, 13]] = actions[:, [6, 13]] * (JOINT_OPEN - JOINT_CLOSE) + JOINT_CLOSE
    return actions


# DROID on a Robotiq whose knuckle joint reads 0 rad open .. 0.8 rad closed (config/droid.yaml).
KNUCKLE_CLOSED = 0.8


def droid_reference(pipeline, images, positions, noise) -> np.ndarray:
    norm = pipeline.engine.policy.norm
    # DroidInputs: joint_position + gripper_position (0 open, 1 closed).
    state = np.concatenate([positions["arm"], positions["knuckle"] / KNUCKLE_CLOSED])
    prompt_state = quantile_normalize(state, norm.state.q01, norm.state.q99)
    model = openpi_model_actions(pipeline, images, prompt_state, noise)
    actions = quantile_unnormalize(model, norm.actions.q01, norm.actions.q99)[:, :8]
    # examples/droid/main.py: binarise the gripper at 0.5, then clip everything to [-1, 1].
    actions[:, -1] = (actions[:, -1] > 0.5).astype(float)
    actions = np.clip(actions, -1.0, 1.0)
    # droid robot_ik_solver: a velocity of 1 is 0.2 rad per step at 15 Hz; the gripper's
    # closure as the knuckle's position.
    actions[:, :7] *= 0.2 * 15
    actions[:, 7] *= KNUCKLE_CLOSED
    return actions


def libero_reference(pipeline, images, positions, noise) -> np.ndarray:
    norm = pipeline.engine.policy.norm
    # examples/libero/main.py: both images turned 180 degrees; no state in the prompt.
    turned = {slot: image[::-1, ::-1] for slot, image in images.items()}
    model = openpi_model_actions(pipeline, turned, None, noise)
    return quantile_unnormalize(model, norm.actions.q01, norm.actions.q99)[:, :7]


def humanoid_reference(pipeline, images, positions, noise) -> np.ndarray:
    norm = pipeline.engine.policy.norm
    state = positions["arm"]
    prompt_state = quantile_normalize(state, norm.state.q01, norm.state.q99)
    model = openpi_model_actions(pipeline, images, prompt_state, noise)
    return quantile_unnormalize(model, norm.actions.q01, norm.actions.q99)[:, :26]


# ---------------------------------------------------------------- the robots


@dataclasses.dataclass(frozen=True)
class Case:
    """One shipped robot: its params (as its config file writes them) and its driver."""

    config: str  # config/<config>.yaml, whose robot, joints and cameras are used
    asset_id: str
    state_stats: int  # sizes of the norm stats openpi computes for it
    action_stats: int
    reference: object
    compressed: bool = False  # CompressedImage (PNG) instead of Image


CASES = {
    "aloha": Case("aloha", "physical-intelligence/aloha_sim", 14, 14, aloha_reference),
    "droid": Case("droid", "droid", 8, 8, droid_reference, compressed=True),
    "libero": Case("libero", "physical-intelligence/libero", 8, 7, libero_reference),
    "humanoid": Case("humanoid_thor", "org/humanoid", 26, 26, humanoid_reference),
}
ROOT = Path(__file__).resolve().parents[1]


def stats(dims: int, seed: int) -> Stats:
    rng = np.random.default_rng(seed)
    q01 = rng.uniform(-2.0, 0.0, dims).astype(np.float32)
    q99 = (q01 + rng.uniform(0.5, 3.0, dims)).astype(np.float32)
    return Stats(q01=q01, q99=q99, mean=(q01 + q99) / 2, std=(q99 - q01) / 4)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """One openpi-layout checkpoint per robot (random tiny weights, nested asset id)."""
    tree = P.init_params(model_preset("tiny"), seed=11)
    out = {}
    for name, case in CASES.items():
        path = tmp_path_factory.mktemp(name) / "checkpoint"
        norm = NormStats(state=stats(case.state_stats, 1), actions=stats(case.action_stats, 2))
        save_checkpoint(path, tree, norm, asset_id=case.asset_id)
        out[name] = path
    return out


def params_file(folder: Path, case: Case, checkpoint: Path, **changes) -> Path:
    """config/<case>.yaml on the tiny model and this checkpoint, without the position gate
    (the commands compared are the engine's, before the frame's gate or velocity cap)."""
    raw = yaml.safe_load((ROOT / "config" / f"{case.config}.yaml").read_text())
    params = raw["/**"]["ros__parameters"]
    for key in ("robot_description_topic", "tokenizer_path"):
        params.pop(key, None)
    # The tiny model's 48-token prompt is too short for a 26-joint state: the same robot
    # with pi0.5's own budget.
    robot = params["robot"]
    declared = params.setdefault("robots", {}).get(robot, {"base": robot})
    params["robots"] = {f"{robot}_200": {**declared, "max_token_len": 200}}
    params.update(
        {
            "robot": f"{robot}_200",
            "preset": "tiny",
            "dtype": "float32",
            "checkpoint_dir": str(checkpoint),
            "asset_id": case.asset_id,
            "gate_policy": "off",
            "denoise_steps": STEPS,
            "instruction": PROMPT,
            "action_horizon": 0,
            "execute_horizon": 1,
            "rtc_delay_steps": 0,
            # The least language machinery: the tests are about actions.
            "steps_per_frame": 1,
            "max_active_requests": 1,
            "batch_buckets": [1],
            **changes,
        }
    )
    path = folder / f"{case.config}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def stamp() -> Time:
    return Time(sec=int(NOW_S), nanosec=0)


def image_msg(rgb: np.ndarray, compressed: bool, encoding: str) -> Image | CompressedImage:
    """The camera driver's message: bgr8 or rgb8 pixels, or a PNG."""
    if compressed:
        data = io.BytesIO()
        PILImage.fromarray(rgb).save(data, format="PNG")
        msg = CompressedImage(format="png", data=data.getvalue())
    else:
        pixels = rgb[..., ::-1] if encoding == "bgr8" else rgb
        height, width = rgb.shape[:2]
        msg = Image(height=height, width=width, encoding=encoding, step=width * 3)
        msg.data = np.ascontiguousarray(pixels).tobytes()
    msg.header.stamp = stamp()
    return msg


def driver_state(name: str, pipeline: Pipeline, rng) -> tuple[JointState, dict]:
    """A JointState as the robot's driver publishes it: every joint the node reads and
    commands, and more, in another order, in the driver's units."""
    cfg = pipeline.settings.node
    names = list(dict.fromkeys([*cfg.joint_names, *pipeline.layout.action_names]))
    values = dict(zip(names, rng.uniform(-1.0, 1.0, len(names)), strict=True))
    positions: dict[str, np.ndarray] = {}
    if name == "aloha":
        for arm in ("left", "right"):
            values[f"{arm}_left_finger"] = rng.uniform(0.02, 0.057)  # metres
            values[f"{arm}_gripper"] = rng.uniform(-0.6, 1.4)  # radians
        positions["finger"] = np.array([values["left_left_finger"], values["right_left_finger"]])
    if name == "droid":
        values[cfg.joint_names[-1]] = rng.uniform(0.0, KNUCKLE_CLOSED)
        positions["knuckle"] = np.array([values[cfg.joint_names[-1]]])
    state = np.array([values[j] for j in cfg.joint_names], np.float64)
    positions["arm"] = state if name != "droid" else state[:7]
    values["unused_joint"] = 3.0
    order = sorted(values)
    msg = JointState(name=order, position=[float(values[j]) for j in order])
    msg.header.stamp = stamp()
    return msg, positions


def feed(pipeline: Pipeline, case: Case, name: str, seed: int):
    """The messages of one frame into the node's assembler; the images by model slot."""
    rng = np.random.default_rng(seed)
    assembler = pipeline.assembler
    images = {}
    for i, slot in enumerate(assembler.slots):
        rgb = rng.integers(0, 256, (48, 80, 3), dtype=np.uint8)
        images[slot] = rgb
        encoding = "bgr8" if name == "aloha" else "rgb8"  # ALOHA's cameras: bgr8
        assembler.on_image(i, image_msg(rgb, case.compressed, encoding))
    msg, positions = driver_state(name, pipeline, rng)
    assembler.on_joint_state(msg)
    return images, positions


@pytest.mark.parametrize("name", sorted(CASES))
def test_commands_equal_openpis_runtime_for_the_same_messages_and_noise(
    name, checkpoints, tmp_path
):
    case = CASES[name]
    settings, _ = load_settings(params_file(tmp_path, case, checkpoints[name]))
    pipeline = make_pipeline(settings)
    policy = pipeline.engine.policy
    images, positions = feed(pipeline, case, name, seed=5)
    obs = pipeline.assembler.assemble(NOW_S)
    assert not isinstance(obs, Skip), obs
    noise = np.random.default_rng(9).standard_normal(
        (policy.config.action_horizon, policy.config.action_dim)
    )
    commands = pipeline.engine.act(obs, noise=noise).actions
    expected = case.reference(pipeline, images, positions, noise)
    assert commands.shape == expected.shape
    np.testing.assert_allclose(commands, expected, rtol=2e-4, atol=2e-4)
    if name == "droid":
        gripper = commands[:, 7]
        assert np.all(np.isclose(gripper, 0.0) | np.isclose(gripper, KNUCKLE_CLOSED))
        assert np.abs(commands[:, :7]).max() <= 3.0 + 1e-6


# ---------------------------------------------------------------- mistakes, one line each


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_a_misnamed_asset_id_fails_naming_the_ones_there(checkpoints, tmp_path):
    case = CASES["libero"]
    settings, _ = load_settings(
        params_file(tmp_path, case, checkpoints["libero"], asset_id="libero")
    )
    with pytest.raises(ValueError) as error:
        make_pipeline(settings)
    assert one_line(error.value).endswith("asset ids there: ['physical-intelligence/libero']")


def test_missing_norm_stats_fail_unless_identity_is_asked_for(checkpoints, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(checkpoints["humanoid"] / "params", bare / "params")
    case = CASES["humanoid"]
    settings, _ = load_settings(params_file(tmp_path, case, bare, asset_id=""))
    with pytest.raises(ValueError) as error:
        make_pipeline(settings)
    assert "has no assets/<asset_id>/norm_stats.json" in one_line(error.value)


def test_a_horizon_the_checkpoint_was_not_trained_with_fails(checkpoints, tmp_path):
    recorded = tmp_path / "recorded"
    shutil.copytree(checkpoints["libero"], recorded)
    (recorded / TRAIN_CONFIG).write_text(json.dumps({"action_horizon": 16}))
    settings, _ = load_settings(params_file(tmp_path, CASES["libero"], recorded))
    with pytest.raises(ValueError) as error:
        make_pipeline(settings)
    assert one_line(error.value).endswith(
        "was trained with action_horizon 16, but robot 'libero_200' runs the model at 10: set "
        "the robot's action_horizon to 16"
    )


def test_image_slots_the_checkpoint_was_not_trained_with_fail(checkpoints, tmp_path):
    recorded = tmp_path / "recorded"
    shutil.copytree(checkpoints["libero"], recorded)
    (recorded / TRAIN_CONFIG).write_text(json.dumps({"image_slots": 5}))
    settings, _ = load_settings(params_file(tmp_path, CASES["libero"], recorded))
    with pytest.raises(ValueError) as error:
        make_pipeline(settings)
    line = one_line(error.value)
    assert "was trained with 5 image slots, but robot 'libero_200' on preset" in line
    assert line.endswith("run it with the preset and cameras it was trained with")


def test_a_gripper_in_other_units_skips_the_frame_in_one_line(checkpoints, tmp_path):
    """ALOHA's finger position sent in radians (the gripper joint's) instead of metres."""
    case = CASES["aloha"]
    settings, _ = load_settings(params_file(tmp_path, case, checkpoints["aloha"]))
    pipeline = make_pipeline(settings)
    feed(pipeline, case, "aloha", seed=6)
    msg = pipeline.assembler._joint_state
    msg.position[msg.name.index("left_left_finger")] = 1.2
    skip = pipeline.assembler.assemble(NOW_S)
    assert isinstance(skip, Skip) and skip.reason == "bad_joint_state"
    assert skip.detail.startswith(
        "gripper left_left_finger reads 1.2, far outside the range [0.01844, 0.058] robot "
        "'aloha_200' expects"
    )
