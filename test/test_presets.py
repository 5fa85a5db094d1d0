"""Presets are data, and `oxygen-info` describes them from shapes alone.

The pi05 figures are checked against numbers derived independently of `param_shapes`:
Gemma 2B is published at 2,506,172,416 parameters with its 256,000-token vocabulary
(PaliGemma's is 257,152), and docs/DESIGN.md section 3 gives the KV bytes per token.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from oxygen_core import robot_spec
from oxygen_core.config import (
    IMAGE_SLOTS,
    MODEL_PRESETS,
    ROBOT_PRESETS,
    GemmaConfig,
    ModelConfig,
    RobotConfig,
    model_preset,
    robot_preset,
)
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import EMBEDDING, save_checkpoint
from oxygen_core.model.info import main
from oxygen_core.model.normalize import NormStats, identity_stats, write_norm_stats
from oxygen_core.policy import model_images

GEMMA_2B_PUBLISHED = 2_506_172_416  # 256k vocab; PaliGemma adds 1,152 tokens x 2048
PI05_VLM = GEMMA_2B_PUBLISHED + (257_152 - 256_000) * 2048
# Gemma 300M (18 layers, width 1024, mlp 4096, 8 x 256 query heads, one KV head) ...
PI05_EXPERT_LAYERS = 18 * (1024 * 256 * (8 + 2 + 8) + 3 * 1024 * 4096)
# ... with adaRMS: a Dense cond(1024) -> scale, shift, gate for 2 norms per layer + final.
PI05_ADARMS = (2 * 18 + 1) * (1024 * 3 * 1024 + 3 * 1024)
# action in/out projections and the two time-MLP layers.
PI05_PROJECTIONS = (32 * 1024 + 1024) + (1024 * 32 + 32) + 2 * (1024 * 1024 + 1024)


def info_json(preset: str, capsys: pytest.CaptureFixture) -> dict:
    assert main(["--preset", preset, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------ presets


def test_pi05_preset_has_pi05_geometry():
    cfg = model_preset("pi05")
    assert cfg.vision.num_tokens == 256  # 224 / 14 = 16 patches a side
    assert cfg.prefix_len == 3 * 256 + 200 == 968
    assert (cfg.action_horizon, cfg.action_dim) == (10, 32)
    assert cfg.kv_bytes_per_token() == 18 * 2 * 1 * 256 * 2 == 18_432
    assert cfg.kv_bytes_per_token(4) == 36_864  # float32 caches on CPU
    assert (cfg.vlm.width, cfg.expert.width, cfg.vlm.depth) == (2048, 1024, 18)


def test_small_keeps_pi05_token_geometry_and_tiny_is_tiny():
    small, tiny = model_preset("small"), model_preset("tiny")
    assert small.prefix_len == 3 * 256 + 100 == 868
    assert (small.action_horizon, small.action_dim, small.num_images) == (10, 32, 3)
    assert tiny.prefix_len == 3 * 16 + 48 == 96
    assert tiny.kv_bytes_per_token() == 2 * 2 * 1 * 16 * 2


def test_robot_overrides_horizon_and_prompt_budget():
    pi05 = model_preset("pi05")
    robot = RobotConfig("arm", IMAGE_SLOTS[:1], 6, 6, action_horizon=50, max_token_len=64)
    cfg = robot.apply(pi05)
    assert (cfg.action_horizon, cfg.max_token_len, cfg.prefix_len) == (50, 64, 768 + 64)
    assert pi05.action_horizon == 10 and pi05.prefix_len == 968  # the preset is unchanged
    partial = dataclasses.replace(robot, max_token_len=None).apply(pi05)
    assert (partial.action_horizon, partial.max_token_len) == (50, 200)
    # The named robots keep the preset's geometry and choose cameras and action dims.
    assert robot_preset("libero").apply(pi05) == pi05
    assert robot_preset("libero").cameras == IMAGE_SLOTS[:2]
    dims = {name: robot_preset(name).action_dim for name in ("libero", "droid", "aloha")}
    assert dims == {"libero": 7, "droid": 8, "aloha": 14}


def test_every_camera_of_the_robot_gets_an_image_slot():
    demo = model_preset("demo")  # two slots: the tabletop's base and wrist cameras
    aloha = robot_preset("aloha").apply(demo)
    assert (demo.num_images, aloha.num_images) == (2, 3)
    images = {slot: np.full((48, 64, 3), i + 1, np.uint8) for i, slot in enumerate(IMAGE_SLOTS)}
    out, mask = model_images(aloha, images)
    assert mask.all() and [int(im.max()) for im in out] == [1, 2, 3]  # the right wrist kept
    assert robot_preset("sim").apply(demo).num_images == 2
    assert robot_preset("libero").apply(model_preset("pi05")).num_images == 3  # one masked


def test_unknown_names_list_the_choices():
    with pytest.raises(
        ValueError, match=r"unknown model preset 'pi0'.*\['demo', 'pi05', 'small', 'tiny'\]"
    ):
        model_preset("pi0")
    with pytest.raises(ValueError, match=r"unknown robot 'franka'; choose one of \['aloha'"):
        robot_preset("franka")


def test_a_robot_with_more_action_dims_than_the_model_is_refused():
    with pytest.raises(ValueError, match="33 action dimensions .* model preset 'tiny''s 32"):
        RobotConfig("wide", IMAGE_SLOTS[:1], 33, 33).apply(model_preset("tiny"))


# ------------------------------------------------------------------------ robot schema


def test_the_schema_describes_every_robot_field():
    """A RobotConfig field without its FIELDS entry could not be declared in a YAML."""
    fields = {f.name for f in dataclasses.fields(RobotConfig)} - {"name"}
    assert robot_spec.FIELDS.keys() == fields | {robot_spec.BASE}
    assert all(field.doc for field in robot_spec.FIELDS.values())


@pytest.mark.parametrize("name", sorted(ROBOT_PRESETS))
def test_each_preset_is_a_declaration_of_the_schema(name):
    preset = ROBOT_PRESETS[name]
    full = {k: v for k, v in dataclasses.asdict(preset).items() if k != "name" and v is not None}
    expected = dataclasses.replace(preset, name="copy")
    assert robot_spec.declared_robot("copy", full, "robots.copy") == expected
    assert robot_spec.declared_robot("copy", {"base": name}, "robots.copy") == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"base": "demo", "camera": ["base_0_rgb"]}, r"robots\.x\.camera is not a robot field"),
        ({"base": "demo", "action_dim": True}, r"robots\.x\.action_dim=True is not int"),
        ({"base": "demo", "cameras": "base_0_rgb"}, r"robots\.x\.cameras='base_0_rgb' is not a"),
        ({"base": "demo", "delta_actions": [0, "1"]}, r"robots\.x\.delta_actions=\(0, '1'\)"),
        ({"base": "demo", "action_horizon": 0}, r"robots\.x\.action_horizon=0 is outside \[1, "),
        ({"base": "demo", "cameras": list(IMAGE_SLOTS[::-1])}, r"robots\.x: cameras .* slot order"),
    ],
)
def test_a_bad_declaration_is_one_line_naming_the_field(values, message):
    with pytest.raises(ValueError, match=message):
        robot_spec.declared_robot("x", values, "robots.x")


def test_experts_must_share_attention_geometry():
    tiny = model_preset("tiny")
    deeper = GemmaConfig(**{**dataclasses.asdict(tiny.expert), "depth": 3})
    with pytest.raises(ValueError, match="must share depth: 2 != 3"):
        ModelConfig(**{**vars(tiny), "expert": deeper})


# ------------------------------------------------------------------------ oxygen-info


def test_info_pi05_json_agrees_with_pi05(capsys):
    info = info_json("pi05", capsys)
    components = info["components"]
    assert components["vlm"] == PI05_VLM == 2_508_531_712
    assert components["action_expert"] == PI05_EXPERT_LAYERS + PI05_ADARMS
    assert components["projections"] == PI05_PROJECTIONS
    # SigLIP So400m/14 at 224 px (~412 M) plus PaliGemma's 1152 -> 2048 projection head.
    assert 410e6 < components["vision"] < 420e6
    assert info["total_params"] == sum(components.values())
    assert 3.2e9 < info["total_params"] < 3.4e9
    assert info["prefix_len"] == 968
    assert info["kv_bytes_per_token"] == 18_432
    assert info["kv_bytes_per_prefix"] == 18_432 * 968  # ~17 MiB per request
    assert info["weight_bytes_bf16"] == 2 * info["total_params"]


@pytest.mark.parametrize("preset", sorted(MODEL_PRESETS))
def test_info_table_shows_the_json_figures(preset, capsys):
    info = info_json(preset, capsys)
    assert main(["--preset", preset]) == 0
    table = capsys.readouterr().out
    for name, count in info["components"].items():
        assert f"{name} " in table and f"{count:,}" in table
    assert f"{info['total_params']:,}" in table
    assert f"{info['kv_bytes_per_token']:,}" in table
    assert f"{info['prefix_len']:,}" in table


def test_info_rejects_an_unknown_preset(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--preset", "pi0"])
    assert exit_.value.code == 2
    assert "invalid choice: 'pi0'" in capsys.readouterr().err


def test_info_describes_an_openpi_layout_checkpoint_without_loading_it(tmp_path, capsys):
    """pi05_base's layout at tiny size: two asset ids, one of them nested, each with the
    sizes of its stats; the tokenizer its embedding needs; the presets those sizes fit."""
    tree = P.init_params(model_preset("tiny"), seed=0)
    tree_flat = P.flatten(tree)
    vocab = tree_flat[EMBEDDING].shape[0]
    ckpt = tmp_path / "pi05_base"
    save_checkpoint(ckpt, tree, norm(14, 14), asset_id="trossen")
    write_norm_stats(ckpt / "assets" / "org" / "my_droid" / "norm_stats.json", norm(8, 32))
    assert main(["--checkpoint", str(ckpt), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["total_params"] == sum(np.size(v) for v in tree_flat.values())
    assert (info["model_presets"], info["action_dim"], info["vocab_size"]) == (["tiny"], 32, vocab)
    assert info["asset_ids"] == {
        "org/my_droid": {"state": 8, "actions": 32},
        "trossen": {"state": 14, "actions": 14},
    }
    assert info["action_horizon"] is None  # openpi records none
    assert info["robot_presets"]["aloha"] == ["trossen"]
    assert info["robot_presets"]["droid"] == ["org/my_droid"]
    assert "libero" in info["robot_presets"] and "humanoid" not in info["robot_presets"]
    assert main(["--checkpoint", str(ckpt)]) == 0
    table = capsys.readouterr().out
    assert "org/my_droid: state 8, actions 32" in table and "aloha: asset_id trossen" in table
    assert main(["--checkpoint", str(tmp_path / "none")]) == 1
    assert "no Orbax params at" in capsys.readouterr().err


def norm(state: int, actions: int) -> NormStats:
    return NormStats(state=identity_stats(state), actions=identity_stats(actions))


def test_installed_console_script(capsys):
    """The entry point in the venv's bin, in a fresh process: same figures as main()."""
    script = Path(sys.executable).parent / "oxygen-info"
    done = subprocess.run(
        [str(script), "--preset", "pi05", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout) == info_json("pi05", capsys)
