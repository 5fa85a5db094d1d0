"""openpi checkpoints at tiny size: the layout on disk, the round trip, the errors.

No pi0.5 weights can be downloaded here, so the tests write checkpoints exactly as openpi
lays them out (an Orbax PyTree under `<ckpt>/params` with openpi's names and stacked
layers; quantile norm stats under `assets/<id>/norm_stats.json`), once through
`save_checkpoint` and once with Orbax directly in the `value`-wrapped form of openpi's
training checkpoints, and demand that the loaded policy acts exactly like the tree in
memory.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from oxygen_core.config import model_preset
from oxygen_core.model import pi05
from oxygen_core.model import weights as P
from oxygen_core.model.checkpoint import (
    EMBEDDING,
    asset_ids,
    find_norm_stats,
    save_checkpoint,
)
from oxygen_core.model.normalize import NormStats, Stats, identity_stats, read_norm_stats
from oxygen_core.model.tokenizer import bundled_model_path
from oxygen_core.observation import Observation
from oxygen_core.policy import Policy, load_policy

CFG = model_preset("tiny")  # the demo robot keeps the tiny preset's horizon and prompt
STATE_DIM, ROBOT_ACTION_DIM = 7, 7


def stats(low: list[float], high: list[float]) -> Stats:
    q01, q99 = np.asarray(low, np.float32), np.asarray(high, np.float32)
    return Stats(q01=q01, q99=q99, mean=(q01 + q99) / 2, std=(q99 - q01) / 4)


# State stats cover the robot's 7 dims; action stats cover the model's 32 (openpi pads).
STATS = NormStats(
    state=stats([-2.0] * STATE_DIM, [2.0 + i for i in range(STATE_DIM)]),
    actions=stats([-0.5 * i for i in range(32)], [1.0 + i for i in range(32)]),
)


@pytest.fixture(scope="module")
def tree() -> P.Tree:
    return P.init_params(CFG, seed=3)


@pytest.fixture(scope="module")
def ckpt(tree: P.Tree, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "pi05_tiny"
    save_checkpoint(path, tree, STATS, asset_id="demo")
    return path


@pytest.fixture(scope="module")
def policy(ckpt: Path) -> Policy:
    return load_policy(preset="tiny", robot="demo", checkpoint_dir=ckpt)


def observation() -> Observation:
    rng = np.random.default_rng(0)
    size = CFG.vision.image_size
    return Observation(
        images={"base_0_rgb": rng.integers(0, 256, (size, size, 3), dtype=np.uint8)},
        state=np.linspace(-1.0, 3.0, STATE_DIM, dtype=np.float32),
        prompt="stack the red block on the blue one",
    )


def actions(policy: Policy) -> np.ndarray:
    cache = pi05.prefill(policy.params, CFG, policy.prefix_inputs(observation()))
    return np.asarray(pi05.denoise(policy.params, CFG, cache, policy.noise(seed=1), 3))


def assert_same_params(runtime: P.Tree, tree: P.Tree) -> None:
    expected = P.to_runtime(tree)
    assert jax.tree.structure(runtime) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(runtime), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(got, want)


def save_variant(directory: Path, flat: dict[str, np.ndarray]) -> Path:
    save_checkpoint(directory, P.unflatten(flat))
    return directory


# ------------------------------------------------------------------------ round trip


def test_checkpoint_has_openpis_layout(ckpt: Path, tree: P.Tree):
    """Read back with Orbax alone: {"params": tree} with stacked layers, openpi names."""
    with ocp.PyTreeCheckpointer() as ckptr:
        raw = ckptr.restore(ckpt / "params")
    assert list(raw) == ["params"]
    flat = P.flatten(raw["params"])
    assert set(flat) == set(P.param_shapes(CFG))
    q = flat["PaliGemma/llm/layers/attn/q_einsum_1/w"]
    assert q.shape == (CFG.expert.depth, CFG.expert.num_heads, CFG.expert.width, 16)
    np.testing.assert_array_equal(q, tree["PaliGemma"]["llm"]["layers"]["attn"]["q_einsum_1"]["w"])
    stored = json.loads((ckpt / "assets" / "demo" / "norm_stats.json").read_text())
    np.testing.assert_allclose(stored["norm_stats"]["actions"]["q99"], STATS.actions.q99)
    assert sorted(stored["norm_stats"]["state"]) == ["mean", "q01", "q99", "std"]


def test_loaded_policy_equals_the_tree_in_memory(policy: Policy, tree: P.Tree):
    assert_same_params(policy.params, tree)
    for loaded, written in ((policy.norm.state, STATS.state), (policy.norm.actions, STATS.actions)):
        for field in ("q01", "q99", "mean", "std"):
            np.testing.assert_array_equal(getattr(loaded, field), getattr(written, field))
    in_memory = dataclasses.replace(policy, params=P.to_runtime(tree))
    np.testing.assert_array_equal(actions(policy), actions(in_memory))


def test_value_wrapped_training_checkpoint_loads(tree: P.Tree, tmp_path: Path):
    """openpi training checkpoints wrap every leaf as {"value": array}."""
    wrapped = jax.tree.map(lambda leaf: {"value": np.asarray(leaf)}, tree)
    with ocp.PyTreeCheckpointer() as ckptr:
        ckptr.save(tmp_path / "params", {"params": wrapped})
    policy = load_policy(
        preset="tiny", robot="demo", checkpoint_dir=tmp_path, norm_stats_missing="identity"
    )
    assert_same_params(policy.params, tree)
    # No assets, identity asked for: model actions pass through (to float tolerance).
    x = np.linspace(-1.0, 1.0, 14, dtype=np.float32).reshape(2, 7)
    np.testing.assert_allclose(policy.robot_actions(x, np.zeros(7)), x, atol=2e-6)


# Saves the npz tree as openpi does: jax Arrays sharded over a 2-device training mesh.
SAVE_SHARDED = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, numpy as np, orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from oxygen_core.model import weights as P
mesh = Mesh(np.array(jax.devices()), ("fsdp",))
def put(a):
    spec = PartitionSpec("fsdp") if a.ndim and a.shape[0] % 2 == 0 else PartitionSpec()
    return jax.device_put(a, NamedSharding(mesh, spec))
flat = {k.replace("|", "/"): v for k, v in np.load(sys.argv[1]).items()}
with ocp.PyTreeCheckpointer() as ckptr:
    ckptr.save(sys.argv[2], {"params": jax.tree.map(put, P.unflatten(flat))})
"""


@pytest.mark.filterwarnings("ignore:Sharding info not provided when restoring")
def test_checkpoint_saved_on_a_multi_device_mesh_loads(tree: P.Tree, tmp_path: Path):
    # npz keys cannot hold "/": the subprocess maps "|" back.
    np.savez(tmp_path / "tree.npz", **{p.replace("/", "|"): v for p, v in P.flatten(tree).items()})
    subprocess.run(
        [sys.executable, "-c", SAVE_SHARDED, tmp_path / "tree.npz", tmp_path / "ckpt" / "params"],
        check=True,
        timeout=300,
    )
    policy = load_policy(
        preset="tiny",
        robot="demo",
        checkpoint_dir=tmp_path / "ckpt",
        norm_stats_missing="identity",
    )
    assert_same_params(policy.params, tree)


# ------------------------------------------------------------------------ errors


def test_mis_shaped_parameter_is_named(tree: P.Tree, tmp_path: Path):
    flat = P.flatten(tree)
    name = "PaliGemma/llm/layers/mlp_1/linear"
    flat[name] = flat[name][:, :-1]  # [depth, mlp-1, width]
    save_variant(tmp_path / "ckpt", flat)
    depth, mlp, width = CFG.expert.depth, CFG.expert.mlp_dim, CFG.expert.width
    want = f"{name}: expected ({depth}, {mlp}, {width}), got ({depth}, {mlp - 1}, {width})"
    with pytest.raises(ValueError, match="preset 'tiny'") as err:
        load_policy(preset="tiny", robot="demo", checkpoint_dir=tmp_path / "ckpt")
    assert want in str(err.value)


def test_missing_parameter_is_named(tree: P.Tree, tmp_path: Path):
    flat = P.flatten(tree)
    del flat["action_out_proj/bias"]
    save_variant(tmp_path / "ckpt", flat)
    with pytest.raises(ValueError, match=r"missing action_out_proj/bias \(32,\)"):
        load_policy(preset="tiny", robot="demo", checkpoint_dir=tmp_path / "ckpt")


def test_checkpoint_of_another_preset_is_rejected(ckpt: Path):
    with pytest.raises(ValueError, match="preset 'small'.*expected"):
        load_policy(preset="small", robot="demo", checkpoint_dir=ckpt)


def test_checkpoint_of_another_vocabulary_fails_in_one_line(tree: P.Tree, tmp_path: Path):
    """PaliGemma-sized embeddings (257,152 rows) with the bundled 512-piece tokenizer: the
    pairing is refused before the preset's shapes, naming both sizes and both files."""
    flat = P.flatten(tree)
    flat[EMBEDDING] = np.zeros((model_preset("pi05").vocab_size, CFG.vlm.width), np.float32)
    save_variant(tmp_path / "ckpt", flat)
    with pytest.raises(ValueError) as err:
        load_policy(preset="tiny", robot="demo", checkpoint_dir=tmp_path / "ckpt")
    message = str(err.value)
    bundled = bundled_model_path()
    assert message == (
        f"checkpoint {tmp_path / 'ckpt' / 'params'} has a vocabulary of 257152 tokens but "
        f"tokenizer {bundled} has 512: set tokenizer_path to the tokenizer the checkpoint "
        f"was trained with"
    )


def test_missing_checkpoint_directory_is_named(tmp_path: Path):
    absent = tmp_path / "no_such_ckpt"
    with pytest.raises(FileNotFoundError, match=str(absent / "params")):
        load_policy(preset="tiny", robot="demo", checkpoint_dir=absent)


def copy_stats(ckpt: Path, assets: Path, asset_id: str) -> None:
    """The fixture's stats under `assets/<asset_id>/`, as openpi writes an asset."""
    (assets / asset_id).mkdir(parents=True)
    (assets / asset_id / "norm_stats.json").write_text(
        (ckpt / "assets" / "demo" / "norm_stats.json").read_text()
    )


def test_norm_stats_choice_and_errors(ckpt: Path, tmp_path: Path):
    assets = tmp_path / "assets"
    for name in ("droid", "physical-intelligence/libero"):
        copy_stats(ckpt, assets, name)
    assert asset_ids(tmp_path) == ["droid", "physical-intelligence/libero"]
    with pytest.raises(
        ValueError, match=r"several asset ids \['droid', 'physical-intelligence/libero'\]"
    ):
        find_norm_stats(tmp_path)
    chosen = find_norm_stats(tmp_path, asset_id="physical-intelligence/libero")
    np.testing.assert_array_equal(chosen.state.q99, STATS.state.q99)
    with pytest.raises(ValueError) as err:
        find_norm_stats(tmp_path, asset_id="libero")
    assert str(err.value) == (
        f"asset_id 'libero' has no norm_stats.json in {assets}; asset ids there: "
        "['droid', 'physical-intelligence/libero']"
    )
    broken = assets / "droid" / "norm_stats.json"
    broken.write_text('{"norm_stats": {"state": {}}}')
    with pytest.raises(ValueError, match=f"cannot read norm stats from {broken}"):
        read_norm_stats(broken)


def test_a_checkpoint_without_norm_stats_fails_unless_identity_is_asked_for(tmp_path: Path):
    with pytest.raises(ValueError, match="has no assets/<asset_id>/norm_stats.json"):
        find_norm_stats(tmp_path)
    assert find_norm_stats(tmp_path, missing="identity") is None


def test_an_openpi_nested_asset_id_loads_through_load_policy(tree: P.Tree, ckpt: Path, tmp_path):
    """pi05_libero's layout: stats under assets/physical-intelligence/libero/."""
    nested = tmp_path / "pi05_libero"
    save_checkpoint(nested, tree, STATS, asset_id="physical-intelligence/libero")
    policy = load_policy(preset="tiny", robot="demo", checkpoint_dir=nested)
    np.testing.assert_array_equal(policy.norm.actions.q99, STATS.actions.q99)
    copy_stats(ckpt, nested / "assets", "trossen")
    with pytest.raises(ValueError, match="several asset ids"):
        load_policy(preset="tiny", robot="demo", checkpoint_dir=nested)
    named = load_policy(preset="tiny", robot="demo", checkpoint_dir=nested, asset_id="trossen")
    np.testing.assert_array_equal(named.norm.state.q99, STATS.state.q99)


# ------------------------------------------------------------------------ normalisation


def test_quantile_normalisation_round_trip():
    s = STATS.actions
    np.testing.assert_allclose(s.normalize(s.q01), -1.0, atol=1e-6)
    np.testing.assert_allclose(s.normalize(s.q99), 1.0, atol=3e-6)  # openpi's EPS
    # Dimension 3 spans [-1.5, 4.0]: its midpoint 1.25 maps to 0.
    assert abs(s.normalize(np.asarray([0, 0, 0, 1.25], np.float32))[3]) < 1e-6
    x = np.random.default_rng(1).uniform(-3.0, 9.0, (5, 10, 32)).astype(np.float32)
    np.testing.assert_allclose(s.unnormalize(s.normalize(x)), x, rtol=1e-5, atol=1e-5)
    # Stats padded to 32 dims apply to a 7-dim robot's leading dims.
    np.testing.assert_array_equal(s.normalize(x[..., :7]), s.normalize(x)[..., :7])
    with pytest.raises(ValueError, match="norm stats cover 7 dims, data has 8"):
        STATS.state.normalize(np.zeros(8, np.float32))


def test_identity_stats_map_minus_one_to_one_onto_itself():
    x = np.linspace(-1.0, 1.0, 33, dtype=np.float32)
    s = identity_stats(33)
    np.testing.assert_array_equal(s.normalize(x), x)
    np.testing.assert_array_equal(s.unnormalize(x), x)


def test_actions_come_out_in_robot_units(policy: Policy):
    """Model actions in [-1, 1] map onto each dimension's [q01, q99]; extra dims dropped."""
    horizon = CFG.action_horizon
    model = np.zeros((1, horizon, CFG.action_dim), np.float32)
    model[0, 0], model[0, 1] = -1.0, 1.0
    robot = policy.robot_actions(model, np.zeros(policy.robot.state_dim))
    assert robot.shape == (1, horizon, ROBOT_ACTION_DIM)
    q01, q99 = STATS.actions.q01[:ROBOT_ACTION_DIM], STATS.actions.q99[:ROBOT_ACTION_DIM]
    np.testing.assert_allclose(robot[0, 0], q01, atol=1e-6)
    np.testing.assert_allclose(robot[0, 1], q99, atol=1e-5)
    np.testing.assert_allclose(robot[0, 2], (q01 + q99) / 2, atol=1e-5)
