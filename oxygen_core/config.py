"""Model, robot and engine configuration as frozen dataclasses with named presets.

A preset is data: `MODEL_PRESETS[name]` gives the shapes of every part of pi0.5, and
`ROBOT_PRESETS[name]` says which cameras a robot has and how many action dimensions it
uses. Nothing here allocates arrays, so `oxygen-info` can describe the full-size model on
a laptop.
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
    # policy use the base camera and the target's name (README "Training a policy").
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
class RobotConfig:
    """What a robot feeds the model and takes from it.

    `cameras` are the image slots the robot fills, in slot order; the remaining slots
    are zero images with mask False, as openpi does for a missing camera. The last three
    fields repeat what the robot's openpi checkpoint was trained with (`robot_io`).
    """

    name: str
    cameras: tuple[str, ...]
    action_dim: int
    state_dim: int
    action_horizon: int | None = None  # None keeps the model preset's H
    max_token_len: int | None = None  # None keeps the model preset's prompt budget
    discrete_state: bool = True  # the state goes into the prompt as 256-bin tokens
    delta_actions: tuple[int, ...] = ()  # action dims predicted relative to the state
    # "robot": trained in robot units; "aloha": openpi's ALOHA space; "grip": the sim arm's
    # grip point, tool roll and opening (5 dims), joints by its top-down inverse kinematics
    space: str = "robot"
    # Two-stage inference (`model/plan.py`): the VLM answers this prompt in up to
    # plan_tokens tokens after the prefill, and the action expert reads prefix + answer.
    plan_prompt: str | None = None
    plan_tokens: int = 12

    def __post_init__(self) -> None:
        if self.plan_prompt is not None and (not self.plan_prompt or self.plan_tokens < 1):
            raise ValueError("a plan needs a non-empty plan_prompt and plan_tokens >= 1")
        if self.space not in SPACE_DIMS:
            raise ValueError(f"space {self.space!r} is not one of {tuple(SPACE_DIMS)}")
        if self.space == "grip" and (self.action_dim, self.state_dim) != (7, 7):
            raise ValueError("space 'grip' is the sim arm's: 7 joint actions and states")
        dims = min(self.model_dims, self.action_dim, self.state_dim)
        if any(not 0 <= i < dims for i in self.delta_actions):
            raise ValueError(f"delta_actions {self.delta_actions} outside [0, {dims})")

    @property
    def model_dims(self) -> int:
        """Action (and state) dimensions in the checkpoint's space."""
        return SPACE_DIMS[self.space] or self.action_dim

    def apply(self, model: ModelConfig) -> ModelConfig:
        """The model preset with this robot's horizon and prompt budget."""
        changes = {"action_horizon": self.action_horizon, "max_token_len": self.max_token_len}
        return dataclasses.replace(model, **{k: v for k, v in changes.items() if v is not None})


SPACE_DIMS = {"robot": None, "aloha": None, "grip": 5}  # None: the robot's own dims


# The openpi checkpoints' training settings (openpi training/config.py): pi05_libero
# (H=10, no state in the prompt), pi05_droid (H=15), pi05_aloha (H=50, the six joints of
# each arm as deltas, trained in openpi's ALOHA space).
ROBOT_PRESETS: dict[str, RobotConfig] = {
    "libero": RobotConfig(
        "libero",
        cameras=IMAGE_SLOTS[:2],
        action_dim=7,
        state_dim=8,
        action_horizon=10,
        discrete_state=False,
    ),
    "droid": RobotConfig(
        "droid", cameras=IMAGE_SLOTS[:2], action_dim=8, state_dim=8, action_horizon=15
    ),
    "aloha": RobotConfig(
        "aloha",
        cameras=IMAGE_SLOTS,
        action_dim=14,
        state_dim=14,
        action_horizon=50,
        delta_actions=(0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12),
        space="aloha",
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
