"""`oxygen-eval node --world metaworld`: the oxygen node in closed loop on Meta-World's MT10.

    oxygen-eval node --world metaworld [--params config/metaworld.yaml]
                          [--policy model|expert|hold|random|blind]
                          [--tasks drawer-open-v3,push-v3] [--episodes 2]
                          [--first-seed 400000] [--rtf 0.5] [--camera-size 224]
                          [--set NAME=VALUE ...] [--delay-steps D] [--echo] [--out DIR]

The tabletop's oxygen-eval node for the second world, on the same run (tools.closed_loop):
the Meta-World sim node (`oxygen-sim --world metaworld`) and the real oxygen node as two
processes over topics, the node started with the params file (and `--set` overrides) on
the sim's clock, the sim told the node's topics and holding its first episode until the
node is active. With `--policy expert` no node runs: each task's scripted policy drives
through the sim's own chunk path (the reference); with `--policy hold|random|blind` the
sim sends an image-free baseline's actions the same way (oxygen_core.metaworld.baselines).

`--delay-steps D` runs in lockstep: each sim tick waits until the node has finished its
latest frame due (tools.sim.lockstep), so the node's compute takes no sim time,
and the node's rtc_delay_steps is D: every chunk takes over exactly D control steps after
its frame, whatever this machine's speed (the real-time factor then only paces nothing;
default 100). oxygen-eval sweep --world metaworld runs it over delays and hand-overs.

Seeds: every task runs seeds first_seed .. first_seed + episodes - 1 of Meta-World's own
task sampling (`MT1(task, seed)`). They follow the tabletop's protocol
(oxygen_core.sim.seeds): the default is the dev range's first (400000-400999, for
choosing anything); the test range (500000-500999) is run once per checkpoint and claim;
the report names the range.

Report (DIR, default out/metaworld/<time>/): report.json and report.md with, per task and
for all, successes k/n, the rate and its 95 % Wilson interval, the mean steps to success,
and what the sim counted of its input: steps held for want of a chunk row, actions
clipped to [-1, 1], malformed actions held, chunks rejected by reason; with the model the
node's figures over the run (action Hz, tokens/s, deadline misses, skipped frames: the
same code as oxygen-bag replay's) and its chunks and texts per episode; and the git commit,
the params, the overrides, the seed range and the command that repeats the run. The
output bag (the node's outputs and the sim's episode, narration and memory topics) and
node.log, sim.log are in DIR too.

`run_metaworld_eval(MetaWorldEvalSpec, out)` is the run as a function: the command line
calls it, and so do oxygen-eval manifest's metaworld tasks (tools.eval.tasks) in their workers,
with a ROS_DOMAIN_ID of their own.
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_core.metaworld.env import ACTION_NAMES, STATE_NAMES
from oxygen_core.metaworld.episode import CONTROL_PERIOD_NS, MetaWorld
from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_core.sim.seeds import DEV, range_name
from oxygen_core.sim.success import SuccessRate
from oxygen_ros import topics
from oxygen_ros.convert import msgtype
from oxygen_ros.params import Settings, commanded_names
from oxygen_ros.ros_args import override, ros_value
from oxygen_ros.tools.closed_loop import (
    ClosedLoopRun,
    Collector,
    World,
    node_figures,
    node_report,
    run_episodes,
    run_from_cli,
    success_entry,
)
from oxygen_ros.tools.configure import TopicNames, load_settings
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.tools.sim.metaworld import TOPICS, outcome_line
from oxygen_ros.tools.sim.record import comma_list

ROOT = Path(__file__).resolve().parents[2]  # oxygen_ros/tools/metaworld_eval.py
METAWORLD_PARAMS = ROOT / "config" / "metaworld.yaml"
POLICIES = ("model", *MetaWorld.sim_policies)
_RECORDED_KEYS = ("episode", "narration", "memory")
# An episode is at most 500 steps of 12.5 ms (every MT10 task's step limit); the slack
# covers Meta-World's reset (about 1 s) and a sim slower than its real-time factor.
_EPISODE_SIM_S = 500 * CONTROL_PERIOD_NS / NS_PER_S
_EPISODE_SLACK_S = 30.0
_INPUT_COUNTS = (
    "held_steps", "actions_clipped", "actions_malformed", "chunks_accepted", "lockstep_timeouts",
)  # fmt: skip
_LOCKSTEP_FRAME_S = 1.0  # wall seconds a lockstep frame may take, for the run's timeout
_EPISODE_KEYS = (
    "index", "task", "seed", "instruction", "success", "steps", "max_path_length",
    "duration_s", *_INPUT_COUNTS, "chunks_rejected", "narration", "memory",
)  # fmt: skip

METAWORLD = World(
    name=MetaWorld.name,
    topics={t.key: t.topic for t in TOPICS},
    outcome=lambda msg: json.loads(msg.data),  # MetaWorldEpisode.outcome's JSON
    success=lambda outcome: outcome["success"],
    line=outcome_line,
)


@dataclasses.dataclass(frozen=True)
class MetaWorldEvalSpec:
    """One oxygen-eval node --world metaworld run: the command line's options as data."""

    params: Path = METAWORLD_PARAMS
    policy: str = "model"  # or one the sim runs itself (MetaWorld.sim_policies): no node runs
    overrides: Mapping[str, object] = dataclasses.field(default_factory=dict)  # node -p's
    tasks: tuple[str, ...] = MT10_TASKS
    episodes: int = 2  # per task
    first_seed: int = DEV.start
    rtf: float | None = None  # None: 0.5 for the model, 2 for a policy the sim runs
    camera_size: int = 224
    echo: bool = False  # print the node's texts as they change and each episode's outcome
    wait_s: float = 300.0  # how long the node may take to activate
    domain_id: int | None = None  # ROS_DOMAIN_ID of the sim, the node and the recorder
    delay_steps: int | None = None  # lockstep with the node's rtc_delay_steps at this d

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
        unknown = [t for t in self.tasks if t not in MT10_TASKS]
        if unknown:
            raise ValueError(f"unknown task {unknown[0]!r}; MT10's are {', '.join(MT10_TASKS)}")
        if not self.tasks:
            raise ValueError("no task to run")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
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
            "oxygen-eval", "node", "--world", "metaworld", "--params", str(self.params),
            "--policy", self.policy,
            "--tasks", ",".join(self.tasks), "--episodes", str(self.episodes),
            "--first-seed", str(self.first_seed), "--camera-size", str(self.camera_size),
        ]  # fmt: skip
        args += ["--rtf", f"{self.rtf:g}"] if self.rtf else []
        args += ["--delay-steps", str(self.delay_steps)] if self.delay_steps is not None else []
        for name, value in self.overrides.items():
            args += ["--set", f"{name}={ros_value(value)}"]
        return shlex.join([*args, "--out", str(out)])


def is_metaworld_params(settings: Settings) -> bool:
    """Whether a params file is written for Meta-World's robot: its state is the sim's
    (the one thing no other robot's params have); check_params says what else is wrong."""
    return tuple(settings.node.joint_names) == STATE_NAMES


def check_params(settings: Settings, names: TopicNames) -> None:
    """The node's params must drive the Meta-World sim: its state, its 4 actions, one
    camera, its 80 Hz step (the sim rejects every chunk of another period); one-line
    ValueError otherwise."""
    node = settings.node
    if not is_metaworld_params(settings):
        problem = f"joint_names must be the sim's state {list(STATE_NAMES)}: {node.joint_names}"
    elif commanded_names(node, settings.robot) != ACTION_NAMES:
        problem = f"action_names must be the sim's {list(ACTION_NAMES)}: {node.action_names}"
    elif len(names.cameras) != 1:
        problem = f"the sim has one camera (corner2); camera_topics lists {list(names.cameras)}"
    elif round(node.control_period_s * NS_PER_S) != CONTROL_PERIOD_NS:
        problem = f"control_rate_hz must be the sim's 80, got {node.control_rate_hz:g}"
    else:
        return
    raise ValueError(f"not Meta-World params: {problem}")


def load_checked(params: Path, overrides: Mapping[str, object]) -> tuple[Settings, TopicNames]:
    """The node's settings and topics, checked against the sim (one-line ValueError)."""
    settings, names = load_settings(params, overrides)
    try:
        check_params(settings, names)
    except ValueError as error:
        raise ValueError(f"{params}: {error}") from None
    return settings, names


def frame_ticks(settings: Settings) -> int:
    """The node's frame period in sim ticks (one ValueError line when it is not whole)."""
    ticks = settings.node.frame_period_s * NS_PER_S / CONTROL_PERIOD_NS
    if round(ticks) < 1 or abs(ticks - round(ticks)) > 1e-6:
        raise ValueError(f"the node's frame period is {ticks:g} sim ticks: lockstep needs a whole")
    return round(ticks)


def sim_parameters(spec: MetaWorldEvalSpec, names: TopicNames, settings: Settings) -> dict:
    """The sim node's parameters: the run's episodes and the node's topics, a camera
    frame per node frame, lockstep on the node's frames with --delay-steps."""
    lockstep = {}
    if spec.delay_steps is not None:
        lockstep = {
            "lockstep_ticks": frame_ticks(settings),
            "stats_topic": names.output(topics.STATS),
        }
    return lockstep | {
        "tasks": list(spec.tasks),
        "first_seed": spec.first_seed,
        "episodes": spec.episodes,
        "policy": "external" if spec.policy == "model" else spec.policy,
        "camera_size": spec.camera_size,
        "camera_rate_hz": min(80.0, 1.0 / settings.node.frame_period_s),
        "real_time_factor": float(spec.real_time_factor),
        "wait_for_peers_s": float(spec.wait_s),
        "camera_topic": names.cameras[0],
        "state_topic": names.joint_state,
        "instruction_topic": names.instruction,
        "action_topic": names.output(topics.ACTION_CHUNK),
    }


def run_metaworld_eval(spec: MetaWorldEvalSpec, out: Path) -> dict[str, Path]:
    """Run the episodes into `out`; report.json and report.md by kind.

    Raises FileExistsError (an output bag in `out`), FileNotFoundError (no params file),
    ValueError (a spec or params that do not fit the sim), TimeoutError or RuntimeError
    (the node or the sim failed)."""
    spec.check()
    if (out / OUTPUT_BAG).exists():
        raise FileExistsError(f"{out / OUTPUT_BAG} exists: choose a new --out folder")
    settings, names = load_checked(spec.params, spec.node_overrides)
    out.mkdir(parents=True, exist_ok=True)
    model, rtf = spec.policy == "model", spec.real_time_factor
    episodes = len(spec.tasks) * spec.episodes
    episode_s = _EPISODE_SIM_S / rtf + _EPISODE_SLACK_S
    if spec.delay_steps is not None:
        episode_s += (
            _EPISODE_SIM_S
            / (frame_ticks(settings) * CONTROL_PERIOD_NS / NS_PER_S)
            * (_LOCKSTEP_FRAME_S)
        )
    record = {t.topic: msgtype(t.msg_class) for t in TOPICS if t.key in _RECORDED_KEYS}
    if model:
        record.update(names.outputs())
    collector = Collector(names, METAWORLD, echo=print if spec.echo else None)
    run = ClosedLoopRun(
        world=METAWORLD,
        world_parameters=sim_parameters(spec, names, settings),
        params=spec.params,
        overrides=spec.node_overrides,
        model=model,
        record=record,
        episodes=episodes,
        timeout_s=spec.wait_s + 60.0 + episodes * episode_s,
        quiet_s=max(1.0, 3 * settings.node.frame_period_s),
        domain_id=spec.domain_id,
    )
    print(f"{episodes} episodes ({len(spec.tasks)} tasks x {spec.episodes}), policy "
          f"{spec.policy}, real-time factor {rtf:g}; logs in {out}")  # fmt: skip
    begin = time.monotonic()
    recording = run_episodes(run, collector, out)
    report = build_report(spec, collector, out, time.monotonic() - begin)
    if model:
        starts = [(o["start_ns"], o["instruction"]) for o in report_outcomes(collector)]
        report["node"] = node_report(str(spec.params), recording, settings, names, starts, out)
        report.update(node_figures(report["node"]))
    paths = {"json": out / "report.json", "md": out / "report.md", "bag": out / OUTPUT_BAG}
    paths["json"].write_text(json.dumps(report, indent=1, allow_nan=False))
    paths["md"].write_text(markdown(report))
    return paths


# --------------------------------------------------------------------------- report


def report_outcomes(collector: Collector) -> list[dict[str, Any]]:
    """The sim's outcomes in episode order (they arrive in it; sorting makes it so)."""
    return sorted(collector.outcomes, key=lambda o: o["index"])


def build_report(
    spec: MetaWorldEvalSpec, collector: Collector, out: Path, wall_s: float
) -> dict[str, Any]:
    """report.json as plain data, less the node's figures."""
    outcomes = report_outcomes(collector)
    episodes = [episode_entry(o, collector, spec.policy == "model") for o in outcomes]
    by_task: dict[str, list[dict]] = collections.defaultdict(list)
    for e in episodes:
        by_task[e["task"]].append(e)
    groups = {**{t: by_task[t] for t in spec.tasks if t in by_task}, "all": episodes}
    sim_s = sum(o["duration_s"] for o in outcomes)
    paced_s = sum(o["wall_s"] - o["reset_wall_s"] for o in outcomes)
    return {
        "world": "metaworld",
        "policy": spec.policy,
        "params": str(spec.params),
        "overrides": dict(spec.overrides),
        "tasks": list(spec.tasks),
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
        "input_counts": {k: _input_counts(es) for k, es in groups.items()},
        "episodes": episodes,
    }


def episode_entry(o: Mapping[str, Any], collector: Collector, model: bool) -> dict[str, Any]:
    """One episode of report.json: the sim's outcome, and the node's chunks and finished
    texts stamped inside the episode's sim-time window."""
    entry = {k: o[k] for k in _EPISODE_KEYS}
    if model:
        window = range(o["start_ns"], o["end_ns"] + 1)
        chunks = [met for t, met in collector.chunks if t in window]
        texts = [(s, text) for t, s, text, done in collector.language if done and t in window]
        entry["node_chunks"], entry["late_chunks"] = len(chunks), chunks.count(False)
        entry["node_texts"] = {
            stream: [text for s, text in texts if s == stream] for stream in ("narration", "memory")
        }
    return entry


def _success(episodes: list[dict]) -> dict[str, Any]:
    return success_entry(sum(e["success"] for e in episodes), len(episodes))


def _mean_steps(episodes: list[dict]) -> float | None:
    steps = [e["steps"] for e in episodes if e["success"]]
    return round(float(np.mean(steps)), 2) if steps else None


def _input_counts(episodes: list[dict]) -> dict[str, Any]:
    """What the sim counted of its input over these episodes."""
    rejected: collections.Counter[str] = collections.Counter()
    for e in episodes:
        rejected.update(e["chunks_rejected"])
    counts: dict[str, Any] = {k: sum(e[k] for e in episodes) for k in _INPUT_COUNTS}
    return counts | {"chunks_rejected": dict(sorted(rejected.items()))}


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


def markdown(r: Mapping[str, Any]) -> str:
    """One page for people; report.json has every number."""
    first, last = r["seeds"]
    lines = [
        f"# oxygen on Meta-World: policy {r['policy']}",
        "",
        f"Params `{r['params']}`{_overrides(r)}, seeds {first}..{last} ({r['seed_range']}) "
        f"per task, {_pacing(r)}, corner2 camera {r['camera_size']} px, "
        f"wall time {r['wall_s']:.0f} s, "
        f"commit {r['commit']}. Repeat with:",
        "",
        f"    {r['command']}",
        "",
        "| task | success (rate, 95 % interval) | mean steps to success | held steps | "
        "clipped | malformed | chunks rejected |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, s in r["success"].items():
        c = r["input_counts"][task]
        lines.append(
            f"| {task} | {SuccessRate(s['successes'], s['episodes']).text()} | "
            f"{r['mean_steps_to_success'][task] or '-'} | {c['held_steps']} | "
            f"{c['actions_clipped']} | {c['actions_malformed']} | "
            f"{c['chunks_rejected'] or 'none'} |"
        )
    if "node" in r:
        lines += [
            "",
            f"Node: {r['frames']} chunks, action {r['action_hz']:.1f} Hz, "
            f"{r['lang_tps']:.1f} tok/s, {r['deadline_misses']} deadline misses, "
            f"skipped frames {_nonzero(r['skipped_frames']) or 'none'}.",
        ]
    lines += ["", "## Episodes", "", "| # | task | seed | success | steps | held steps |"]
    lines.append("|---|---|---|---|---|---|")
    for e in r["episodes"]:
        lines.append(
            f"| {e['index']} | {e['task']} | {e['seed']} | {'yes' if e['success'] else 'no'} "
            f"| {e['steps']} | {e['held_steps']} |"
        )
    return "\n".join([*lines, ""])


def _pacing(r: Mapping[str, Any]) -> str:
    """How sim time ran: in lockstep at a delay, or at a real-time factor."""
    if r["delay_steps"] is not None:
        timeouts = r["input_counts"]["all"]["lockstep_timeouts"]
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-eval node --world metaworld", description=__doc__.split("\n\n")[0].strip()
    )
    parser.add_argument("--params", type=Path, default=METAWORLD_PARAMS, help="node params")
    parser.add_argument("--policy", choices=POLICIES, default="model")
    parser.add_argument(
        "--tasks",
        type=comma_list,
        default=MT10_TASKS,
        help="comma-separated (default: MT10)",
    )
    parser.add_argument("--episodes", type=int, default=2, help="episodes per task")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=DEV.start,
        help="first seed of every task (default: the dev range's first, oxygen_core.sim.seeds)",
    )
    parser.add_argument(
        "--rtf", type=float, default=None, help="real-time factor (default 0.5; no model: 2)"
    )
    parser.add_argument("--camera-size", type=int, default=224, help="corner2 image size (px)")
    parser.add_argument(
        "--set",
        type=override,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a node parameter after the params file (YAML value), e.g. engine_mode=isolated",
    )
    parser.add_argument(
        "--delay-steps",
        type=int,
        help="lockstep: every chunk takes over exactly D control steps after its frame",
    )
    parser.add_argument(
        "--echo", action="store_true", help="print texts as they change and each outcome"
    )
    parser.add_argument("--out", type=Path, help="output folder (default out/metaworld/<time>)")
    parser.add_argument(
        "--wait-s", type=float, default=300.0, help="how long the node may take to activate"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-eval node --world metaworld`."""
    args = _parser().parse_args(argv)
    spec = MetaWorldEvalSpec(
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
    run = functools.partial(run_metaworld_eval, spec)
    default_root = ROOT / "out" / "metaworld"
    return run_from_cli("oxygen-eval node --world metaworld", run, args.out, default_root, headline)


if __name__ == "__main__":
    raise SystemExit(main())
