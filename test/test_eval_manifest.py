"""oxygen-eval manifest's manifest: every error names the key and path, the grid, task markers.

Configurations are read by the node's own parameter code (rclpy), so these tests are
marked ros; the bags are short generated demo scenes. No Ray runs here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from metaworld_harness import needs_metaworld

from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_ros.tools.demo_bag import Scene, scene_topics, write_scene
from oxygen_ros.tools.eval.manifest import ManifestError, Resources, load_manifest
from oxygen_ros.tools.eval.tasks import (
    ATTEMPT,
    ERRORS,
    MARKER,
    StaleOutput,
    fingerprint,
    is_done,
    mark_done,
    metaworld_spec,
    record_failure,
    sim_spec,
    task_dir,
)

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny.yaml"
SIM = ROOT / "config" / "sim.yaml"
SIM_BAG = ROOT / "data" / "sim_bag"
METAWORLD = ROOT / "config" / "metaworld.yaml"


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bags/a and bags/b: two 0.5 s scenes; other/a: a third bag with a repeated name."""
    root = tmp_path_factory.mktemp("bags")
    topics = scene_topics(TINY)
    for path, seed in (("bags/a", 0), ("bags/b", 1), ("other/a", 2)):
        write_scene(root / path, Scene(seconds=0.5, image_size=32, seed=seed), topics)
    (root / "notabag").mkdir()
    (root / "empty_checkpoint").mkdir()
    return root


def _write(root: Path, data: dict) -> Path:
    path = root / "manifest.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _base(**configurations: dict) -> dict:
    configs = configurations or {"fast": {"params": str(TINY)}}
    return {"inputs": {"bags": ["bags/*"]}, "configurations": configs}


def _error(root: Path, data: dict) -> str:
    path = _write(root, data)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message.removeprefix(f"{path}: ")


# --------------------------------------------------------------------------- errors


def test_unknown_keys_are_named(bags: Path) -> None:
    assert _error(bags, {**_base(), "inptus": {}}).startswith("inptus: unknown key")
    data = _base(fast={"params": str(TINY), "overides": {}})
    assert _error(bags, data).startswith("configurations.fast.overides: unknown key")
    data = {**_base(), "resources": {"num_cpu": 1}}
    assert _error(bags, data).startswith("resources.num_cpu: unknown key")
    assert _error(bags, {"inputs": {"bags": ["bags/a"]}}) == (
        "top level: missing required key 'configurations'"
    )


def test_missing_files_and_empty_globs_are_named(bags: Path) -> None:
    data = _base(fast={"params": "config/missing.yaml"})
    assert _error(bags, data) == (
        f"configurations.fast.params: {bags / 'config/missing.yaml'} does not exist"
    )
    data = {**_base(), "inputs": {"bags": ["bags/a", "recordings/*"]}}
    assert _error(bags, data) == (
        f"inputs.bags[1]: {bags / 'recordings/*'} matches no rosbag2 folder"
    )
    data = {**_base(), "inputs": {"bags": ["nowhere"]}}
    assert _error(bags, data) == f"inputs.bags[0]: {bags / 'nowhere'} does not exist"
    data = {**_base(), "inputs": {"bags": ["notabag"]}}
    assert _error(bags, data) == (
        f"inputs.bags[0]: {bags / 'notabag'} is not a rosbag2 folder (no metadata.yaml)"
    )
    data = _base(fast={"params": str(TINY), "overrides": {"checkpoint_dir": "weights"}})
    assert _error(bags, data) == (
        f"configurations.fast.overrides.checkpoint_dir: {bags / 'weights'} does not exist"
    )


def test_override_names_and_values_are_checked_by_the_node(bags: Path) -> None:
    data = _base(fast={"params": str(TINY), "overrides": {"engine_mod": "oxygen"}})
    assert _error(bags, data) == "configurations.fast: 'engine_mod' is not a parameter of the node"
    data = _base(fast={"params": str(TINY), "overrides": {"streams.narration.temprature": 0.5}})
    assert "'streams.narration.temprature' is not a parameter" in _error(bags, data)
    data = _base(fast={"params": str(TINY), "overrides": {"steps_per_frame": 0}})
    assert _error(bags, data) == (
        "configurations.fast: steps_per_frame must be an integer >= 1 or 'auto', got 0"
    )
    data = _base(fast={"params": str(TINY), "overrides": {"control_rate_hz": 20}})
    message = _error(bags, data)
    assert message.startswith("configurations.fast: ") and "control_rate_hz" in message
    data = _base(fast={"params": str(TINY), "overrides": {"engine_mode": "fastest"}})
    assert "engine_mode='fastest' is not one of" in _error(bags, data)


def test_bags_are_checked_against_each_configuration(bags: Path) -> None:
    cams = {"camera_topics": ["/camera/top/image_raw"]}
    data = _base(fast={"params": str(TINY)}, top={"params": str(TINY), "overrides": cams})
    message = _error(bags, data)
    assert message.startswith(f"configurations.top: {bags / 'bags/a'} lacks the input topics")
    assert "/camera/top/image_raw" in message


def test_bad_shapes_are_named(bags: Path) -> None:
    data = {**_base(), "inputs": {"bags": ["bags/*", "other/*"]}}
    assert "two inputs share the name 'a'" in _error(bags, data)
    data = {**_base(), "resources": {"num_cpus": -1}}
    assert _error(bags, data) == "resources.num_cpus: must be a number >= 0, got -1"
    data = _base(**{"bad name": {"params": str(TINY)}})
    assert _error(bags, data).startswith("configurations.bad name: a name is")
    data = {**_base(), "sweep": {"seed": []}}
    assert _error(bags, data) == "sweep.seed: must be a non-empty list of values"
    data = {**_base(), "inputs": {"sim": [{"family": "pick", "seeds": {"start": 0, "count": 0}}]}}
    assert _error(bags, data) == "inputs.sim[0].seeds.count: must be an integer >= 1, got 0"
    data = {**_base(), "inputs": {}}
    assert _error(bags, data) == "inputs: names no bag, no sim family and no Meta-World task"


# --------------------------------------------------------------------------- the grid


def test_grid_expansion(bags: Path) -> None:
    data = {
        "inputs": {"bags": ["bags/*"]},
        "configurations": {
            "oxy": {"params": str(TINY), "overrides": {"engine_mode": "oxygen"}},
            "iso": {
                "params": str(TINY),
                "overrides": {"engine_mode": "isolated", "joint_trajectory": False},
                "resources": {"num_cpus": 2},
            },
        },
        "sweep": {"seed": [0, 7]},
        "resources": {"num_cpus": 0.5, "num_gpus": 0},
    }
    manifest = load_manifest(_write(bags, data))
    tasks = manifest.tasks()
    assert [t.id for t in tasks] == [
        "a/oxy-seed=0",
        "b/oxy-seed=0",
        "a/oxy-seed=7",
        "b/oxy-seed=7",
        "a/iso-seed=0",
        "b/iso-seed=0",
        "a/iso-seed=7",
        "b/iso-seed=7",
    ]
    iso7 = tasks[-1].config
    assert iso7.override_dict() == {
        "engine_mode": "isolated",
        "joint_trajectory": "false",
        "seed": "7",
    }
    assert iso7.resources == Resources(num_cpus=2, num_gpus=0)
    assert tasks[0].config.resources == Resources(num_cpus=0.5, num_gpus=0)
    assert tasks[0].input.path == bags / "bags" / "a" and iso7.params == TINY
    assert task_dir(Path("/out"), tasks[1]) == Path("/out/b/oxy-seed=0")


def test_sim_inputs_expand_into_tasks(bags: Path) -> None:
    pick = {"family": "pick", "seeds": {"start": 10, "count": 5}, "per_task": 2}
    push = {"family": "push", "seeds": {"count": 1}, "rtf": 4, "camera_size": 64}  # from dev
    data = {
        "inputs": {"bags": [str(SIM_BAG)], "sim": [pick, push]},
        "configurations": {
            "oxy": {"params": str(SIM), "overrides": {"engine_mode": "oxygen"}},
            "expert": {"params": str(SIM), "policy": "expert"},
        },
        "sweep": {"seed": [0, 1]},
    }
    tasks = load_manifest(_write(bags, data)).tasks()
    sims = ["pick-seeds10-11", "pick-seeds12-13", "pick-seeds14-14", "push-seeds400000-400000"]
    # The sweep multiplies the model configuration only; the expert meets no bag.
    assert [t.id for t in tasks] == [
        *(f"{i}/oxy-seed=0" for i in ["sim_bag", *sims]),
        *(f"{i}/oxy-seed=1" for i in ["sim_bag", *sims]),
        *(f"{i}/expert" for i in sims),
    ]
    spec = sim_spec(tasks[7], domain_id=7)  # pick-seeds12-13/oxy-seed=1
    assert (spec.families, spec.first_seed, spec.episodes, spec.policy) == (
        ("pick",),
        12,
        2,
        "model",
    )
    assert spec.overrides == {"engine_mode": "oxygen", "seed": "1"} and spec.params == SIM
    assert (spec.domain_id, spec.rtf, spec.camera_size, spec.real_time_factor) == (
        7,
        None,
        224,
        0.5,
    )
    expert = sim_spec(tasks[-1], domain_id=None)  # push-seeds400000-400000/expert
    assert (expert.families, expert.first_seed, expert.episodes) == (("push",), 400_000, 1)
    assert (expert.policy, expert.overrides, expert.rtf, expert.camera_size) == (
        "expert",
        {},
        4.0,
        64,
    )
    assert fingerprint(tasks[-1])["policy"] == "expert"
    assert "policy" not in fingerprint(tasks[0])  # bags: as before sim tasks existed


def test_sim_inputs_are_checked(bags: Path) -> None:
    sim = {"family": "pick", "seeds": {"start": 0, "count": 2}}
    tiny_sim = {**_base(), "inputs": {"sim": [sim]}}
    assert "configurations.fast: joint_names must be the sim's" in _error(bags, tiny_sim)
    fly = {**_base(), "inputs": {"sim": [{**sim, "family": "fly"}]}}
    assert _error(bags, fly) == "inputs.sim[0].family: must be one of pick, put, push, got 'fly'"
    slow = {**_base(), "inputs": {"sim": [{**sim, "rtf": 0}]}}
    assert _error(bags, slow) == "inputs.sim[0].rtf: must be a number > 0, got 0"
    expert_only_bags = _base(fast={"params": str(TINY), "policy": "expert"})
    assert _error(bags, expert_only_bags) == (
        "configurations.fast: policy expert runs sim inputs only and there are none"
    )
    bad_policy = _base(fast={"params": str(TINY), "policy": "smart"})
    assert _error(bags, bad_policy) == (
        "configurations.fast.policy: must be one of model, expert, hold, random, blind, touch"
    )
    baseline = _base(fast={"params": str(TINY), "policy": "blind"})
    assert _error(bags, baseline) == (
        "configurations.fast: policy blind runs sim inputs only and there are none"
    )


@needs_metaworld
def test_metaworld_inputs_expand_into_tasks_of_metaworld_configurations(bags: Path) -> None:
    drawer = {"task": "drawer-open-v3", "seeds": {"count": 5}, "per_task": 2}  # from dev
    reach = {"task": "reach-v3", "seeds": {"start": 7, "count": 1}, "rtf": 4, "camera_size": 32}
    data = {
        "inputs": {
            "bags": [str(SIM_BAG)],
            "sim": [{"family": "push", "seeds": {"start": 3, "count": 1}}],
            "metaworld": [drawer, reach],
        },
        "configurations": {
            "sim": {"params": str(SIM)},
            "sim-hold": {"params": str(SIM), "policy": "hold"},
            "mw": {"params": str(METAWORLD), "overrides": {"engine_mode": "isolated"}},
            "mw-hold": {"params": str(METAWORLD), "policy": "hold"},
        },
    }
    tasks = load_manifest(_write(bags, data)).tasks()
    mw = ["drawer-open-v3-seeds400000-400001", "drawer-open-v3-seeds400002-400003",
          "drawer-open-v3-seeds400004-400004", "reach-v3-seeds7-7"]  # fmt: skip
    # Meta-World params meet the metaworld inputs and nothing else; other params never them.
    assert [t.id for t in tasks] == [
        "sim_bag/sim", "push-seeds3-3/sim", "push-seeds3-3/sim-hold",
        *(f"{i}/mw" for i in mw), *(f"{i}/mw-hold" for i in mw),
    ]  # fmt: skip
    spec = metaworld_spec(tasks[4], domain_id=9)  # drawer-open-v3-seeds400002-400003/mw
    assert (spec.tasks, spec.first_seed, spec.episodes, spec.policy) == (
        ("drawer-open-v3",), 400_002, 2, "model"
    )  # fmt: skip
    assert (spec.params, spec.domain_id) == (METAWORLD, 9)
    assert spec.overrides == {"engine_mode": "isolated"}
    assert (spec.rtf, spec.camera_size, spec.real_time_factor) == (None, 224, 0.5)
    hold = metaworld_spec(tasks[-1], domain_id=None)  # reach-v3-seeds7-7/mw-hold
    assert (hold.policy, hold.first_seed, hold.rtf, hold.camera_size) == ("hold", 7, 4.0, 32)
    assert fingerprint(tasks[-1])["policy"] == "hold"
    assert fingerprint(tasks[-1])["input"]["kind"] == "metaworld"


@needs_metaworld
def test_metaworld_inputs_are_checked(bags: Path) -> None:
    drawer = {"task": "drawer-open-v3", "seeds": {"count": 2}}
    mw = {"mw": {"params": str(METAWORLD)}}

    def manifest(entry: object = drawer, **configs: dict) -> dict:
        return {"inputs": {"metaworld": [entry]}, "configurations": configs or mw}

    assert _error(bags, manifest({**drawer, "task": "drawer-opn-v3"})) == (
        "inputs.metaworld[0].task: must be an MT10 task (reach-v3, push-v3, pick-place-v3, "
        "door-open-v3, drawer-open-v3, drawer-close-v3, button-press-topdown-v3, "
        "peg-insert-side-v3, window-open-v3, window-close-v3), got 'drawer-opn-v3'"
    )
    assert _error(bags, manifest({**drawer, "camera_size": 8})) == (
        "inputs.metaworld[0].camera_size: must be an integer >= 16, got 8"
    )
    assert _error(bags, manifest({**drawer, "camera_size": 2048})) == (
        "inputs.metaworld[0].camera_size: must be an integer <= 1024, got 2048"
    )
    assert _error(bags, manifest({**drawer, "rtf": -1})) == (
        "inputs.metaworld[0].rtf: must be a number > 0, got -1"
    )
    assert _error(bags, manifest({"task": "reach-v3"})) == (
        "inputs.metaworld[0]: missing required key 'seeds'"
    )
    assert _error(bags, manifest({**drawer, "family": "pick"})).startswith(
        "inputs.metaworld[0].family: unknown key"
    )
    assert _error(bags, {"inputs": {"metaworld": "reach-v3"}, "configurations": mw}) == (
        "inputs.metaworld: must be a list of {task, seeds, per_task}"
    )
    # Params that are not Meta-World's meet no metaworld input: with nothing else to
    # meet, what makes them not is the error.
    assert _error(bags, manifest(sim={"params": str(SIM)})) == (
        "configurations.sim: not Meta-World params: joint_names must be the sim's state "
        "['ee_x', 'ee_y', 'ee_z', 'gripper']: ('joint_1', 'joint_2', 'joint_3', 'joint_4', "
        "'joint_5', 'joint_6', 'gripper')"
    )
    slow = {"params": str(METAWORLD), "overrides": {"control_rate_hz": 40.0}}
    assert _error(bags, manifest(mw=slow)) == (
        "configurations.mw: not Meta-World params: control_rate_hz must be the sim's 80, got 40"
    )


# --------------------------------------------------------------------------- markers


def test_markers_and_stale_outputs(bags: Path, tmp_path: Path) -> None:
    data = _base(fast={"params": str(TINY), "overrides": {"seed": 1}})
    task = load_manifest(_write(bags, data)).tasks()[0]
    assert not is_done(tmp_path, task)
    record_failure(tmp_path, task, {"attempt": 1, "type": "ValueError", "message": "x"})
    record_failure(tmp_path, task, {"attempt": 2, "type": "WorkerDied", "message": "y"})
    errors = json.loads((task_dir(tmp_path, task) / ERRORS).read_text())
    assert [a["type"] for a in errors["attempts"]] == ["ValueError", "WorkerDied"]
    assert not is_done(tmp_path, task)
    mark_done(tmp_path, task, {"engine_reused": True}, attempts=3)
    assert is_done(tmp_path, task)
    marker = json.loads((task_dir(tmp_path, task) / MARKER).read_text())
    assert (marker["task"], marker["attempts"], marker["engine_reused"]) == ("a/fast", 3, True)
    assert not (task_dir(tmp_path, task) / ATTEMPT).exists()
    other = _base(fast={"params": str(TINY), "overrides": {"seed": 2}})
    changed = load_manifest(_write(bags, other)).tasks()[0]
    with pytest.raises(StaleOutput, match="run with other settings"):
        is_done(tmp_path, changed)


def test_the_bundled_example_manifests() -> None:
    manifest = load_manifest(ROOT / "config" / "eval" / "demo.yaml")
    tasks = manifest.tasks()
    assert [t.id for t in tasks] == ["demo_bag/oxygen", "demo_bag/isolated"]
    assert tasks[1].config.override_dict() == {"engine_mode": "isolated", "steps_per_frame": "2"}
    mixed = load_manifest(ROOT / "config" / "eval" / "closed_loop.yaml").tasks()
    sims = [f"{f}-seeds{s}-{s + 1}" for f in ("pick", "put", "push") for s in (400000, 400002)]
    assert [t.id for t in mixed] == [
        *(f"{i}/oxygen" for i in ["sim_bag", *sims]),
        *(f"{i}/isolated" for i in ["sim_bag", *sims]),
        *(
            f"{i}/{baseline}"
            for baseline in ("expert", "hold", "random", "blind", "touch")
            for i in sims
        ),
    ]


@needs_metaworld
def test_the_bundled_metaworld_manifest() -> None:
    tasks = load_manifest(ROOT / "config" / "eval" / "metaworld.yaml").tasks()
    runs = [f"{task}-seeds400000-400049" for task in MT10_TASKS]  # 50 dev seeds per task
    configs = ("model", "expert", "hold", "random", "blind")
    assert [t.id for t in tasks] == [f"{r}/{c}" for c in configs for r in runs]
    params = {t.config.name: t.config.params for t in tasks}
    assert params.pop("model") == ROOT / "config" / "metaworld_mt10.yaml"
    assert set(params.values()) == {METAWORLD}
