"""oxygen-train average: the mean of checkpoints continued from one parent, written as
oxygen-train writes a checkpoint and loaded by the same loader."""

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from oxygen_core.model.checkpoint import TOKENIZER_FILE, TRAIN_CONFIG
from oxygen_core.train import average, checkpoints

PARENT = Path(__file__).resolve().parents[1] / "data" / "policy" / "sim_demo"


def _child(tmp_path: Path, name: str, shift: float, norm=None) -> Path:
    """The shipped policy with every weight moved by `shift` (a stage continued from it)."""
    policy, _ = checkpoints.trained_policy(PARENT)
    out = tmp_path / name
    shutil.copytree(PARENT, out, ignore=shutil.ignore_patterns("params", "assets"))
    params = jax.tree.map(lambda x: np.asarray(x) + np.float32(shift), policy.params)
    checkpoints.write_checkpoint(out, params, norm or policy.norm, policy.robot.name)
    return out


def _flat(path: Path) -> dict[str, np.ndarray]:
    policy, _ = checkpoints.trained_policy(path)
    leaves = jax.tree_util.tree_leaves_with_path(policy.params)
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in leaves}


def test_the_mean_of_two_stages_loads_as_their_mean_with_the_parents_io(tmp_path, capsys):
    a, b = _child(tmp_path, "a", 0.25), _child(tmp_path, "b", -0.75)
    out = tmp_path / "mean"
    average.main(["--out", str(out), str(a), str(b)])
    assert "the mean of 2 checkpoints" in capsys.readouterr().out
    parent, got = _flat(PARENT), _flat(out)
    assert got.keys() == parent.keys()
    for key, value in parent.items():
        np.testing.assert_allclose(got[key], value - 0.25, atol=1e-6, err_msg=key)
    meta = json.loads((out / TRAIN_CONFIG).read_text())
    shipped = json.loads((PARENT / TRAIN_CONFIG).read_text())
    assert {k: meta[k] for k in average.SHARED} == {k: shipped.get(k) for k in average.SHARED}
    assert [x["checkpoint"] for x in meta["average_of"]] == [str(a), str(b)]
    assert meta["action_horizon"] == checkpoints.trained_policy(PARENT)[0].config.action_horizon
    assert meta["image_slots"] == shipped["image_slots"] == 2
    assert (out / TOKENIZER_FILE).read_bytes() == (PARENT / TOKENIZER_FILE).read_bytes()
    mean_policy, _ = checkpoints.trained_policy(out)
    assert average.same_norm_stats(mean_policy.norm, checkpoints.trained_policy(PARENT)[0].norm)


def test_checkpoints_of_other_norm_stats_are_refused_naming_the_path(tmp_path):
    policy, _ = checkpoints.trained_policy(PARENT)
    state = dataclasses.replace(policy.norm.state, q99=policy.norm.state.q99 + 1)
    other = _child(tmp_path, "other", 0.0, dataclasses.replace(policy.norm, state=state))
    with pytest.raises(SystemExit, match=f"{other} and {PARENT} differ in norm stats"):
        average.main(["--out", str(tmp_path / "mean"), str(PARENT), str(other)])
    assert not (tmp_path / "mean").exists()


def test_one_checkpoint_or_an_input_as_output_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="two checkpoints or more"):
        average.main(["--out", str(tmp_path / "mean"), str(PARENT)])
    a = _child(tmp_path, "a", 0.0)
    with pytest.raises(SystemExit, match="is one of the checkpoints"):
        average.main(["--out", str(a), str(PARENT), str(a)])
