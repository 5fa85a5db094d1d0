"""The console scripts: twelve commands, one vocabulary.

    oxygen-node | oxygen-demo | oxygen-doctor | oxygen-info | oxygen-verify
    oxygen-sim [--world W] ...              a world as a ROS robot
    oxygen-record [--world W] OUT ...       a world's scripted expert into a bag
    oxygen-eval VERB ...                    node, in-process, sweep, compare, manifest
    oxygen-train [VERB] ...                 a run or a recipe; dagger, average
    oxygen-bench VERB ...                   engine, sim, gate, estop, phases, profile, ...
    oxygen-bag VERB ...                     replay, recover, limit-check, to-lerobot, synth
    oxygen-config VERB ...                  viewers, sros2, foxglove

A command with verbs takes its verb first; a verb that runs in more than one world takes
`--world` (tabletop by default; metaworld, aloha). Each verb is one tool's `main(argv)`, called
with the rest of the command line; the tool's parser is named as it is called
(`usage: oxygen-eval node --world metaworld`).
setup.py and CMakeLists.txt list these twelve (test_packaging keeps them equal), so a new
tool is a verb here, a new world a key in a verb's table, never a new script.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Mapping, Sequence

TABLETOP, METAWORLD, ALOHA = "tabletop", "metaworld", "aloha"
WORLD_FLAG = "--world"


@dataclasses.dataclass(frozen=True)
class Verb:
    """One verb of a command: "module" or "module:function" per world (one key, None, for
    a verb that runs in no particular world)."""

    name: str
    help: str
    by_world: Mapping[str | None, str]
    node: bool = False  # a ROS node's main: it takes the full argv (rclpy reads argv[0] on)


def _one(module: str) -> Mapping[str | None, str]:
    return {None: module}


SIM_HOST = Verb(
    "",
    "a world as a ROS robot (a node: --ros-args ...)",
    {
        TABLETOP: "oxygen_ros.tools.sim.node:tabletop",
        METAWORLD: "oxygen_ros.tools.sim.node:metaworld",
        ALOHA: "oxygen_ros.tools.sim.node:aloha",
    },
    node=True,
)
RECORD = Verb(
    "",
    "a world's scripted expert episodes into a bag",
    {
        TABLETOP: "oxygen_ros.tools.sim.record:tabletop",
        METAWORLD: "oxygen_ros.tools.sim.record:metaworld",
        ALOHA: "oxygen_ros.tools.sim.record:aloha",
    },
)
EVAL = (
    Verb(
        "node",
        "closed-loop episodes through the oxygen node over ROS, recorded and reported",
        {
            TABLETOP: "oxygen_ros.tools.sim.evaluate",
            METAWORLD: "oxygen_ros.tools.metaworld_eval",
            ALOHA: "oxygen_ros.tools.aloha_eval",
        },
    ),
    Verb(
        "in-process",
        "a trained policy in closed loop in the tabletop, in process (baselines too)",
        _one("oxygen_core.train.evaluate"),
    ),
    Verb(
        "sweep",
        "success against the chunk's delay (tabletop: in process; metaworld, aloha: through "
        "the node)",
        {
            TABLETOP: "oxygen_core.train.latency_sweep",
            METAWORLD: "oxygen_ros.tools.task_sweep:metaworld",
            ALOHA: "oxygen_ros.tools.task_sweep:aloha",
        },
    ),
    Verb(
        "compare",
        "node configurations side by side on the tabletop",
        _one("oxygen_ros.tools.sim.compare"),
    ),
    Verb(
        "manifest", "bags and sim seeds x configurations, on Ray", _one("oxygen_ros.tools.eval.cli")
    ),
)
TRAIN = (
    Verb(
        "dagger",
        "recovery frames: the policy drives, the expert labels",
        _one("oxygen_core.train.dagger"),
    ),
    Verb(
        "average",
        "the mean of checkpoints continued from one parent",
        _one("oxygen_core.train.average"),
    ),
)
BENCH = (
    Verb(
        "engine",
        "the OxyGen engine against its baselines (tables, JSON)",
        _one("oxygen_core.bench.cli"),
    ),
    Verb("sim", "the tabletop: expert success and render rate", _one("oxygen_core.sim.bench")),
    Verb("gate", "the chunk gate's cost per chunk", _one("oxygen_core.safety.bench")),
    Verb("estop", "e-stop press to hold, over ROS", _one("oxygen_ros.tools.estop_latency")),
    Verb("phases", "a frame's phases, one by one", _one("oxygen_core.bench.phases")),
    Verb("profile", "time per XLA operation", _one("oxygen_core.bench.profile")),
    Verb(
        "rtc",
        "real-time chunking's guidance against replace and blend",
        _one("oxygen_core.bench.rtc"),
    ),
    Verb(
        "configure",
        "configure's time, cold and warm (the compile cache)",
        _one("oxygen_ros.tools.configure_time"),
    ),
    Verb(
        "ray", "oxygen-eval's Ray overhead on generated bags", _one("oxygen_ros.tools.eval.bench")
    ),
)
BAG = (
    Verb(
        "replay",
        "a bag through the node's frame loop, offline or live",
        _one("oxygen_ros.tools.replay"),
    ),
    Verb("recover", "salvage a bag a crash left unfinished", _one("oxygen_ros.tools.bag_recover")),
    Verb(
        "limit-check",
        "commands in a bag against the joints' limits",
        _one("oxygen_ros.tools.limit_check"),
    ),
    Verb("to-lerobot", "a bag as a LeRobotDataset v3", _one("oxygen_ros.tools.lerobot_export")),
    Verb("synth", "the synthetic demo scene as a new bag", _one("oxygen_ros.tools.demo_bag")),
)
CONFIG = (
    Verb(
        "viewers",
        "rviz2, rqt and Foxglove layouts per params file",
        _one("oxygen_ros.tools.viewer_configs"),
    ),
    Verb("sros2", "the node's SROS2 policy XML", _one("oxygen_ros.tools.sros2_policy")),
    Verb("foxglove", "serve the node's topics to Foxglove", _one("oxygen_ros.tools.foxglove")),
)


def sim(argv: Sequence[str] | None = None) -> int | None:
    return _world_command("oxygen-sim", SIM_HOST, _argv(argv))


def record(argv: Sequence[str] | None = None) -> int | None:
    return _world_command("oxygen-record", RECORD, _argv(argv))


def evaluate(argv: Sequence[str] | None = None) -> int | None:
    return _verb_command("oxygen-eval", EVAL, _argv(argv))


def bench(argv: Sequence[str] | None = None) -> int | None:
    return _verb_command("oxygen-bench", BENCH, _argv(argv))


def bag(argv: Sequence[str] | None = None) -> int | None:
    return _verb_command("oxygen-bag", BAG, _argv(argv))


def config(argv: Sequence[str] | None = None) -> int | None:
    return _verb_command("oxygen-config", CONFIG, _argv(argv))


def train(argv: Sequence[str] | None = None) -> int | None:
    """oxygen-train: a verb first (dagger, average), else a recipe's stages (--recipe),
    one run on bags (--bags) or one run on the sim's expert (anything else)."""
    argv = _argv(argv)
    if argv and argv[0] in {v.name for v in TRAIN}:
        return _verb_command("oxygen-train", TRAIN, argv)
    if _given(argv, "--recipe"):
        return _call("oxygen_core.train.recipe", argv)
    if _given(argv, "--bags"):
        return _call("oxygen_ros.tools.train", argv)
    return _call("oxygen_core.train.cli:train_main", argv)


def _given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(f"{flag}=") for a in argv)


def _argv(argv: Sequence[str] | None) -> list[str]:
    return list(sys.argv[1:] if argv is None else argv)


def _verb_command(prog: str, verbs: Sequence[Verb], argv: list[str]) -> int | None:
    """`prog VERB ...`: the verb's tool with the rest; a usage line for anything else."""
    by_name = {v.name: v for v in verbs}
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(prog, verbs))
        return 0 if argv else 2
    verb = by_name.get(argv[0])
    if verb is None:
        print(
            f"{prog}: unknown verb {argv[0]!r}; choose one of {', '.join(by_name)}", file=sys.stderr
        )
        return 2
    if list(verb.by_world) == [None]:
        return _call(verb.by_world[None], argv[1:])
    return _world_command(f"{prog} {verb.name}", verb, argv[1:])


def _world_command(prog: str, verb: Verb, argv: list[str]) -> int | None:
    """`prog [--world W] ...`: the world's tool with the rest (tabletop by default)."""
    world, rest = world_argument(argv)
    if world not in verb.by_world:
        worlds = ", ".join(w for w in verb.by_world if w)
        print(f"{prog}: unknown world {world!r}; choose one of {worlds}", file=sys.stderr)
        return 2
    return _call(verb.by_world[world], [prog, *rest] if verb.node else rest)


def world_prog(command: str, world: str) -> str:
    """How `command` is called for `world`: the tabletop is the default, another world
    is named."""
    return command if world == TABLETOP else f"{command} {WORLD_FLAG} {world}"


def world_argument(argv: list[str]) -> tuple[str, list[str]]:
    """The --world value (before any --ros-args) and the arguments without it."""
    end = argv.index("--ros-args") if "--ros-args" in argv else len(argv)
    for i, arg in enumerate(argv[:end]):
        if arg == WORLD_FLAG and i + 1 < end:
            return argv[i + 1], argv[:i] + argv[i + 2 :]
        if arg.startswith(f"{WORLD_FLAG}="):
            return arg.split("=", 1)[1], argv[:i] + argv[i + 1 :]
    return TABLETOP, argv


def _call(target: str, argv: list[str]) -> int | None:
    """`target`'s main (module or module:function) on `argv`."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function or "main")(argv)


def _usage(prog: str, verbs: Sequence[Verb]) -> str:
    width = max(len(v.name) for v in verbs)
    lines = [f"usage: {prog} VERB [--help] ...", "", "verbs:"]
    for v in verbs:
        worlds = [w for w in v.by_world if w]
        where = f" [{WORLD_FLAG} {'|'.join(worlds)}]" if worlds else ""
        lines.append(f"  {v.name:<{width}}  {v.help}{where}")
    return "\n".join(lines)
