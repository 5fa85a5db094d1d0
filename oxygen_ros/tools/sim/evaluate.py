"""`oxygen-eval node`: closed-loop evaluation of the oxygen node on the simulated tabletop.

    oxygen-eval node [--params config/sim.yaml] [--policy model|expert|hold|random|blind|touch]
                    [--mode oxygen]
                    [--families pick,put,push] [--episodes 2] [--first-seed 400000]
                    [--rtf 0.5] [--camera-size 224] [--camera-rate 10]
                    [--command-delay-steps 0] [--out DIR]

Two processes, as on a robot: the sim node (`oxygen-sim`, oxygen_ros.tools.sim.node) owns
sim time and publishes cameras, joint states, /clock and each episode's instruction; the
real oxygen node is started as `oxygen-demo` starts it (`demo.start_node`: the params file,
use_sim_time, autostart, and `engine_mode` from --mode), and its ~/joint_trajectory is
what the sim executes. The sim holds the first episode until the node is active. With
`--policy expert` no node runs: the scripted expert drives through the same sim node and
executor, the reference the model is measured against. `--policy hold|random|blind|touch` runs
a baseline the same way (`oxygen_core.sim.baselines`, its chunks at the params file's
execute and action horizons): the floors the model's figure is read against.

This process records, on sim time, the node's outputs, the sim's /sim topics and its joint
states into DIR/output_bag (tools.closed_loop, the run both worlds share; the joint states
let `oxygen-bag limit-check` measure start jumps) and keeps base camera frames of
the first episode of each family for the animation. At the end it writes (tools.sim.report)
report.json, report.md, episodes.png, timeline.png (the node's, as oxygen-bag replay draws
it) and episodes.gif (tools.sim.animation). The node's action Hz and tokens/s are
tools.report's, computed over the whole run.

`run_sim_eval(SimEvalSpec, out)` is the whole run as a function: the command line is one
caller, oxygen-eval manifest's sim tasks (tools.eval.tasks) the other, so a task is exactly this
run. A spec may set any node parameter (overrides, as `-p name:=value`; --mode is
engine_mode) and a ROS_DOMAIN_ID for the sim, the node and this process's recorder, so
that concurrent runs on one machine do not see each other's topics.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from oxygen_core.clock import NS_PER_S
from oxygen_core.config import model_preset
from oxygen_core.sim.arm import JOINT_NAMES
from oxygen_core.sim.episode import Tabletop
from oxygen_core.sim.seeds import DEV
from oxygen_core.sim.tasks import FAMILIES, TIME_LIMITS
from oxygen_ros import topics
from oxygen_ros.convert import msgtype
from oxygen_ros.params import Settings
from oxygen_ros.ros_args import ros_texts
from oxygen_ros.tools.closed_loop import (
    ClosedLoopRun,
    Collector,
    World,
    policy_switch,
    run_episodes,
    run_from_cli,
)
from oxygen_ros.tools.configure import TopicNames, load_settings
from oxygen_ros.tools.replay_job import OUTPUT_BAG
from oxygen_ros.tools.sim import report as sim_report
from oxygen_ros.tools.sim.loop import episode_order
from oxygen_ros.tools.sim.messages import SIM_TOPICS
from oxygen_ros.tools.sim.record import names_arg

ROOT = Path(__file__).resolve().parents[3]  # oxygen_ros/tools/sim/evaluate.py
SIM_PARAMS = ROOT / "config" / "sim.yaml"
_RECORDED_SIM_KEYS = ("episode", "narration", "memory", "joint_states")
POLICIES = ("model", *Tabletop.sim_policies)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oxygen-eval node", description=__doc__.split("\n\n")[0].strip()
    )
    parser.add_argument("--params", type=Path, default=SIM_PARAMS, help="node params YAML")
    parser.add_argument("--policy", choices=POLICIES, default="model")
    parser.add_argument("--mode", choices=("oxygen", "shared", "isolated"), default="oxygen")
    parser.add_argument("--families", type=names_arg(FAMILIES, "families"), default=FAMILIES)
    parser.add_argument("--episodes", type=int, default=2, help="episodes per family")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=DEV.start,
        help="default: the dev range's first (oxygen_core.sim.seeds)",
    )
    parser.add_argument(
        "--rtf", type=float, default=None, help="real-time factor (default 0.5; no model: 2)"
    )
    parser.add_argument("--camera-size", type=int, default=224)
    parser.add_argument("--camera-rate", type=float, default=10.0, help="Hz")
    parser.add_argument(
        "--command-delay-steps",
        type=int,
        default=0,
        help="control periods the sim holds each trajectory before executing it (latency)",
    )
    parser.add_argument("--gif-fps", type=float, default=5.0, help="animation frames/s")
    parser.add_argument(
        "--echo", action="store_true", help="print texts as they change and each outcome"
    )
    parser.add_argument("--out", type=Path, help="output folder (default out/sim/<time>)")
    parser.add_argument(
        "--wait-s", type=float, default=300.0, help="how long the node may take to activate"
    )
    return parser


def outcome_line(msg: Any) -> str:
    """One line for an EpisodeOutcome: which task, and how it ended."""
    how = (
        f"succeeded in {msg.duration_s:.1f} s"
        if msg.success
        else f"failed (time limit {msg.time_limit_s:.0f} s)"
    )
    which = f"episode {msg.index + 1}/{msg.episodes} {msg.family} seed {msg.seed}"
    return f"{which}: {msg.instruction!r} {how}"


TABLETOP = World(
    name=Tabletop.name,
    topics={t.key: t.topic for t in SIM_TOPICS},
    outcome=lambda msg: msg,  # the EpisodeOutcome itself (sim.messages.outcome_of reads it)
    success=lambda msg: msg.success,
    line=outcome_line,
    index=lambda msg: msg.index,
)


@dataclasses.dataclass(frozen=True)
class SimEvalSpec:
    """One oxygen-eval node run: the command line's options as data (also oxygen-eval manifest's
    sim tasks, which call `run_sim_eval` in their worker process)."""

    params: Path = SIM_PARAMS
    policy: str = "model"  # or one the sim runs itself (Tabletop.sim_policies): no node runs
    overrides: Mapping[str, object] = dataclasses.field(default_factory=dict)  # node -p's
    families: tuple[str, ...] = FAMILIES
    episodes: int = 2  # per family
    first_seed: int = DEV.start  # the dev range's (oxygen_core.sim.seeds)
    rtf: float | None = None  # None: 0.5 for the model, 2 for a policy the sim runs
    camera_size: int = 224
    camera_rate: float = 10.0
    command_delay_steps: int = 0  # the sim's trajectory latency in control periods
    gif_fps: float = 5.0
    echo: bool = False  # print the node's texts as they change and each episode's outcome
    wait_s: float = 300.0  # how long the node may take to activate
    domain_id: int | None = None  # ROS_DOMAIN_ID of the sim, the node and the recorder

    @property
    def real_time_factor(self) -> float:
        return self.rtf or (0.5 if self.policy == "model" else 2.0)


def sim_parameters(spec: SimEvalSpec, names: TopicNames, settings: Settings) -> dict:
    """The sim node's parameters: the node's topics, control rate and horizons (a
    baseline's chunks), the run's episodes."""
    cameras = dict(zip(("base_camera_topic", "wrist_camera_topic"), names.cameras, strict=False))
    node = settings.node
    return {
        "families": list(spec.families),
        "first_seed": spec.first_seed,
        "episodes": spec.episodes,
        "policy": "external" if spec.policy == "model" else spec.policy,
        "baseline_execute_steps": node.execute_horizon,
        "baseline_horizon": node.action_horizon or model_preset(node.preset).action_horizon,
        "control_rate_hz": float(node.control_rate_hz),
        "real_time_factor": float(spec.real_time_factor),
        "camera_size": spec.camera_size,
        "camera_rate_hz": float(spec.camera_rate),
        "command_delay_steps": spec.command_delay_steps,
        "joint_state_topic": names.joint_state,
        "instruction_topic": names.instruction,
        "trajectory_topic": names.output(topics.JOINT_TRAJECTORY) or "",
        "wait_for_peers_s": float(spec.wait_s),
        **cameras,
        **policy_switch(names, spec.policy == "model"),
    }


def check_params(names: TopicNames, joint_names: Sequence[str], trajectory: bool) -> None:
    """The node's params must fit the sim (one-line ValueError otherwise)."""
    if tuple(joint_names) != JOINT_NAMES:
        raise ValueError(f"joint_names must be the sim's {list(JOINT_NAMES)}: {joint_names}")
    if not 1 <= len(names.cameras) <= 2:
        raise ValueError(f"the sim has 2 cameras (base, wrist); params list {names.cameras}")
    if not trajectory:
        raise ValueError("joint_trajectory must be true: the sim executes ~/joint_trajectory")


def load_checked(params: Path, overrides: Mapping[str, object]) -> tuple[Settings, TopicNames]:
    """The node's settings and topics, checked against the sim (one-line ValueError)."""
    settings, names = load_settings(params, ros_texts(overrides))
    check_params(names, settings.node.joint_names, settings.node.joint_trajectory)
    return settings, names


def run_sim_eval(spec: SimEvalSpec, out: Path) -> dict[str, Path]:
    """Run the episodes into `out`; the report's files by kind (sim_report.write).

    Raises FileExistsError (an output bag in `out`), ValueError (params or spec that do
    not fit the sim), TimeoutError or RuntimeError (the node or the sim failed)."""
    if (out / OUTPUT_BAG).exists():
        raise FileExistsError(f"{out / OUTPUT_BAG} exists: choose a new --out folder")
    settings, names = load_checked(spec.params, spec.overrides)
    if spec.policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {spec.policy!r}")
    if spec.episodes < 1 or spec.real_time_factor <= 0:
        raise ValueError("--episodes must be >= 1 and --rtf > 0")
    out.mkdir(parents=True, exist_ok=True)
    rtf = spec.real_time_factor
    order = episode_order(spec.families, spec.first_seed, spec.episodes)
    record = {t.topic: msgtype(t.msg_class) for t in SIM_TOPICS if t.key in _RECORDED_SIM_KEYS}
    if spec.policy == "model":
        record.update(names.outputs())
    echo = print if spec.echo else None
    collector = Collector(names, TABLETOP, len(spec.families), round(NS_PER_S / spec.gif_fps), echo)
    sim_seconds = sum(TIME_LIMITS[f] for f in spec.families) * spec.episodes
    run = ClosedLoopRun(
        world=TABLETOP,
        world_parameters=sim_parameters(spec, names, settings),
        params=spec.params,
        overrides=spec.overrides,
        model=spec.policy == "model",
        record=record,
        episodes=len(order),
        timeout_s=spec.wait_s + sim_seconds / rtf + 60.0,
        quiet_s=max(1.0, 3 * settings.node.frame_period_s),
        domain_id=spec.domain_id,
        camera=names.cameras[0],
    )
    print(f"{len(order)} episodes ({', '.join(spec.families)} x {spec.episodes}), "
          f"policy {spec.policy}, real-time factor {rtf:g}; logs in {out}")  # fmt: skip
    begin = time.monotonic()
    recording = run_episodes(run, collector, out)
    setup = sim_report.RunSetup(
        policy=spec.policy,
        mode=settings.engine.engine_mode,
        params=str(spec.params),
        families=tuple(spec.families),
        seeds=tuple(range(spec.first_seed, spec.first_seed + spec.episodes)),
        rtf=rtf,
        camera_size=spec.camera_size,
        wall_s=time.monotonic() - begin,
    )
    return sim_report.write(out, setup, collector, recording, settings, names)


def main(argv: Sequence[str] | None = None) -> int:
    """Console script `oxygen-eval node`."""
    args = _parser().parse_args(argv)
    spec = SimEvalSpec(
        params=args.params,
        policy=args.policy,
        overrides={"engine_mode": args.mode},
        families=tuple(args.families),
        episodes=args.episodes,
        first_seed=args.first_seed,
        rtf=args.rtf,
        camera_size=args.camera_size,
        camera_rate=args.camera_rate,
        command_delay_steps=args.command_delay_steps,
        gif_fps=args.gif_fps,
        echo=args.echo,
        wait_s=args.wait_s,
    )
    run = functools.partial(run_sim_eval, spec)
    return run_from_cli(
        "oxygen-eval node", run, args.out, ROOT / "out" / "sim", sim_report.headline
    )


if __name__ == "__main__":
    raise SystemExit(main())
