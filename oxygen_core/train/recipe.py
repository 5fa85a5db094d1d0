"""Training recipes: a policy's stages as data (config/train/*.yaml), run by
`oxygen-train --recipe FILE [--out DIR] [--work DIR] [--from-stage NAME]`. This module is
oxygen-train's entry point: without --recipe it hands the command line to
`cli.train_main`, one run (it sits above cli and average, whose code runs every stage).

A recipe is YAML (config/train/sim_demo.yaml is the shipped policy's):

    out: data/policy/sim_demo      # the final checkpoint (--out overrides it)
    work: out/recipe/sim_demo      # every stage's directory lies under it (--work overrides)
    defaults: {robot: sim_plan}    # oxygen-train flags every stage starts from
    stages:                        # each runs after the stages it reads, else in this order
      first: {steps: 8000, seeds: 500, lr: 2.0e-3}
      second: {init-from: first, episodes: first, steps: 4000, seeds: 500, lr: 1.0e-3}
      push_scenes: {episodes-only: true, families: [push], seeds: 800, first-seed: 6000}
      third: {init-from: first, add-episodes: [push_scenes], steps: 4000, seeds: 800}
    average: [second, third]       # the final checkpoint is their mean (oxygen-train average)

A stage's keys are oxygen-train's flags without their dashes (`first-seed: 1000`, `no-dart:
true`, `families: [push]`), written out in full. The flags that take paths take stage names
here: `init-from` the stage to continue, `episodes` the stage whose expert episodes to train
on instead of the sim's, `add-episodes` the stages whose expert episodes to add. `init-from`
may instead name a checkpoint directory outside the recipe, written as a path with a slash
(`init-from: data/policy/sim_before_contacts`): a recipe that continues a policy trained
earlier (in another world, by another recipe) starts from it; the stage's key holds a hash
of that checkpoint's files, so a changed checkpoint retrains the stage. `average` lists the
stages whose mean is the final checkpoint; one stage alone is copied (with the recipe's
provenance). The recipe places each stage's --out and --work: `<work>/<stage>/checkpoint`
and `<work>/<stage>/train`. Paths are relative to the directory oxygen-train runs in, as its
flags' are. Every stage runs through `cli.run_training`, as one oxygen-train command does,
and writes the recipe's path, the stage's name and the recipe's hash into its
train_config.json ("recipe"); the hash is of the recipe's content as loaded, so comments and
layout do not change it.

Reruns: `<work>/<stage>/stage.json` holds the stage's key, a hash of its oxygen-train
arguments and of the keys of the stages it reads. A stage whose key matches and whose
checkpoint is complete (oxygen-train writes train_config.json last) is skipped; one whose
key matches but did not finish resumes from its saved state (the same arguments train the
same batches); one whose key differs (its flags, or a stage it reads, changed) is deleted
and trained anew, and with it, through their keys, every stage that reads it. No key sees
the training code: after a change to it, `--from-stage NAME` retrains NAME and every stage
that reads it. The average always runs (seconds), replacing the checkpoint at --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import multiprocessing
import re
import shutil
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from oxygen_core.model.checkpoint import TRAIN_CONFIG
from oxygen_core.train import average, cli, prepare

RECIPE_FLAG = "--recipe"
AVERAGE = "average"  # the final checkpoint's stage name in its train_config.json
TOP_KEYS = ("out", "work", "defaults", "stages", "average")
REFERENCES = ("init-from", "episodes", "add-episodes")  # flags that name stages here
INIT_FROM = "init-from"  # may name a checkpoint directory instead: a path, with a slash
PLACED = ("out", "work")  # flags the recipe sets for each stage
STAGE_FILE = "stage.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # a stage is a folder under --work


class RecipeError(ValueError):
    """A recipe that cannot run; the one-line message names its file and the stage."""


class _FlagError(ValueError):
    """oxygen-train's parser refusing a stage's flags."""


class _StageParser(argparse.ArgumentParser):
    """oxygen-train's parser, raising instead of exiting so that the error can name the
    recipe and the stage; a flag must be spelled in full (no prefix of another)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise _FlagError(message)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One oxygen-train run of a recipe, its paths placed under the recipe's work."""

    name: str
    argv: tuple[str, ...]
    args: argparse.Namespace  # `argv` as oxygen-train parses and checks it
    reads: tuple[str, ...]  # the stages it continues or takes episodes from
    key: str  # a hash of `argv` and of the keys of `reads`


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A checked recipe: its stages in run order and the stages their mean is made of."""

    path: Path
    sha256: str
    out: Path
    work: Path
    stages: tuple[Stage, ...]
    average: tuple[str, ...]

    def provenance(self, stage: str) -> dict:
        """The "recipe" entry of a checkpoint's train_config.json: how to rebuild it."""
        return {"path": str(self.path), "stage": stage, "sha256": self.sha256}

    def readers(self, name: str) -> set[str]:
        """`name` and every stage that reads it, directly or through another."""
        found = {name}
        for stage in self.stages:  # run order: a stage comes after those it reads
            if found.intersection(stage.reads):
                found.add(stage.name)
        return found


def checkpoint_dir(work: Path, stage: str) -> Path:
    """A stage's oxygen-train --out."""
    return work / stage / "checkpoint"


def train_dir(work: Path, stage: str) -> Path:
    """A stage's oxygen-train --work: its episodes and its resumable state."""
    return work / stage / "train"


# --------------------------------------------------------------------------- loading


def load(path: Path, out: Path | None = None, work: Path | None = None) -> Recipe:
    """Read and check a recipe (`out`, `work`: the command line's, over the file's)."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as error:
        raise RecipeError(f"{path}: cannot read it: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise RecipeError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    return parse(data, path, out, work)


def parse(data: Any, path: Path, out: Path | None = None, work: Path | None = None) -> Recipe:
    """Check a recipe's data (as YAML loads it) and resolve every stage's command line."""
    where = _Where(path)
    top = where.mapping(data, "top level")
    where.known(top, "top level", TOP_KEYS)
    for key in ("out", "work", "stages", "average"):
        if key not in top:
            raise where.error("top level", f"missing key {key!r}")
    out = out or Path(where.text(top["out"], "out"))
    work = work or Path(where.text(top["work"], "work"))
    defaults = where.flags(top.get("defaults", {}), "defaults")
    if any(ref in defaults for ref in REFERENCES):
        raise where.error("defaults", f"{', '.join(REFERENCES)} name stages: set them per stage")
    specs = where.mapping(top["stages"], "stages")
    if not specs:
        raise where.error("stages", "no stages")
    specs = {name: where.stage(name, spec, defaults) for name, spec in specs.items()}
    stages: dict[str, Stage] = {}
    for name in _run_order(where, specs):
        stages[name] = _resolve(where, name, specs[name], stages, work)
    averaged = _averaged(where, top["average"], stages)
    content = json.dumps(data, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(content).hexdigest()
    return Recipe(path, digest, out, work, tuple(stages.values()), averaged)


class _Where:
    """Checks whose errors name the recipe file and the place in it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, where: str, problem: str) -> RecipeError:
        return RecipeError(f"{self.path}: {where}: {problem}")

    def mapping(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.error(where, f"must be a mapping, got {type(value).__name__}")
        return value

    def known(self, value: dict, where: str, allowed: tuple[str, ...]) -> None:
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise self.error(where, f"unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}")

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(where, f"must be a path, got {value!r}")
        return value

    def flags(self, value: Any, where: str) -> dict:
        """oxygen-train flags: names without dashes, values scalars or lists of them."""
        flags = self.mapping(value, where)
        for key, item in flags.items():
            if not isinstance(key, str) or key.startswith("-"):
                raise self.error(where, f"{key!r}: name a flag without its dashes")
            if key in PLACED:
                raise self.error(where, f"{key}: the recipe places it (<work>/<stage>/...)")
            if not (_scalar(item) or isinstance(item, list) and item and all(map(_scalar, item))):
                raise self.error(where, f"{key}: {item!r} is no flag value")
        return flags

    def stage(self, name: Any, spec: Any, defaults: dict) -> dict:
        """A stage's flags over the defaults, its references checked for form."""
        if not isinstance(name, str) or not _NAME.match(name) or name == AVERAGE:
            raise self.error(f"stage {name!r}", "a stage name is a folder name, not 'average'")
        flags = {**defaults, **self.flags({} if spec is None else spec, f"stage {name}")}
        for ref in (r for r in REFERENCES if r in flags):
            names = flags[ref] if ref == "add-episodes" else [flags[ref]]
            if not all(isinstance(n, str) for n in _listed(names)):
                raise self.error(f"stage {name}", f"{ref}: {flags[ref]!r} names no stage")
        if flags.get("episodes-only") is True and any(ref in flags for ref in REFERENCES):
            raise self.error(f"stage {name}", "an episodes-only stage reads no other stage")
        return flags


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not (isinstance(value, str) and not value)


def _references(flags: dict) -> list[tuple[str, str]]:
    """(flag, stage) for every stage a stage's flags name (a checkpoint path is none)."""
    named = [(ref, n) for ref in REFERENCES if ref in flags for n in _listed(flags[ref])]
    return [(ref, n) for ref, n in named if not (ref == INIT_FROM and _is_path(n))]


def _is_path(reference: str) -> bool:
    """Whether `init-from` names a checkpoint directory rather than a stage (whose names
    are folder names, never holding a slash)."""
    return "/" in reference


def _run_order(where: _Where, specs: dict[str, dict]) -> list[str]:
    """Every stage after the stages it reads, else in the file's order; a reference to no
    stage or a cycle is an error."""
    order: list[str] = []

    def visit(name: str, trail: list[str]) -> None:
        if name in order:
            return
        if name in trail:
            cycle = [*trail[trail.index(name) :], name]
            raise where.error(f"stage {name}", f"stages {' -> '.join(cycle)} form a cycle")
        for ref, other in _references(specs[name]):
            if other not in specs:
                raise where.error(f"stage {name}", f"{ref}: no stage {other!r}")
            visit(other, [*trail, name])
        order.append(name)

    for name in specs:
        visit(name, [])
    return order


def _resolve(where: _Where, name: str, flags: dict, done: dict[str, Stage], work: Path) -> Stage:
    """The stage's oxygen-train command line, parsed and checked as oxygen-train does."""
    at = f"stage {name}"
    argv = ["--work", str(train_dir(work, name))]
    outside: dict[str, str] = {}  # a checkpoint outside the recipe it continues: its hash
    if flags.get("episodes-only") is not True:
        argv += ["--out", str(checkpoint_dir(work, name))]
    for key, value in flags.items():
        if key == INIT_FROM:
            argv += [f"--{INIT_FROM}", _parent(where, at, value, done, work, outside)]
        elif key in ("episodes", "add-episodes"):
            argv += [f"--{key}", *(_episodes_file(where, at, key, done[n]) for n in _listed(value))]
        elif value is not False:
            argv += [f"--{key}"] if value is True else [f"--{key}", *map(str, _listed(value))]
    try:
        args = cli.train_args(argv, cli._train_parser(_StageParser))
        cli.presets(args)
        if not args.episodes_only:
            cli.train_config(args)
    except (_FlagError, ValueError, SystemExit) as error:
        raise where.error(at, f"oxygen-train: {error}") from None
    reads = tuple(dict.fromkeys(other for _, other in _references(flags)))
    reads_keys = {r: done[r].key for r in reads}
    key = json.dumps({"argv": argv, "reads": reads_keys, "outside": outside}, sort_keys=True)
    return Stage(name, tuple(argv), args, reads, hashlib.sha256(key.encode()).hexdigest())


def _parent(
    where: _Where, at: str, value: str, done: dict[str, Stage], work: Path, outside: dict
) -> str:
    """The checkpoint `init-from: value` continues: a stage's, or a directory outside the
    recipe (its hash then put into `outside`, for the stage's key)."""
    if _is_path(value):
        outside[value] = _checkpoint_hash(where, at, Path(value))
        return value
    if done[value].args.episodes_only:
        raise where.error(at, f"{INIT_FROM}: stage {value} writes episodes, no checkpoint")
    return str(checkpoint_dir(work, value))


def _checkpoint_hash(where: _Where, at: str, path: Path) -> str:
    """A hash of every file of a checkpoint outside the recipe (a few MB: milliseconds),
    which must be a complete one (oxygen-train writes its train_config.json last)."""
    if not (path / TRAIN_CONFIG).is_file():
        raise where.error(at, f"{INIT_FROM}: {path} holds no {TRAIN_CONFIG}: no checkpoint")
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _episodes_file(where: _Where, at: str, ref: str, source: Stage) -> str:
    """The expert episodes file stage `source` writes under its --work."""
    if source.args.episodes:
        raise where.error(at, f"{ref}: stage {source.name} trains on another stage's episodes")
    _, cfg = cli.presets(source.args)
    return str(prepare.expert_cache(source.args, cfg))


def _averaged(where: _Where, value: Any, stages: dict[str, Stage]) -> tuple[str, ...]:
    """The stages whose mean is the recipe's checkpoint: one trained stage or more."""
    names = value if isinstance(value, list) else []
    if not all(isinstance(n, str) for n in names) or len(set(names)) < max(1, len(names)):
        raise where.error(AVERAGE, f"must list different stages, one or more, got {value!r}")
    for name in value:
        if name not in stages:
            raise where.error(AVERAGE, f"no stage {name!r}")
        if stages[name].args.episodes_only:
            raise where.error(AVERAGE, f"stage {name} writes episodes, no checkpoint")
    return tuple(value)


# --------------------------------------------------------------------------- running


def run(recipe: Recipe, from_stage: str | None = None) -> None:
    """Every stage in order (skipped or resumed as the module docstring says), then the
    average into recipe.out."""
    if from_stage is not None and from_stage not in {s.name for s in recipe.stages}:
        raise RecipeError(f"{recipe.path}: --from-stage {from_stage}: no such stage")
    redo = recipe.readers(from_stage) if from_stage else set()
    for stage in recipe.stages:
        if _ready(recipe, stage, stage.name in redo):
            print(f"stage {stage.name}: done before (same key), skipped")
            continue
        print(f"stage {stage.name}: oxygen-train {' '.join(stage.argv)}", flush=True)
        _train_stage(stage, recipe.provenance(stage.name))
    _average(recipe)


def _train_stage(stage: Stage, provenance: dict) -> None:
    """One stage in a process of its own, so that its episodes and arrays (gigabytes at
    1000 seeds per family) go back to the system when it ends: one process training every
    stage in turn still held the third stage's when the fourth loaded its own, and ran
    out of 24 GiB. Spawned, not forked: the parent may have started JAX's threads."""
    process = multiprocessing.get_context("spawn").Process(
        target=cli.run_training, args=(stage.args, provenance), name=f"stage {stage.name}"
    )
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RecipeError(f"stage {stage.name}: oxygen-train exited with {process.exitcode}")


def _ready(recipe: Recipe, stage: Stage, redo: bool) -> bool:
    """Whether the stage's checkpoint is complete under its key; otherwise leave its
    directory ready to run (removed if another key's, its partial checkpoint removed)."""
    folder = recipe.work / stage.name
    marker = folder / STAGE_FILE
    if folder.exists() and not marker.is_file():
        raise RecipeError(
            f"{recipe.path}: stage {stage.name}: {folder} holds no {STAGE_FILE}, so no "
            "recipe wrote it; move it or pass another --work"
        )
    if folder.exists() and (redo or json.loads(marker.read_text()).get("key") != stage.key):
        shutil.rmtree(folder)
    checkpoint = checkpoint_dir(recipe.work, stage.name)
    if not stage.args.episodes_only and (checkpoint / TRAIN_CONFIG).is_file():
        return True
    shutil.rmtree(checkpoint, ignore_errors=True)  # a partial one: oxygen-train rewrites it
    folder.mkdir(parents=True, exist_ok=True)
    written = {**recipe.provenance(stage.name), "key": stage.key, "argv": list(stage.argv)}
    marker.write_text(json.dumps(written, indent=1) + "\n")
    return False


def _average(recipe: Recipe) -> None:
    """The mean of the averaged stages into recipe.out, replacing the checkpoint there
    (and only a checkpoint: a directory without train_config.json is refused)."""
    out = recipe.out
    if out.exists() and not (out / TRAIN_CONFIG).is_file():
        raise RecipeError(
            f"{recipe.path}: {AVERAGE}: {out} holds no {TRAIN_CONFIG}, so it is no "
            "checkpoint to replace; move it or pass another --out"
        )
    shutil.rmtree(out, ignore_errors=True)
    paths = [checkpoint_dir(recipe.work, name) for name in recipe.average]
    average.run(paths, out, recipe.provenance(AVERAGE))


def main(argv: list[str] | None = None) -> None:
    """oxygen-train --recipe: a recipe's stages, then their average."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        recipe = load(
            Path(args.recipe),
            Path(args.out) if args.out else None,
            Path(args.work) if args.work else None,
        )
        run(recipe, args.from_stage)
    except RecipeError as error:
        raise SystemExit(str(error)) from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"oxygen-train {RECIPE_FLAG}", description=__doc__.split("\n")[0]
    )
    p.add_argument(RECIPE_FLAG, required=True, metavar="FILE", help="a recipe (YAML)")
    p.add_argument("--out", help="the final checkpoint (default: the recipe's out)")
    p.add_argument("--work", help="the stages' directories (default: the recipe's work)")
    p.add_argument(
        "--from-stage",
        metavar="NAME",
        help="retrain this stage and every stage that reads it, even where complete",
    )
    return p
