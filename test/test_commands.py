"""The twelve commands (oxygen_ros.tools.commands): every verb and world reaches its tool,
whose usage line names it as it is called; --world is read before --ros-args only; an
unknown verb or world fails in one line."""

from __future__ import annotations

import pytest

from oxygen_ros.tools import commands

COMMANDS = {
    "oxygen-eval": (commands.evaluate, commands.EVAL),
    "oxygen-bench": (commands.bench, commands.BENCH),
    "oxygen-bag": (commands.bag, commands.BAG),
    "oxygen-config": (commands.config, commands.CONFIG),
    "oxygen-train": (commands.train, commands.TRAIN),
}
CALLS = (
    [
        (f"{prog} {verb.name}", run, [verb.name], world)
        for prog, (run, verbs) in COMMANDS.items()
        for verb in verbs
        for world in verb.by_world
    ]
    + [("oxygen-sim", commands.sim, [], world) for world in commands.SIM_HOST.by_world]
    + [("oxygen-record", commands.record, [], world) for world in commands.RECORD.by_world]
)


@pytest.mark.parametrize(
    ("prog", "run", "argv", "world"), CALLS, ids=[f"{c[0]}-{c[3]}" for c in CALLS]
)
def test_every_verb_and_world_answers_help_under_its_own_name(prog, run, argv, world, capsys):
    if world not in (None, commands.TABLETOP):
        argv, prog = [*argv, "--world", world], f"{prog} --world {world}"
    try:
        status = run([*argv, "--help"])
    except SystemExit as done:  # argparse's --help
        status = done.code
    assert status in (0, None)
    assert capsys.readouterr().out.startswith(f"usage: {prog}")


def test_world_is_read_before_the_ros_arguments_only():
    assert commands.world_argument(["--x", "1"]) == ("tabletop", ["--x", "1"])
    assert commands.world_argument(["--world", "metaworld", "-v"]) == ("metaworld", ["-v"])
    assert commands.world_argument(["-v", "--world=metaworld"]) == ("metaworld", ["-v"])
    ros = ["--ros-args", "-p", "x:=1", "--world", "metaworld"]
    assert commands.world_argument(ros) == ("tabletop", ros)


def test_a_command_without_a_verb_prints_its_verbs_and_an_unknown_one_fails(capsys):
    assert commands.bag([]) == 2
    assert "replay" in capsys.readouterr().out
    assert commands.bag(["replays"]) == 2
    assert "unknown verb 'replays'" in capsys.readouterr().err
    assert commands.evaluate(["sweep", "--world", "mars"]) == 2
    err = capsys.readouterr().err
    assert "unknown world 'mars'; choose one of tabletop, metaworld, aloha" in err


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        ([], "usage: oxygen-train [-h] [--out OUT]"),
        (["--recipe", "R.yaml"], "usage: oxygen-train --recipe"),
        (["--bags", "B"], "usage: oxygen-train --bags DIR"),
    ],
)
def test_oxygen_train_dispatches_once_on_what_it_is_given(argv, usage, capsys):
    with pytest.raises(SystemExit) as done:
        commands.train([*argv, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(usage)
