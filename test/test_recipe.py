"""Training recipes (oxygen-train --recipe): a tiny recipe run end to end through the same
code as oxygen-train's commands, reruns that skip what is done, the shipped recipe against
the shipped checkpoint, and malformed recipes refused in one line naming file and stage."""

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml

from oxygen_core.model.checkpoint import TRAIN_CONFIG
from oxygen_core.train import checkpoints, cli, prepare, recipe

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "config" / "train" / "sim_demo.yaml"
POLICY = ROOT / "data" / "policy" / "sim_demo"
BEFORE_CONTACTS = ROOT / "data" / "policy" / "sim_before_contacts"
BEFORE_CONTACTS_RECIPE = ROOT / "config" / "train" / "sim_before_contacts.yaml"
TINY = {"preset": "tiny", "camera-size": 32, "workers": 1, "batch-size": 2}


def _tiny(tmp_path: Path, second: dict | None = None) -> dict:
    """Two trained stages on two pick scenes (one held out) and the push scenes that the
    second adds; the second trains no steps, so it holds the first's weights and their
    mean is the first's: the numbers show the second continued the first."""
    return {
        "out": str(tmp_path / "policy"),
        "work": str(tmp_path / "work"),
        "defaults": {**TINY, "families": ["pick"], "seeds": 2, "val-every-episode": 2},
        "stages": {
            "first": {"steps": 2},
            "extra": {"episodes-only": True, "families": ["push"], "seeds": 1, "first-seed": 7},
            "second": second or {"init-from": "first", "add-episodes": ["extra"], "steps": 0},
        },
        "average": ["first", "second"],
    }


def _write(tmp_path: Path, data: dict, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _leaves(ckpt: Path) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(checkpoints.trained_policy(ckpt)[0].params)]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:No artists with labels:UserWarning")  # 0 steps: no curve
def test_a_tiny_recipe_trains_its_stages_and_averages_them(tmp_path, capsys):
    path = _write(tmp_path, _tiny(tmp_path))
    recipe.main([recipe.RECIPE_FLAG, str(path)])
    loaded = recipe.load(path)
    work, out = tmp_path / "work", tmp_path / "policy"
    meta = json.loads((out / TRAIN_CONFIG).read_text())
    assert meta["recipe"] == loaded.provenance(recipe.AVERAGE)
    assert meta["recipe"]["path"] == str(path) and meta["recipe"]["stage"] == "average"
    first, second = (recipe.checkpoint_dir(work, s) for s in ("first", "second"))
    assert [a["checkpoint"] for a in meta["average_of"]] == [str(first), str(second)]
    stages = [a["train_config"] for a in meta["average_of"]]
    assert [s["recipe"]["stage"] for s in stages] == ["first", "second"]
    assert stages[0]["train"]["steps"] == 2 and stages[0]["init_from"] is None
    assert stages[1]["init_from"] == str(first)
    [extra] = recipe.train_dir(work, "extra").glob("episodes-7+1-push-32-*.npz")
    assert stages[1]["add_episodes"] == [str(extra)]
    for got, want in zip(_leaves(out), _leaves(first), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
    # A rerun skips what is done; --from-stage retrains the named stage (and its readers)
    # even with its keys unchanged.
    capsys.readouterr()
    recipe.main([recipe.RECIPE_FLAG, str(path), "--from-stage", "second"])
    said = capsys.readouterr().out
    assert "stage first: done before" in said and "stage second: oxygen-train" in said
    # A changed flag retrains that stage alone.
    _write(tmp_path, _tiny(tmp_path, {"init-from": "first", "steps": 0, "seed": 1}))
    recipe.main([recipe.RECIPE_FLAG, str(path)])
    said = capsys.readouterr().out
    assert "stage first: done before" in said and "stage second: oxygen-train" in said
    assert json.loads((second / TRAIN_CONFIG).read_text())["add_episodes"] == []


def test_directories_no_recipe_wrote_are_refused_not_deleted(tmp_path):
    path = _write(tmp_path, _tiny(tmp_path))
    stray = tmp_path / "work" / "first"
    stray.mkdir(parents=True)
    with pytest.raises(SystemExit, match=f"{path}: stage first: {stray} holds no stage.json"):
        recipe.main([recipe.RECIPE_FLAG, str(path)])
    assert stray.is_dir()
    with pytest.raises(SystemExit, match=f"{path}: --from-stage third: no such stage"):
        recipe.main([recipe.RECIPE_FLAG, str(path), "--from-stage", "third"])
    with pytest.raises(SystemExit):  # a recipe's stages take their flags from the file
        recipe.main([recipe.RECIPE_FLAG, str(path), "--steps", "3"])


def _assert_recorded(loaded: recipe.Recipe, meta: dict) -> dict[str, recipe.Stage]:
    """The averaged stages of a checkpoint's train_config.json are the recipe's, flag for
    flag, with the directories the recipe uses; the recipe's stages by name."""
    stages = {s.name: s for s in loaded.stages}
    assert [a["checkpoint"] for a in meta["average_of"]] == [
        str(recipe.checkpoint_dir(loaded.work, name)) for name in loaded.average
    ]
    averaged = [a["train_config"] for a in meta["average_of"]]
    for name, recorded in zip(loaded.average, averaged, strict=True):
        args = stages[name].args
        # A checkpoint from before robots could be declared as data records no
        # robot_declaration; absent reads as a preset robot (checkpoints.checkpoint_robot).
        assert {k: recorded.get(k) for k in cli.run_fields(args)} == cli.run_fields(args)
        assert recorded["train"] == dataclasses.asdict(cli.train_config(args))
        assert recorded["recipe"]["stage"] == name
    return stages


def test_the_shipped_recipe_is_the_shipped_checkpoints_history():
    """The shipped policy's one stage continues the policy trained before contacts; the
    recipe's content hash is the one the checkpoint names."""
    # Loaded as `make policy` names it, from the repository root.
    shipped = dataclasses.replace(recipe.load(SHIPPED), path=SHIPPED.relative_to(ROOT))
    meta = json.loads((POLICY / TRAIN_CONFIG).read_text())
    assert meta["recipe"] == shipped.provenance(recipe.AVERAGE)
    assert shipped.out == POLICY.relative_to(ROOT)
    stages = _assert_recorded(shipped, meta)
    assert list(stages) == ["contacts"] and stages["contacts"].reads == ()
    assert stages["contacts"].args.init_from == str(BEFORE_CONTACTS.relative_to(ROOT))
    [recorded] = meta["average_of"]
    assert recorded["train_config"]["recipe"] == shipped.provenance("contacts")


def test_the_policy_before_contacts_is_its_recipes_history():
    """Its eight stages and their chain, as recorded when it shipped under the recipe's
    earlier name (so the recorded path and hash are of that file, not checked here)."""
    loaded = recipe.load(BEFORE_CONTACTS_RECIPE)
    assert loaded.out == BEFORE_CONTACTS.relative_to(ROOT)
    meta = json.loads((BEFORE_CONTACTS / TRAIN_CONFIG).read_text())
    assert meta["recipe"]["stage"] == recipe.AVERAGE
    stages = _assert_recorded(loaded, meta)
    assert list(stages) == [
        "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "push_scenes",
        "eighth",
    ]  # fmt: skip
    chain = [stages["seventh"]]
    while chain[-1].reads:
        chain.append(stages[chain[-1].reads[0]])
    assert [s.name for s in chain] == ["seventh", "sixth", "fifth", "fourth", "third",
                                       "second", "first"]  # fmt: skip
    first = stages["first"].args
    assert stages["second"].args.episodes == str(prepare.expert_cache(first, cli.presets(first)[1]))


def test_oxygen_train_defaults_to_the_shipped_recipes_robot():
    shipped = recipe.load(SHIPPED)
    robots = {s.args.robot for s in shipped.stages}
    assert robots == {cli._train_parser().parse_args(["--out", "x"]).robot} == {"sim_plan"}


def _broken(**changes) -> dict:
    """A recipe that parses, with `changes` applied (None removes a key)."""
    data = {
        "out": "out/x",
        "work": "out/w",
        "defaults": dict(TINY),
        "stages": {"a": {"steps": 1}, "b": {"init-from": "a"}, "c": {"init-from": "a"}},
        "average": ["b", "c"],
    }
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epochs": 3}, "top level: unknown key 'epochs'"),
        ({"stages": None}, "top level: missing key 'stages'"),
        ({"stages": {"a": {"steps": 1, "epochs": 3}}}, "stage a: oxygen-train: unrecognized"),
        ({"stages": {"a": {"step": 1}}}, "stage a: oxygen-train: unrecognized arguments: --step"),
        ({"stages": {"a": {"lr": "fast"}}}, "stage a: oxygen-train: argument --lr: invalid"),
        ({"stages": {"a": {"out": "o"}}}, "stage a: out: the recipe places it"),
        ({"stages": {"a": {"init-from": "z"}}}, "stage a: init-from: no stage 'z'"),
        (
            {"stages": {"a": {"init-from": "c"}, "b": {"init-from": "a"}, "c": {"init-from": "b"}}},
            "stage a: stages a -> c -> b -> a form a cycle",
        ),
        ({"stages": {"a": {"robot": "r2d2"}}}, "stage a: oxygen-train: unknown robot 'r2d2'"),
        ({"stages": {"average": {}}}, "stage 'average': a stage name is a folder name"),
        (
            {"stages": {"a": {"episodes-only": True}, "b": {"init-from": "a"}}},
            "stage b: init-from: stage a writes episodes, no checkpoint",
        ),
        ({"average": ["b", "b"]}, "average: must list different stages, one or more"),
        ({"average": []}, "average: must list different stages, one or more"),
        (
            {"stages": {"a": {"init-from": "nowhere/checkpoint"}}},
            "stage a: init-from: nowhere/checkpoint holds no train_config.json: no checkpoint",
        ),
        ({"average": ["b", "z"]}, "average: no stage 'z'"),
    ],
)
def test_a_malformed_recipe_is_refused_naming_the_file_and_the_stage(changes, message, tmp_path):
    path = _write(tmp_path, _broken(**changes), "broken.yaml")
    with pytest.raises(recipe.RecipeError) as error:
        recipe.load(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_stage_may_continue_a_checkpoint_outside_the_recipe_whose_files_key_it(tmp_path):
    """init-from with a slash is a checkpoint directory: passed to oxygen-train as it is,
    read by no stage, and a change to any of its files changes the stage's key (so a rerun
    trains it anew) and, through it, its readers' keys."""
    parent = tmp_path / "parent"
    shutil.copytree(BEFORE_CONTACTS, parent)
    data = {
        "out": str(tmp_path / "policy"),
        "work": str(tmp_path / "work"),
        "defaults": TINY,
        "stages": {"a": {"init-from": str(parent)}, "b": {"init-from": "a"}},
        "average": ["b"],
    }
    path = _write(tmp_path, data)
    before = recipe.load(path)
    a, b = before.stages
    assert a.reads == () and b.reads == ("a",) and a.args.init_from == str(parent)
    assert before.average == ("b",)
    (parent / "tokenizer.model").write_bytes(b"another tokenizer")
    after = recipe.load(path)
    changed = [s.key != t.key for s, t in zip(before.stages, after.stages, strict=True)]
    assert changed == [True, True]


def test_a_recipe_that_is_no_yaml_mapping_is_refused_in_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("stages: [a\n")
    with pytest.raises(SystemExit, match=f"{path}: not valid YAML: ") as error:
        recipe.main([recipe.RECIPE_FLAG, str(path)])
    assert "\n" not in str(error.value)
    with pytest.raises(SystemExit, match="cannot read it"):
        recipe.main([recipe.RECIPE_FLAG, str(tmp_path / "missing.yaml")])
