"""The evaluation manifest: what to run, checked in full before anything runs.

    inputs:
      bags: [data/sim_bag, "recordings/2026-*"]    # rosbag2 folders, paths or globs
      sim:                                          # closed-loop oxygen-eval node episodes
        - {family: pick, seeds: {count: 100}, per_task: 25}  # 4 tasks from the dev seeds
        - {family: push, seeds: {start: 500000, count: 10}, rtf: 1.0, camera_size: 112}
      metaworld:                                    # oxygen-eval node --world metaworld episodes
        - {task: drawer-open-v3, seeds: {count: 50}}         # one MT10 task per entry
        - {task: push-v3, seeds: {count: 50}, per_task: 25, camera_size: 128}
    configurations:                                 # name -> params file + overrides
      oxygen: {params: config/sim.yaml, overrides: {engine_mode: oxygen, steps_per_frame: 2}}
      isolated: {params: config/sim.yaml, overrides: {engine_mode: isolated}}
      expert: {params: config/sim.yaml, policy: expert}  # the scripted reference, sim only
      mw: {params: config/metaworld.yaml}           # Meta-World params: metaworld inputs only
    sweep: {seed: [0, 1]}                 # optional: every model configuration x these values
    resources: {num_cpus: 1, num_gpus: 0}  # per task; a configuration may set its own

Relative paths are relative to the manifest's folder. Overrides are node parameters,
set as `-p name:=value` would set them; every configuration is read by the node's own
parameter code (configure.load_settings), so a misspelt name, a value out of range or of
the wrong type fails here, every bag is checked against every configuration's input
topics (job.check_bag), every configuration that meets a sim input against the sim
(sim.evaluate.check_params: its joint names, cameras, trajectory output), and every one
that meets a metaworld input against Meta-World's (metaworld_eval.METAWORLD.check: its state,
actions, one camera, 80 Hz). Each error is one line that names the manifest, the key and,
where one is at fault, the path.

A sim input's seeds start at `start`, by default the dev range's first
(oxygen_core.sim.seeds: 400000; the test range, 500000-500999, is run once per claim),
and are cut into tasks of `per_task` seeds (default: all in one); each
task is one oxygen-eval node run of that family on its seeds (`rtf` and `camera_size` as
its --rtf and --camera-size). A configuration's `policy` is `model` (default: the node
runs with the params and overrides), `expert` (the sim's scripted expert drives and no
node runs: the reference column) or a baseline, `hold`, `random` or `blind` (the sim
runs it the same way: the floor columns). A configuration without a model meets only the
sim inputs (a bag has nothing to replay without a model), and the sweep does not
multiply it (it has no node to set parameters of).

A metaworld input is one MT10 task (`task`, one entry per task: the grid's rows are then
exactly the report's) and its seeds, cut into tasks of `per_task` as above, each one
oxygen-eval node --world metaworld run (its own ROS_DOMAIN_ID and folder; `rtf` and `camera_size` as
its options). The seeds follow the same protocol (dev by default, test once per claim).
Meta-World params (their state is the sim's ee_x, ee_y, ee_z, gripper:
metaworld_eval.is_metaworld_params) meet the metaworld inputs and nothing else; other
params never meet them. Their policies are the tabletop's names: `model`, `expert` (the
task's scripted policy) and the baselines `hold`, `random` and `blind`
(oxygen_core.metaworld.baselines). Checking Meta-World configurations loads MuJoCo, so a
manifest without metaworld inputs never does.
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from rclpy.exceptions import ParameterException

from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_core.sim.episode import Tabletop
from oxygen_core.sim.seeds import DEV
from oxygen_core.sim.tasks import FAMILIES
from oxygen_ros.params import Settings
from oxygen_ros.tools.configure import load_settings
from oxygen_ros.tools.replay_job import check_bag
from oxygen_ros.tools.sim.evaluate import check_params

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]*$")  # a folder name in the output tree
_PATH_PARAMETERS = ("checkpoint_dir", "tokenizer_path")  # overrides that name files
POLICIES = ("model", *Tabletop.sim_policies)


class ManifestError(ValueError):
    """A manifest the tool cannot run; the message names the key (and path) at fault."""


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one task reserves on the cluster (Ray's actor resources)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One column of the grid: the node's params file plus parameter overrides."""

    name: str
    params: Path  # absolute
    overrides: tuple[tuple[str, str], ...]  # (parameter, value as `-p name:=value` takes it)
    resources: Resources
    policy: str = "model"  # or one the sim runs (Tabletop.sim_policies): no node, sim inputs only
    metaworld: bool = False  # Meta-World params: meets the metaworld inputs only

    def override_dict(self) -> dict[str, str]:
        return dict(self.overrides)


@dataclasses.dataclass(frozen=True)
class BagInput:
    """A recorded rosbag2 folder: one task per configuration is one oxygen-bag replay."""

    name: str
    path: Path  # absolute
    kind: str = "bag"


@dataclasses.dataclass(frozen=True)
class SimInput:
    """A batch of closed-loop episodes of one task family, seeds [start, start + count)."""

    family: str
    start: int
    count: int
    kind: str = "sim"
    rtf: float | None = None  # oxygen-eval node's --rtf (None: its default for the policy)
    camera_size: int = 224

    @property
    def name(self) -> str:
        return f"{self.family}-seeds{self.start}-{self.start + self.count - 1}"


@dataclasses.dataclass(frozen=True)
class MetaWorldInput:
    """A batch of Meta-World episodes of one MT10 task, seeds [start, start + count)."""

    task: str
    start: int
    count: int
    kind: str = "metaworld"
    rtf: float | None = None  # oxygen-eval node --world metaworld's --rtf (None: its default)
    camera_size: int = 224

    @property
    def name(self) -> str:
        return f"{self.task}-seeds{self.start}-{self.start + self.count - 1}"


Input = BagInput | SimInput | MetaWorldInput


@dataclasses.dataclass(frozen=True)
class Task:
    """One (input, configuration) pair; `id` is also its folder under the output root."""

    input: Input
    config: Configuration

    @property
    def id(self) -> str:
        return f"{self.input.name}/{self.config.name}"


@dataclasses.dataclass(frozen=True)
class Manifest:
    path: Path
    inputs: tuple[Input, ...]
    configurations: tuple[Configuration, ...]

    def tasks(self) -> list[Task]:
        """The grid, configuration-major (a worker keeps one configuration's engine);
        which inputs a configuration meets: `meets`."""
        return [Task(i, c) for c in self.configurations for i in self.inputs if meets(i, c)]


def meets(item: Input, config: Configuration) -> bool:
    """Whether the grid pairs this input with this configuration: Meta-World params with
    the metaworld inputs only, others with bags (a model's) and sim inputs."""
    if isinstance(item, MetaWorldInput) or config.metaworld:
        return isinstance(item, MetaWorldInput) and config.metaworld
    return isinstance(item, SimInput) or config.policy == "model"


# --------------------------------------------------------------------------- loading


def load_manifest(path: Path) -> Manifest:
    """Read and check a manifest; raises ManifestError (see the module docstring)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ManifestError(f"{path}: no such manifest file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ManifestError(f"{path}: not valid YAML: {error}") from None
    return parse_manifest(data, path)


def parse_manifest(data: Any, path: Path) -> Manifest:
    """Check the manifest's data (as YAML loads it); paths are relative to `path`'s folder."""
    where = _Where(path)
    top = where.mapping(data, "", {"inputs", "configurations", "sweep", "resources"})
    where.require(top, "", ("inputs", "configurations"))
    default_resources = _resources(where, top.get("resources", {}), "resources")
    configs = _configurations(where, top["configurations"], top.get("sweep", {}), default_resources)
    inputs = _inputs(where, top["inputs"])
    settings = {c.name: _settings(where, c) for c in configs}
    if any(isinstance(i, MetaWorldInput) for i in inputs):
        configs = _metaworld_configurations(where, configs, settings, inputs)
    for config in configs:
        node, names = settings[config.name]
        key = f"configurations.{config.name}"
        met = [i for i in inputs if meets(i, config)]
        if not met:
            raise where.error(
                key, f"policy {config.policy} runs sim inputs only and there are none"
            )
        try:
            for bag in (i for i in met if isinstance(i, BagInput)):
                check_bag(bag.path, names, node.node.missing_camera)
            if any(isinstance(i, SimInput) for i in met):
                check_params(names, node.node.joint_names, node.node.joint_trajectory)
        except ValueError as error:
            raise where.error(key, f"{error}") from None
    return Manifest(path, tuple(inputs), tuple(configs))


def _metaworld_configurations(
    where: _Where,
    configs: list[Configuration],
    settings: Mapping[str, tuple[Settings, Any]],
    inputs: Sequence[Input],
) -> list[Configuration]:
    """The configurations marked Meta-World's or not (metaworld_eval.is_metaworld_params).
    A Meta-World one is checked against the sim and its policies; one that would meet no
    input because its params are not Meta-World's fails with what makes them not."""
    # Here, not at the top: it loads MuJoCo, which manifests without Meta-World never need.
    from oxygen_ros.tools import metaworld_eval

    marked = []
    for config in configs:
        key = f"configurations.{config.name}"
        node, names = settings[config.name]
        config = dataclasses.replace(config, metaworld=metaworld_eval.is_metaworld_params(node))
        if config.metaworld or not any(meets(i, config) for i in inputs):
            try:
                metaworld_eval.METAWORLD.check(node, names)
            except ValueError as error:
                raise where.error(key, f"{error}") from None
        marked.append(config)
    return marked


class _Where:
    """Error messages that name the manifest and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.root = path.parent

    def error(self, key: str, problem: str) -> ManifestError:
        return ManifestError(f"{self.path}: {key or 'top level'}: {problem}")

    def mapping(self, value: Any, key: str, allowed: set[str]) -> dict:
        if not isinstance(value, dict):
            raise self.error(key, f"must be a mapping, got {type(value).__name__}")
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            prefix = f"{key}." if key else ""
            raise self.error(
                f"{prefix}{unknown[0]}", f"unknown key; allowed: {', '.join(sorted(allowed))}"
            )
        return value

    def require(self, value: dict, key: str, names: Sequence[str]) -> None:
        for name in names:
            if name not in value:
                raise self.error(key, f"missing required key {name!r}")

    def file(self, value: Any, key: str) -> Path:
        if not isinstance(value, str) or not value:
            raise self.error(key, "must be a path")
        resolved = (self.root / value).resolve()
        if not resolved.exists():
            raise self.error(key, f"{resolved} does not exist")
        return resolved


def _resources(where: _Where, value: Any, key: str, base: Resources | None = None) -> Resources:
    spec = where.mapping(value, key, {"num_cpus", "num_gpus"})
    for name, amount in spec.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise where.error(f"{key}.{name}", f"must be a number >= 0, got {amount!r}")
    resources = dataclasses.replace(base or Resources(), **spec)
    if resources.num_cpus == 0 and resources.num_gpus == 0:
        raise where.error(key, "a task needs some CPU or GPU")
    return resources


def _configurations(
    where: _Where, value: Any, sweep: Any, resources: Resources
) -> list[Configuration]:
    if not isinstance(value, dict) or not value:
        raise where.error("configurations", "must be a non-empty mapping name -> configuration")
    if not isinstance(sweep, dict):
        raise where.error("sweep", "must be a mapping parameter -> list of values")
    for name, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise where.error(f"sweep.{name}", "must be a non-empty list of values")
    configs = []
    for name, spec in value.items():
        key = f"configurations.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise where.error(key, "a name is letters, digits, '.', '_', '-' (a folder name)")
        spec = where.mapping(spec, key, {"params", "overrides", "resources", "policy"})
        where.require(spec, key, ("params",))
        params = where.file(spec["params"], f"{key}.params")
        policy = spec.get("policy", "model")
        if policy not in POLICIES:
            raise where.error(f"{key}.policy", f"must be one of {', '.join(POLICIES)}")
        overrides = spec.get("overrides", {})
        if not isinstance(overrides, dict):  # its keys are checked by the node, below
            raise where.error(f"{key}.overrides", "must be a mapping parameter -> value")
        own = _resources(where, spec.get("resources", {}), f"{key}.resources", resources)
        axes = sweep if policy == "model" else {}
        for combo in itertools.product(*(list(v) for v in axes.values())):
            swept = dict(zip(axes, combo, strict=True))
            values = {**overrides, **swept}
            suffix = "".join(f"-{k}={_slug(v)}" for k, v in swept.items())
            ros = tuple(
                (k, _ros_value(where, f"{key}.overrides.{k}", v)) for k, v in values.items()
            )
            overrides_ = _paths(where, key, ros)
            configs.append(Configuration(name + suffix, params, overrides_, own, policy))
    names = [c.name for c in configs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise where.error("configurations", f"{repeated[0]!r} names two configurations")
    return configs


def _ros_value(where: _Where, key: str, value: Any) -> str:
    """A YAML value as `-p name:=value` takes it (rcl parses it as YAML again)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)) or (
        isinstance(value, list) and all(isinstance(v, (str, bool, int, float)) for v in value)
    ):
        return json.dumps(value)  # JSON scalars and flat lists are YAML flow values
    raise where.error(key, f"must be a scalar or a flat list, got {value!r}")


def _paths(where: _Where, key: str, overrides: tuple[tuple[str, str], ...]) -> tuple:
    """Overrides naming files or folders: must exist; absolute, for workers elsewhere."""
    return tuple(
        (k, str(where.file(v, f"{key}.overrides.{k}")) if k in _PATH_PARAMETERS and v else v)
        for k, v in overrides
    )


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", value if isinstance(value, str) else json.dumps(value))


def _settings(where: _Where, config: Configuration) -> tuple[Settings, Any]:
    """The node's settings and topic names for a configuration, or the node's own error."""
    try:
        return load_settings(config.params, config.override_dict())
    except (ValueError, ParameterException) as error:
        raise where.error(f"configurations.{config.name}", f"{error}") from None


def _inputs(where: _Where, value: Any) -> list[Input]:
    spec = where.mapping(value, "inputs", {"bags", "sim", "metaworld"})
    inputs: list[Input] = [
        *_bags(where, spec.get("bags", [])),
        *_sims(where, spec.get("sim", [])),
        *_metaworlds(where, spec.get("metaworld", [])),
    ]
    if not inputs:
        raise where.error("inputs", "names no bag, no sim family and no Meta-World task")
    seen: dict[str, Input] = {}
    for item in inputs:
        if item.name in seen:
            raise where.error(
                "inputs", f"two inputs share the name {item.name!r}: {seen[item.name]} and {item}"
            )
        seen[item.name] = item
    return inputs


def _bags(where: _Where, value: Any) -> list[BagInput]:
    if not isinstance(value, list):
        raise where.error("inputs.bags", "must be a list of paths or globs")
    bags = []
    for i, entry in enumerate(value):
        key = f"inputs.bags[{i}]"
        if not isinstance(entry, str) or not entry:
            raise where.error(key, f"must be a path or a glob, got {entry!r}")
        if glob.has_magic(entry):
            matches = sorted(
                Path(p).resolve() for p in glob.glob(str(where.root / entry), recursive=True)
            )
            folders = [p for p in matches if (p / "metadata.yaml").is_file()]
            if not folders:
                raise where.error(key, f"{where.root / entry} matches no rosbag2 folder")
        else:
            folders = [where.file(entry, key)]
            if not (folders[0] / "metadata.yaml").is_file():
                raise where.error(key, f"{folders[0]} is not a rosbag2 folder (no metadata.yaml)")
        bags += [BagInput(_folder_name(where, key, p), p) for p in folders]
    return bags


def _folder_name(where: _Where, key: str, path: Path) -> str:
    if not _NAME.match(path.name):
        raise where.error(key, f"{path}: its folder name cannot name an output folder")
    return path.name


def _sims(where: _Where, value: Any) -> list[SimInput]:
    sims = []
    for key, spec in _entries(where, value, "inputs.sim", "family"):
        family = spec["family"]
        if family not in FAMILIES:
            raise where.error(
                f"{key}.family", f"must be one of {', '.join(FAMILIES)}, got {family!r}"
            )
        batch = _Batch.parse(where, key, spec, SimInput.camera_size, camera_low=8)
        sims += [SimInput(family, first, count, **batch.options) for first, count in batch.seeds]
    return sims


def _metaworlds(where: _Where, value: Any) -> list[MetaWorldInput]:
    inputs = []
    for key, spec in _entries(where, value, "inputs.metaworld", "task"):
        task = spec["task"]
        if task not in MT10_TASKS:
            raise where.error(
                f"{key}.task", f"must be an MT10 task ({', '.join(MT10_TASKS)}), got {task!r}"
            )
        batch = _Batch.parse(where, key, spec, MetaWorldInput.camera_size, 16, 1024)
        inputs += [MetaWorldInput(task, first, n, **batch.options) for first, n in batch.seeds]
    return inputs


def _entries(where: _Where, value: Any, key: str, what: str) -> list[tuple[str, dict]]:
    """A list of {what, seeds, per_task, rtf, camera_size} mappings, with their keys."""
    if not isinstance(value, list):
        raise where.error(key, f"must be a list of {{{what}, seeds, per_task}}")
    entries = []
    for i, entry in enumerate(value):
        allowed = {what, "seeds", "per_task", "rtf", "camera_size"}
        spec = where.mapping(entry, f"{key}[{i}]", allowed)
        where.require(spec, f"{key}[{i}]", (what, "seeds"))
        entries.append((f"{key}[{i}]", spec))
    return entries


@dataclasses.dataclass(frozen=True)
class _Batch:
    """A closed-loop input's seeds cut into tasks of per_task, and its run's options."""

    seeds: list[tuple[int, int]]  # (first seed, count) per task
    options: dict[str, Any]  # rtf and camera_size

    @classmethod
    def parse(
        cls,
        where: _Where,
        key: str,
        spec: dict,
        camera_size: int,
        camera_low: int,
        camera_high: int | None = None,
    ) -> _Batch:
        """The entry's seeds, per_task, rtf and camera_size (default `camera_size`, in
        [camera_low, camera_high]), checked."""
        rtf = spec.get("rtf")
        if rtf is not None and (
            isinstance(rtf, bool) or not isinstance(rtf, (int, float)) or rtf <= 0
        ):
            raise where.error(f"{key}.rtf", f"must be a number > 0, got {rtf!r}")
        size = spec.get("camera_size", camera_size)
        _integer(where, f"{key}.camera_size", size, camera_low, camera_high)
        seeds = where.mapping(spec["seeds"], f"{key}.seeds", {"start", "count"})
        where.require(seeds, f"{key}.seeds", ("count",))
        start, count = seeds.get("start", DEV.start), seeds["count"]
        per_task = spec.get("per_task", count)
        for name, number, low in (("seeds.start", start, 0), ("seeds.count", count, 1)):
            _integer(where, f"{key}.{name}", number, low)
        _integer(where, f"{key}.per_task", per_task, 1)
        return cls(
            [
                (first, min(per_task, start + count - first))
                for first in range(start, start + count, per_task)
            ],
            {"rtf": None if rtf is None else float(rtf), "camera_size": size},
        )


def _integer(where: _Where, key: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise where.error(key, f"must be an integer >= {low}, got {value!r}")
    if high is not None and value > high:
        raise where.error(key, f"must be an integer <= {high}, got {value!r}")


def describe(config: Configuration) -> Mapping[str, Any]:
    """A configuration as plain data (task markers, the aggregate report)."""
    return {
        "params": str(config.params),
        "policy": config.policy,
        "overrides": config.override_dict(),
        "resources": dataclasses.asdict(config.resources),
    }
