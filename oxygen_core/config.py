"""Model, robot and engine configuration as frozen dataclasses with named presets.

A preset is data: `MODEL_PRESETS[name]` gives the shapes of every part of pi0.5, and
`ROBOT_PRESETS[name]` says which cameras a robot has and how many action dimensions it
uses; a params YAML may declare other robots (`oxygen_core.robot_spec`). Nothing here
allocates arrays, so `oxygen-info` can describe the full-size model on a laptop.
"""

from __future__ import annotations

import dataclasses

# Fixed by pi0.5 / PaliGemma; kept here for checkpoint compatibility.
IMAGE_SLOTS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class SiglipConfig:
    """SigLIP ViT image encoder (pre-LN, learned position embedding, no pooling)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    patch_size: int = 14
    image_size: int = 224

    @property
    def num_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclasses.dataclass(frozen=True)
class GemmaConfig:
    """One Gemma expert of the Mixture-of-Transformers (all experts share depth/heads)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The whole pi0.5 model: vision encoder, VLM stream, action expert, geometry."""

    name: str
    vision: SiglipConfig
    vlm: GemmaConfig
    expert: GemmaConfig
    vocab_size: int
    action_dim: int = 32
    action_horizon: int = 10
    max_token_len: int = 200
    num_images: int = len(IMAGE_SLOTS)
    rope_max_wavelength: float = 10_000.0

    def __post_init__(self) -> None:
        v, e = self.vlm, self.expert
        shared = ("depth", "num_heads", "num_kv_heads", "head_dim")
        for field in shared:
            if getattr(v, field) != getattr(e, field):
                raise ValueError(
                    f"VLM and action expert must share {field}: "
                    f"{getattr(v, field)} != {getattr(e, field)}"
                )

    @property
    def image_tokens(self) -> int:
        return self.num_images * self.vision.num_tokens

    @property
    def prefix_len(self) -> int:
        """Tokens in the shared prefix: all image slots plus the padded prompt."""
        return self.image_tokens + self.max_token_len

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """K and V of every layer for one token (bf16 by default, as on the robot)."""
        v = self.vlm
        return v.depth * 2 * v.num_kv_heads * v.head_dim * bytes_per_value


MODEL_PRESETS: dict[str, ModelConfig] = {
    # Fast tests: a forward pass in milliseconds. Geometry shrunk everywhere.
    "tiny": ModelConfig(
        name="tiny",
        vision=SiglipConfig(
            width=32, depth=2, mlp_dim=64, num_heads=2, patch_size=14, image_size=56
        ),
        vlm=GemmaConfig(width=64, depth=2, mlp_dim=128, num_heads=4, num_kv_heads=1, head_dim=16),
        expert=GemmaConfig(width=32, depth=2, mlp_dim=64, num_heads=4, num_kv_heads=1, head_dim=16),
        vocab_size=512,
        action_dim=32,
        action_horizon=4,
        max_token_len=48,
    ),
    # The CPU benchmark model: pi0.5's token geometry (3 x 256 image tokens, H=10, 32
    # action dims) with reduced width and depth.
    "small": ModelConfig(
        name="small",
        vision=SiglipConfig(width=256, depth=4, mlp_dim=1024, num_heads=4),
        vlm=GemmaConfig(width=512, depth=4, mlp_dim=2048, num_heads=8, num_kv_heads=1, head_dim=64),
        expert=GemmaConfig(
            width=256, depth=4, mlp_dim=1024, num_heads=8, num_kv_heads=1, head_dim=64
        ),
        vocab_size=512,
        action_dim=32,
        action_horizon=10,
        max_token_len=100,
    ),
    # The trained sim policy (data/policy): two 64 px cameras (base, wrist) in 8 px patches,
    # 128 image tokens; sized so that training it fits a 2-core CPU in minutes and one
    # frame (prefill + 10 denoise steps) takes milliseconds there. Four layers, not three:
    # finding the instructed object takes the action tokens a chain of attention steps
    # (read the name, find its patch, act on where it is), and the fourth layer made the
    # policy use the base camera and the target's name (docs/experiments/training.md).
    "demo": ModelConfig(
        name="demo",
        vision=SiglipConfig(
            width=48, depth=2, mlp_dim=96, num_heads=2, patch_size=8, image_size=64
        ),
        vlm=GemmaConfig(width=64, depth=4, mlp_dim=128, num_heads=2, num_kv_heads=1, head_dim=32),
        expert=GemmaConfig(
            width=64, depth=4, mlp_dim=128, num_heads=2, num_kv_heads=1, head_dim=32
        ),
        vocab_size=512,
        action_dim=32,
        action_horizon=10,
        max_token_len=36,
        num_images=2,
    ),
    # The real pi0.5 (openpi `pi05` with Gemma 2B + Gemma 300M, SigLIP So400m/14).
    "pi05": ModelConfig(
        name="pi05",
        vision=SiglipConfig(width=1152, depth=27, mlp_dim=4304, num_heads=16),
        vlm=GemmaConfig(
            width=2048, depth=18, mlp_dim=16_384, num_heads=8, num_kv_heads=1, head_dim=256
        ),
        expert=GemmaConfig(
            width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256
        ),
        vocab_size=257_152,
        action_dim=32,
        action_horizon=10,
        max_token_len=200,
    ),
}


def _lookup(table: dict, kind: str, name: str):
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r}; choose one of {sorted(table)}") from None


def model_preset(name: str) -> ModelConfig:
    """Look up a model preset by name, naming the choices when it is unknown."""
    return _lookup(MODEL_PRESETS, "model preset", name)


@dataclasses.dataclass(frozen=True)
class Space:
    """The dimensions of a space a checkpoint was trained in (`RobotConfig.space`, whose
    docstring says what each space is); `robot_io` converts to and from the robot's units."""

    robot_dims: int | None  # the action_dim and state_dim it needs; None: any
    model_dims: int | None  # dimensions in the checkpoint's space; None: the robot's own


SPACES: dict[str, Space] = {
    "robot": Space(robot_dims=None, model_dims=None),
    "aloha": Space(robot_dims=14, model_dims=None),
    "grip": Space(robot_dims=7, model_dims=5),
}


# What the robot's commands are, and so where they may go (oxygen_ros.params checks it):
# only absolute joint positions go on ~/joint_trajectory and through the chunk gate.
ACTION_SPACES: dict[str, str] = {
    "position": "absolute joint positions",
    "velocity": "joint velocities (rad/s after velocity_scale)",
    "end_effector": "end-effector commands for the robot's own controller",
}
CAMERA_ROTATIONS = (0, 180)  # degrees, applied to a camera's image before resizing


@dataclasses.dataclass(frozen=True)
class RobotConfig:
    """What a robot feeds the model and takes from it.

    `cameras` are the image slots the robot fills, in slot order; the remaining slots
    are zero images with mask False, as openpi does for a missing camera. The fields from
    action_horizon on repeat what the robot's openpi checkpoint was trained with
    (`robot_io`). `space` names one of `SPACES`:

    - "robot": the checkpoint was trained in the robot's units (any dimensions);
    - "aloha": openpi's ALOHA joint space (14 dims): joints mirrored where pi05_aloha's
      data has them mirrored, the grippers in angular units where the runtime reports and
      takes linear positions;
    - "grip": the tabletop arm (7 joints, `oxygen_core.kinematics`) driven at its grip
      point: the model's 5 dims are the point's x, y, z, the tool roll (joint_6) and the
      opening, and the joints come from the arm's top-down inverse kinematics.

    The fields from action_space on are what the robot's runtime does around the model
    (openpi's clients: `aloha_real/real_env.py`, `droid/main.py`, `libero/main.py`), which
    the node replaces: the grippers' measured joint and command mapped to and from the
    runtime's normalised value, the DROID client's binarised gripper and clip, velocities
    scaled to rad/s, cameras rotated before resizing (`robot_io`, `oxygen_ros.inputs`).

    A robot is also data in a params YAML (`oxygen_core.robot_spec`, which holds the
    meaning and range of every field); the presets below are named robots of that schema.
    """

    name: str
    cameras: tuple[str, ...]
    action_dim: int
    state_dim: int
    action_horizon: int | None = None  # None keeps the model preset's H
    max_token_len: int | None = None  # None keeps the model preset's prompt budget
    discrete_state: bool = True  # the state goes into the prompt as 256-bin tokens
    delta_actions: tuple[int, ...] = ()  # action dims predicted relative to the state
    space: str = "robot"
    # Two-stage inference (`model/plan.py`): the VLM answers this prompt in up to
    # plan_tokens tokens after the prefill, and the action expert reads prefix + answer.
    plan_prompt: str | None = None
    plan_tokens: int = 12
    action_space: str = "position"  # one of ACTION_SPACES
    gripper_dims: tuple[int, ...] = ()  # state and action dims that are grippers
    # The measured gripper joint at the runtime's gripper value 0 and 1; () = as measured.
    gripper_state_range: tuple[float, ...] = ()
    # The gripper command at the runtime's value 0 and 1; () = the runtime's value.
    gripper_command_range: tuple[float, ...] = ()
    gripper_threshold: float = 0.0  # > 0: gripper actions become 1 above it, else 0
    action_clip: float = 0.0  # > 0: actions clipped to [-clip, clip] (after the threshold)
    velocity_scale: float = 0.0  # action_space velocity: rad/s per unit of the other dims
    camera_rotations: tuple[int, ...] = ()  # per camera, degrees; () = none

    def __post_init__(self) -> None:
        self._check_cameras()
        self._check_conventions()
        if self.plan_prompt is not None and (not self.plan_prompt or self.plan_tokens < 1):
            raise ValueError("a plan needs a non-empty plan_prompt and plan_tokens >= 1")
        if self.space not in SPACES:
            raise ValueError(f"space {self.space!r} is not one of {tuple(SPACES)}")
        dims = SPACES[self.space].robot_dims
        if dims is not None and (self.action_dim, self.state_dim) != (dims, dims):
            raise ValueError(
                f"space {self.space!r} needs action_dim and state_dim {dims}, got "
                f"{self.action_dim} and {self.state_dim}"
            )
        dims = min(self.model_dims, self.action_dim, self.state_dim)
        if any(not 0 <= i < dims for i in self.delta_actions):
            raise ValueError(f"delta_actions {self.delta_actions} outside [0, {dims})")
        if len(set(self.delta_actions)) != len(self.delta_actions):
            raise ValueError(f"delta_actions {self.delta_actions} repeats a dimension")

    def _check_cameras(self) -> None:
        """Known image slots, each once, in slot order (the order the model reads them)."""
        unknown = [c for c in self.cameras if c not in IMAGE_SLOTS]
        if unknown or not self.cameras:
            raise ValueError(f"cameras {list(self.cameras)} must be some of {list(IMAGE_SLOTS)}")
        if list(self.cameras) != sorted(set(self.cameras), key=IMAGE_SLOTS.index):
            raise ValueError(f"cameras {list(self.cameras)} must be in slot order, each once")

    def _check_conventions(self) -> None:
        """The runtime conventions are consistent with the robot's dims and action space."""
        if self.action_space not in ACTION_SPACES:
            raise ValueError(
                f"action_space {self.action_space!r} is not one of {tuple(ACTION_SPACES)}"
            )
        dims = min(self.action_dim, self.state_dim)
        if any(not 0 <= i < dims for i in self.gripper_dims):
            raise ValueError(f"gripper_dims {self.gripper_dims} outside [0, {dims})")
        for name in ("gripper_state_range", "gripper_command_range"):
            span = getattr(self, name)
            if span and (len(span) != 2 or span[0] == span[1]):
                raise ValueError(f"{name} {span} must be two different values (at 0 and 1)")
            if span and not self.gripper_dims:
                raise ValueError(f"{name} needs gripper_dims")
        if (self.action_space == "velocity") != (self.velocity_scale > 0):
            raise ValueError("velocity_scale > 0 goes with action_space velocity, and only it")
        if self.gripper_threshold < 0 or self.action_clip < 0:
            raise ValueError("gripper_threshold and action_clip are >= 0 (0: off)")
        if self.camera_rotations and len(self.camera_rotations) != len(self.cameras):
            raise ValueError(
                f"camera_rotations {list(self.camera_rotations)} needs one per camera "
                f"({len(self.cameras)})"
            )
        if any(r not in CAMERA_ROTATIONS for r in self.camera_rotations):
            raise ValueError(f"camera_rotations must be some of {CAMERA_ROTATIONS}")

    def slot_rotations(self, count: int) -> tuple[int, ...]:
        """camera_rotations of the first `count` image slots, in slot order (0 for a slot
        the robot has no camera in)."""
        turns = dict(zip(self.cameras, self.camera_rotations, strict=False))
        return tuple(turns.get(slot, 0) for slot in IMAGE_SLOTS[:count])

    @property
    def model_dims(self) -> int:
        """Action (and state) dimensions in the checkpoint's space."""
        return SPACES[self.space].model_dims or self.action_dim

    def apply(self, model: ModelConfig) -> ModelConfig:
        """The model preset with this robot's horizon and prompt budget, and an image slot
        for each of its cameras: a preset sized for fewer cameras (demo's two) would drop
        the last ones without a word; the slots past a robot's cameras stay masked, as
        openpi runs pi05 for a robot with two."""
        if self.model_dims > model.action_dim:
            raise ValueError(
                f"robot {self.name!r} has {self.model_dims} action dimensions in the model's "
                f"space, more than model preset {model.name!r}'s {model.action_dim}"
            )
        changes = {"action_horizon": self.action_horizon, "max_token_len": self.max_token_len}
        changes = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(
            model, num_images=max(model.num_images, len(self.cameras)), **changes
        )


# The openpi checkpoints' training settings (openpi training/config.py): pi05_libero
# (H=10, no state in the prompt), pi05_droid (H=15), pi05_aloha (H=50, the six joints of
# each arm as deltas, trained in openpi's ALOHA space); and what each runtime does around
# the model (docs/DESIGN.md section 17 cites the files):
# - LIBERO (examples/libero/main.py): both images rotated 180 degrees; 7 end-effector
#   actions for LIBERO's own controller.
# - DROID (examples/droid/main.py; the droid repository's robot_ik_solver.py): the gripper
#   reads 0 open .. 1 closed and its action is binarised at 0.5, then every action is
#   clipped to [-1, 1]; the 7 arm actions are joint velocities, 1.0 = 0.2 rad per 15 Hz
#   step (3 rad/s). The gripper's driver units are the robot's: a params file declares
#   them (config/droid.yaml).
# - ALOHA (examples/aloha_real/constants.py, real_env.py): the state's gripper is the
#   finger position (m) normalised over [0.01844, 0.05800] (0 closed, 1 open); the command
#   is the gripper joint's angle (rad), the runtime's 0..1 spread over [-0.6213, 1.4910].
ROBOT_PRESETS: dict[str, RobotConfig] = {
    "libero": RobotConfig(
        "libero",
        cameras=IMAGE_SLOTS[:2],
        action_dim=7,
        state_dim=8,
        action_horizon=10,
        discrete_state=False,
        action_space="end_effector",
        camera_rotations=(180, 180),
    ),
    "droid": RobotConfig(
        "droid",
        cameras=IMAGE_SLOTS[:2],
        action_dim=8,
        state_dim=8,
        action_horizon=15,
        action_space="velocity",
        velocity_scale=0.2 * 15,
        gripper_dims=(7,),
        gripper_threshold=0.5,
        action_clip=1.0,
    ),
    "aloha": RobotConfig(
        "aloha",
        cameras=IMAGE_SLOTS,
        action_dim=14,
        state_dim=14,
        action_horizon=50,
        delta_actions=(0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12),
        space="aloha",
        gripper_dims=(6, 13),
        gripper_state_range=(0.01844, 0.05800),
        gripper_command_range=(-0.6213, 1.4910),
    ),
    "humanoid": RobotConfig("humanoid", cameras=IMAGE_SLOTS, action_dim=26, state_dim=26),
    "demo": RobotConfig("demo", cameras=IMAGE_SLOTS, action_dim=7, state_dim=7),
    # The simulated tabletop arm (oxygen_core.sim): base and wrist cameras, six joints and
    # the gripper. The joints are predicted as offsets from the frame's state (a chunk that
    # holds still is the zero prediction), the gripper as an absolute opening. No state in
    # the prompt, as pi05_libero: along an expert's straight reach the joint state alone
    # tells where the arm is heading, so a small policy that reads it learns to continue
    # whatever motion it has begun instead of looking for the target (DESIGN section 11).
    "sim": RobotConfig(
        "sim",
        cameras=IMAGE_SLOTS[:2],
        action_dim=7,
        state_dim=7,
        delta_actions=(0, 1, 2, 3, 4, 5),
        discrete_state=False,
    ),
    # The same arm with actions in Cartesian space, as pi05_libero's end-effector actions:
    # the grip point (x, y, z, m) and the tool roll as offsets from the frame's, the opening
    # absolute; the joints come from the arm's top-down inverse kinematics (`robot_io`).
    "sim_grip": RobotConfig(
        "sim_grip",
        cameras=IMAGE_SLOTS[:2],
        action_dim=7,
        state_dim=7,
        delta_actions=(0, 1, 2, 3),
        discrete_state=False,
        space="grip",
    ),
}
# sim_grip in two stages: the VLM first names the instructed object's table cell (and its
# bowl's), the "Target:" row it is co-trained on (`train/locate.py`), and the action expert
# reads that answer as pi0.5's reads its predicted subtask.
ROBOT_PRESETS["sim_plan"] = dataclasses.replace(
    ROBOT_PRESETS["sim_grip"], name="sim_plan", plan_prompt="Target:"
)


def robot_preset(name: str) -> RobotConfig:
    """Look up a robot preset by name, naming the choices when it is unknown."""
    return _lookup(ROBOT_PRESETS, "robot", name)
