"""`oxygen-eval node --world metaworld|aloha`: a task world in closed loop through the node.

The run both task worlds share (Meta-World's MT10, gym-aloha's two tasks; the tabletop,
with its families and message outcome, is tools.sim.evaluate): the world's sim node
(`oxygen-sim --world W`) and the real oxygen node as two processes over topics
(tools.closed_loop), the node started with the params file (and `--set` overrides) on the
sim's clock, the sim told the node's topics and holding its first episode until the node
is active. With `--policy expert` no node runs: each task's scripted policy drives through
the sim's own command path (the reference); with `--policy hold|random|blind` the sim
sends an image-free baseline's commands the same way.

`--delay-steps D` runs in lockstep: each sim tick waits until the node has finished its
latest frame due (tools.sim.lockstep), so the node's compute takes no sim time, and the
node's rtc_delay_steps is D: every chunk takes over exactly D control steps after its
frame, whatever this machine's speed (default real-time factor 100: the frames pace the
run). oxygen-eval sweep --world metaworld runs it over delays and hand-overs.

Seeds: every task runs seeds first_seed .. first_seed + episodes - 1 of the world's own
seeding, after the tabletop's protocol (oxygen_core.sim.seeds): the default is the dev
range's first (400000-400999, for choosing anything); the test range (500000-500999) is
run once per checkpoint and claim; the report names the range.

Report (DIR, default out/<world>/<time>/): report.json and report.md with, per task and
for all, successes k/n, the rate and its 95 % Wilson interval, the mean steps to success,
and what the sim counted of its input (the world's `counts`, and commands rejected by
reason); with the model the node's figures over the run (action Hz, tokens/s, deadline
misses, skipped frames: the same code as oxygen-bag replay's) and its chunks and texts
per episode; and the git commit, the params, the overrides, the seed range and the
command that repeats the run. The output bag (the node's outputs and the sim's episode,
narration and memory topics) and node.log, sim.log are in DIR too.

`run_task_eval(TaskEvalSpec, out)` is the run as a function: the command line calls it,
and so do oxygen-eval manifest's metaworld tasks (tools.eval.tasks) in their workers and
oxygen-eval sweep --world metaworld's cells.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import json
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.sim.seeds import DEV, range_name
from oxygen_core.sim.success import SuccessRate
from oxygen_ros import topics
from oxygen_ros.convert import msgtype
from oxygen_ros.params import Settings
from oxygen_ros.ros_args import override, ros_texts, ros_value
from oxygen_ros.tools.closed_loop import (
    ClosedLoopRun,
    Collector,
    World,
    node_figures,
    node_report,
    policy_switch,
    run_episodes,
    run_from_cli,
    success_entry,
)
from oxygen_ros.tools.configure import TopicNames, load_settings
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.tools.sim.record import comma_list
from oxygen_ros.tools.sim_host import SimTopic

ROOT = Path(__file__).resolve().parents[2]  # oxygen_ros/tools/task_eval.py
# The world's topics recorded beside the node's outputs: its outcomes and lines, and the
# joint states of a world whose controllers take joint trajectories (ALOHA), from which
# `oxygen-bag limit-check --controller jtc` takes each trajectory over as the controller does.
_RECORDED_KEYS = ("episode", "narration", "memory", "joint_states")
# The slack on an episode's sim time: the world's reset (Meta-World's about 1 s) and a sim
# slower than its real-time factor.
_EPISODE_SLACK_S = 30.0
_LOCKSTEP_FRAME_S = 1.0  # wall seconds a lockstep frame may take, for the run's timeout
_EPISODE_KEYS = ("index", "task", "seed", "instruction", "success", "steps", "duration_s")
_LOCKSTEP = "lockstep_timeouts"  # every world's outcome counts the frames lockstep gave up on
_TEXT_STREAMS = ("narration", "memory")


@dataclasses.dataclass(frozen=True)
class TaskWorld:
    """What differs between task worlds as an evaluation runs them."""

    world: World  # its sim node and how its JSON outcomes read
    title: str  # for people: "Meta-World"
    sim_topics: tuple[SimTopic, ...]  # its binding's topic table
    params: Path  # the default node params file
    tasks: tuple[str, ...]  # its tasks, the default: all
    sim_policies: tuple[str, ...]  # what the sim runs itself (expert, baselines)
    period_ns: int  # one env step, one control step
    max_steps: int  # an episode's most steps (its run's timeout)
    cameras: str  # the report's word for what it renders: "corner2 camera"
    check_params: Callable[[Settings, TopicNames], None]  # why not its params: ValueError
    topic_parameters: Callable[[TopicNames], dict[str, Any]]  # the sim's topics: the node's
    episode_keys: tuple[str, ...]  # what else an episode's entry keeps of its outcome
    counts: tuple[str, ...]  # what the sim counts of its input, summed per task
    rejected: str  # the outcome's dict of commands rejected, by reason

    @property
    def name(self) -> str:
        return self.world.name

    @property
    def policies(self) -> tuple[str, ...]:
        return ("model", *self.sim_policies)

    @property
    def episode_s(self) -> float:
        """An episode's longest sim time."""
        return self.max_steps * self.period_ns / NS_PER_S

    @property
    def control_hz(self) -> float:
        return NS_PER_S / self.period_ns

    def check(self, settings: Settings, names: TopicNames) -> None:
        """The node's params must drive this world's sim: what `check_params` asks, then
        its control period (the sim rejects every chunk of another); one-line ValueError
        otherwise."""
        try:
            self.check_params(settings, names)
            if round(settings.node.control_period_s * NS_PER_S) != self.period_ns:
                got = settings.node.control_rate_hz
                raise ValueError(
                    f"control_rate_hz must be the sim's {self.control_hz:g}, got {got:g}"
                )
        except ValueError as error:
            raise ValueError(f"not {self.title} params: {error}") from None


@dataclasses.dataclass(frozen=True)
class TaskEvalSpec:
    """One oxygen-eval node --world W run: the command line's options as data."""

    world: TaskWorld
    params: Path | None = None  # None: the world's
    policy: str = "model"  # or one the sim runs itself (world.sim_policies): no node runs
    overrides: Mapping[str, object] = dataclasses.field(default_factory=dict)  # node -p's
    tasks: tuple[str, ...] | None = None  # None: the world's all
    episodes: int = 2  # per task
    first_seed: int = DEV.start
    rtf: float | None = None  # None: 0.5 for the model, 2 for a policy the sim runs
    camera_size: int = 224
    echo: bool = False  # print the node's texts as they change and each episode's outcome
    wait_s: float = 300.0  # how long the node may take to activate
    domain_id: int | None = None  # ROS_DOMAIN_ID of the sim, the node and the recorder
    delay_steps: int | None = None  # lockstep with the node's rtc_delay_steps at this d

    @property
    def params_file(self) -> Path:
        return self.world.params if self.params is None else self.params

    @property
    def task_list(self) -> tuple[str, ...]:
        return self.world.tasks if self.tasks is None else self.tasks

    @property
    def real_time_factor(self) -> float:
        if self.rtf:
            return self.rtf
        if self.delay_steps is not None:
            return 100.0  # lockstep: the node's frames pace the run
        return 0.5 if self.policy == "model" else 2.0

    @property
    def node_overrides(self) -> dict[str, object]:
        """The node's -p's: --set's, and with --delay-steps its rtc_delay_steps."""
        delay = {} if self.delay_steps is None else {"rtc_delay_steps": self.delay_steps}
        return {**self.overrides, **delay}

    @property
    def seeds(self) -> range:
        return range(self.first_seed, self.first_seed + self.episodes)

    def check(self) -> None:
        """Everything but the params file, in one-line ValueErrors, before anything runs."""
        world = self.world
        unknown = [t for t in self.task_list if t not in world.tasks]
        if unknown:
            known = ", ".join(world.tasks)
            raise ValueError(f"unknown task {unknown[0]!r}; {world.title}'s are {known}")
        if not self.task_list:
            raise ValueError("no task to run")
        if self.policy not in world.policies:
            choices = ", ".join(world.policies)
            raise ValueError(f"policy must be one of {choices}, got {self.policy!r}")
        if self.episodes < 1 or self.first_seed < 0 or self.real_time_factor <= 0:
            raise ValueError("--episodes must be >= 1, --first-seed >= 0 and --rtf > 0")
        if not 16 <= self.camera_size <= 1024:
            raise ValueError(f"--camera-size must be in [16, 1024], got {self.camera_size}")
        if self.delay_steps is not None:
            if self.policy != "model" or self.delay_steps < 0:
                raise ValueError("--delay-steps is a d >= 0 for the model's node (lockstep)")
            if "rtc_delay_steps" in self.overrides:
                raise ValueError("--delay-steps sets rtc_delay_steps: leave it out of --set")

    def command(self, out: Path) -> str:
        """The command line that repeats this run into `out`."""
        args = [
            "oxygen-eval", "node", "--world", self.world.name, "--params", str(self.params_file),
            "--policy", self.policy,
            "--tasks", ",".join(self.task_list), "--episodes", str(self.episodes),
            "--first-seed", str(self.first_seed), "--camera-size", str(self.camera_size),
        ]  # fmt: skip
        args += ["--rtf", f"{self.rtf:g}"] if self.rtf else []
        args += ["--delay-steps", str(self.delay_steps)] if self.delay_steps is not None else []
        for name, value in self.overrides.items():
            args += ["--set", f"{name}={ros_value(value)}"]
        return shlex.join([*args, "--out", str(out)])


def load_checked(
    world: TaskWorld, params: Path, overrides: Mapping[str, object]
) -> tuple[Settings, TopicNames]:
    """The node's settings and topics, checked against the world (one-line ValueError)."""
    settings, names = load_settings(params, ros_texts(overrides))
    try:
        world.check(settings, names)
    except ValueError as error:
        raise ValueError(f"{params}: {error}") from None
    return settings, names


def frame_ticks(world: TaskWorld, settings: Settings) -> int:
    """The node's frame period in sim ticks (one ValueError line when it is not whole)."""
    ticks = settings.node.frame_period_s * NS_PER_S / world.period_ns
    if round(ticks) < 1 or abs(ticks - round(ticks)) > 1e-6:
        raise ValueError(f"the node's frame period is {ticks:g} sim ticks: lockstep needs a whole")
    return round(ticks)


def sim_parameters(spec: TaskEvalSpec, names: TopicNames, settings: Settings) -> dict:
    """The sim node's parameters: the run's episodes and the node's topics, a camera
    frame per node frame, lockstep on the node's frames with --delay-steps, the node
    switched off around each reset."""
    world = spec.world
    lockstep = {}
    if spec.delay_steps is not None:
        lockstep = {
            "lockstep_ticks": frame_ticks(world, settings),
            "stats_topic": names.output(topics.STATS),
        }
    return (
        lockstep
        | world.topic_parameters(names)
        | {
            "tasks": list(spec.task_list),
            "first_seed": spec.first_seed,
            "episodes": spec.episodes,
            "policy": "external" if spec.policy == "model" else spec.policy,
            "camera_size": spec.camera_size,
            "camera_rate_hz": min(world.control_hz, 1.0 / settings.node.frame_period_s),
            "real_time_factor": float(spec.real_time_factor),
            "wait_for_peers_s": float(spec.wait_s),
            "instruction_topic": names.instruction,
        }
        | policy_switch(names, spec.policy == "model")
    )


def run_task_eval(spec: TaskEvalSpec, out: Path) -> dict[str, Path]:
    """Run the episodes into `out`; report.json and report.md by kind.

    Raises FileExistsError (an output bag in `out`), FileNotFoundError (no params file),
    ValueError (a spec or params that do not fit the sim), TimeoutError or RuntimeError
    (the node or the sim failed)."""
    spec.check()
    if (out / OUTPUT_BAG).exists():
        raise FileExistsError(f"{out / OUTPUT_BAG} exists: choose a new --out folder")
    world = spec.world
    settings, names = load_checked(world, spec.params_file, spec.node_overrides)
    out.mkdir(parents=True, exist_ok=True)
    model, rtf = spec.policy == "model", spec.real_time_factor
    episodes = len(spec.task_list) * spec.episodes
    episode_s = world.episode_s / rtf + _EPISODE_SLACK_S
    if spec.delay_steps is not None:
        frames = world.max_steps / frame_ticks(world, settings)
        episode_s += frames * _LOCKSTEP_FRAME_S
    record = {t.topic: msgtype(t.msg_class) for t in world.sim_topics if t.key in _RECORDED_KEYS}
    if model:
        record.update(names.outputs())
    collector = Collector(names, world.world, echo=print if spec.echo else None)
    run = ClosedLoopRun(
        world=world.world,
        world_parameters=sim_parameters(spec, names, settings),
        params=spec.params_file,
        overrides=spec.node_overrides,
        model=model,
        record=record,
        episodes=episodes,
        timeout_s=spec.wait_s + 60.0 + episodes * episode_s,
        quiet_s=max(1.0, 3 * settings.node.frame_period_s),
        domain_id=spec.domain_id,
    )
    print(f"{episodes} episodes ({len(spec.task_list)} tasks x {spec.episodes}), policy "
          f"{spec.policy}, real-time factor {rtf:g}; logs in {out}")  # fmt: skip
    begin = time.monotonic()
    recording = run_episodes(run, collector, out)
    report = build_report(spec, collector, out, time.monotonic() - begin)
    if model:
        starts = [(o["start_ns"], o["instruction"]) for o in report_outcomes(collector)]
        report["node"] = node_report(str(spec.params_file), recording, settings, names, starts, out)
        report.update(node_figures(report["node"]))
    paths = {"json": out / "report.json", "md": out / "report.md", "bag": out / OUTPUT_BAG}
    paths["json"].write_text(json.dumps(report, indent=1, allow_nan=False))
    paths["md"].write_text(markdown(report, world))
    return paths


# --------------------------------------------------------------------------- report


def report_outcomes(collector: Collector) -> list[dict[str, Any]]:
    """The sim's outcomes in episode order (they arrive in it; sorting makes it so)."""
    return sorted(collector.outcomes, key=lambda o: o["index"])


def build_report(
    spec: TaskEvalSpec, collector: Collector, out: Path, wall_s: float
) -> dict[str, Any]:
    """report.json as plain data, less the node's figures."""
    world = spec.world
    outcomes = report_outcomes(collector)
    episodes = [episode_entry(world, o, collector, spec.policy == "model") for o in outcomes]
    by_task: dict[str, list[dict]] = collections.defaultdict(list)
    for e in episodes:
        by_task[e["task"]].append(e)
    groups = {**{t: by_task[t] for t in spec.task_list if t in by_task}, "all": episodes}
    sim_s = sum(o["duration_s"] for o in outcomes)
    paced_s = sum(o["wall_s"] - o["reset_wall_s"] for o in outcomes)
    return {
        "world": world.name,
        "policy": spec.policy,
        "params": str(spec.params_file),
        "overrides": dict(spec.overrides),
        "tasks": list(spec.task_list),
        "seeds": [spec.seeds[0], spec.seeds[-1]],
        "seed_range": range_name(spec.seeds),
        "episodes_per_task": spec.episodes,
        "rtf": spec.real_time_factor,
        "delay_steps": spec.delay_steps,  # None: free running, the machine's own latency
        "achieved_rtf": round(sim_s / paced_s, 3) if paced_s > 0 else None,
        "camera_size": spec.camera_size,
        "commit": git_commit(),
        "command": spec.command(out),
        "wall_s": round(wall_s, 3),
        "episodes_run": len(episodes),
        "success": {k: _success(es) for k, es in groups.items()},
        "mean_steps_to_success": {k: _mean_steps(es) for k, es in groups.items()},
        "input_counts": {k: _input_counts(world, es) for k, es in groups.items()},
        "episodes": episodes,
    }


def episode_entry(
    world: TaskWorld, o: Mapping[str, Any], collector: Collector, model: bool
) -> dict[str, Any]:
    """One episode of report.json: the sim's outcome, and the node's chunks and finished
    texts stamped inside the episode's sim-time window."""
    keys = (*_EPISODE_KEYS, *world.episode_keys, *world.counts, _LOCKSTEP, world.rejected)
    keys += _TEXT_STREAMS
    entry = {k: o[k] for k in keys}
    if model:
        window = range(o["start_ns"], o["end_ns"] + 1)
        chunks = [met for t, met in collector.chunks if t in window]
        texts = [(s, text) for t, s, text, done in collector.language if done and t in window]
        entry["node_chunks"], entry["late_chunks"] = len(chunks), chunks.count(False)
        entry["node_texts"] = {
            stream: [text for s, text in texts if s == stream] for stream in _TEXT_STREAMS
        }
    return entry


def _success(episodes: list[dict]) -> dict[str, Any]:
    return success_entry(sum(e["success"] for e in episodes), len(episodes))


def _mean_steps(episodes: list[dict]) -> float | None:
    steps = [e["steps"] for e in episodes if e["success"]]
    return round(float(np.mean(steps)), 2) if steps else None


def _input_counts(world: TaskWorld, episodes: list[dict]) -> dict[str, Any]:
    """What the sim counted of its input over these episodes."""
    rejected: collections.Counter[str] = collections.Counter()
    for e in episodes:
        rejected.update(e[world.rejected])
    counts: dict[str, Any] = {k: sum(e[k] for e in episodes) for k in (*world.counts, _LOCKSTEP)}
    return counts | {world.rejected: dict(sorted(rejected.items()))}


def git_commit() -> str | None:
    """The checkout's commit, "-dirty" when tracked files differ from it (None without
    git): which code a figure was measured with."""
    try:
        head, status = (
            subprocess.run(
                ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
            ).stdout.strip()
            for args in (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=no"])
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if status else "")


def markdown(r: Mapping[str, Any], world: TaskWorld) -> str:
    """One page for people; report.json has every number."""
    first, last = r["seeds"]
    counts = [*world.counts, world.rejected]
    lines = [
        f"# oxygen on {world.title}: policy {r['policy']}",
        "",
        f"Params `{r['params']}`{_overrides(r)}, seeds {first}..{last} ({r['seed_range']}) "
        f"per task, {_pacing(r)}, {world.cameras} {r['camera_size']} px, "
        f"wall time {r['wall_s']:.0f} s, "
        f"commit {r['commit']}. Repeat with:",
        "",
        f"    {r['command']}",
        "",
        "| task | success (rate, 95 % interval) | mean steps to success | "
        + " | ".join(c.replace("_", " ") for c in counts)
        + " |",
        "|---|---|---|" + "---|" * len(counts),
    ]
    for task, s in r["success"].items():
        c = r["input_counts"][task]
        lines.append(
            f"| {task} | {SuccessRate(s['successes'], s['episodes']).text()} | "
            f"{r['mean_steps_to_success'][task] or '-'} | "
            + " | ".join(str(c[k] if c[k] != {} else "none") for k in counts)
            + " |"
        )
    if "node" in r:
        lines += [
            "",
            f"Node: {r['frames']} chunks, action {r['action_hz']:.1f} Hz, "
            f"{r['lang_tps']:.1f} tok/s, {r['deadline_misses']} deadline misses, "
            f"skipped frames {_nonzero(r['skipped_frames']) or 'none'}.",
        ]
    lines += [
        "",
        "## Episodes",
        "",
        "| # | task | seed | success | steps |",
        "|---|---|---|---|---|",
    ]
    for e in r["episodes"]:
        success = "yes" if e["success"] else "no"
        lines.append(f"| {e['index']} | {e['task']} | {e['seed']} | {success} | {e['steps']} |")
    return "\n".join([*lines, ""])


def _pacing(r: Mapping[str, Any]) -> str:
    """How sim time ran: in lockstep at a delay, or at a real-time factor."""
    if r["delay_steps"] is not None:
        timeouts = r["input_counts"]["all"][_LOCKSTEP]
        d = r["delay_steps"]
        return f"lockstep, every chunk {d} steps after its frame ({timeouts} frames timed out)"
    return f"real-time factor {r['rtf']:g} (achieved {r['achieved_rtf']}, resets left out)"


def _nonzero(counts: Mapping[str, int]) -> dict[str, int]:
    return {k: n for k, n in counts.items() if n}


def _overrides(r: Mapping[str, Any]) -> str:
    return f" with {r['overrides']}" if r["overrides"] else ""


def headline(paths: Mapping[str, Path]) -> str:
    """The run in a few lines for the terminal."""
    r = json.loads(paths["json"].read_text())
    rates = ", ".join(
        f"{task} {SuccessRate(s['successes'], s['episodes']).text()}"
        for task, s in r["success"].items()
    )
    lines = [f"success per task on {r['seed_range']} seeds: {rates}"]
    if "node" in r:
        lines.append(
            f"node: {r['frames']} chunks, action {r['action_hz']:.1f} Hz, "
            f"{r['deadline_misses']} deadline misses"
        )
    return "\n".join([*lines, *(f"{kind}: {path}" for kind, path in paths.items())])


# --------------------------------------------------------------------------- command line


def parser(world: TaskWorld, description: str) -> argparse.ArgumentParser:
    """The world's `oxygen-eval node --world W` options."""
    p = argparse.ArgumentParser(prog=prog(world), description=description)
    p.add_argument("--params", type=Path, default=world.params, help="node params")
    p.add_argument("--policy", choices=world.policies, default="model")
    p.add_argument(
        "--tasks", type=comma_list, default=world.tasks, help="comma-separated (default: all)"
    )
    p.add_argument("--episodes", type=int, default=2, help="episodes per task")
    p.add_argument(
        "--first-seed",
        type=int,
        default=DEV.start,
        help="first seed of every task (default: the dev range's first, oxygen_core.sim.seeds)",
    )
    p.add_argument(
        "--rtf", type=float, default=None, help="real-time factor (default 0.5; no model: 2)"
    )
    p.add_argument("--camera-size", type=int, default=224, help="camera image width (px)")
    p.add_argument(
        "--set",
        type=override,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a node parameter after the params file (YAML value), e.g. engine_mode=isolated",
    )
    p.add_argument(
        "--delay-steps",
        type=int,
        help="lockstep: every chunk takes over exactly D control steps after its frame",
    )
    p.add_argument("--echo", action="store_true", help="print texts as they change and outcomes")
    p.add_argument("--out", type=Path, help=f"output folder (default out/{world.name}/<time>)")
    p.add_argument(
        "--wait-s", type=float, default=300.0, help="how long the node may take to activate"
    )
    return p


def prog(world: TaskWorld) -> str:
    return f"oxygen-eval node --world {world.name}"


def main_for(world: TaskWorld, description: str, argv: Sequence[str] | None) -> int:
    """A world's console verb: its options into a spec, the run, its headline."""
    args = parser(world, description).parse_args(argv)
    spec = TaskEvalSpec(
        world=world,
        params=args.params,
        policy=args.policy,
        overrides=dict(args.set),
        tasks=args.tasks,
        episodes=args.episodes,
        first_seed=args.first_seed,
        rtf=args.rtf,
        camera_size=args.camera_size,
        echo=args.echo,
        wait_s=args.wait_s,
        delay_steps=args.delay_steps,
    )
    run = functools.partial(run_task_eval, spec)
    return run_from_cli(prog(world), run, args.out, ROOT / "out" / world.name, headline)
