"""One flag vocabulary across the commands: `--episodes` counts episodes (per family or
task), `--first-seed` is where the seeds start, and `--seed` is only ever a noise seed
(weights, sampling noise, a scene's noise), never the first episode's.

Every `add_argument` in the package and the experiment scripts is read with `ast`, so a
new command is checked as it is written. oxygen-train (oxygen_core/train/cli.py) keeps its
own `--seeds` and `--episodes FILE` for now: its recipes' keys are its flags, and the
shipped checkpoint records its recipe's hash, so they change with the next trained policy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("oxygen_core", "oxygen_ros", "scripts") for p in (ROOT / d).rglob("*.py")]
NOT_YET = {ROOT / "oxygen_core" / "train" / "cli.py"}  # module docstring
NOISE = ("noise", "weights")  # what a --seed's help must say it seeds


def options(path: Path) -> list[tuple[str, str]]:
    """(flag, help) of every `add_argument("--flag", ..., help=...)` in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant)]
        helps = [k.value for k in node.keywords if k.arg == "help"]
        text = helps[0].value if helps and isinstance(helps[0], ast.Constant) else ""
        found += [(f, str(text)) for f in flags if isinstance(f, str) and f.startswith("--")]
    return found


def test_the_reader_sees_the_commands_options():
    flags = {f for p in SOURCES for f, _ in options(p)}
    assert {"--episodes", "--first-seed", "--seed", "--params"} <= flags


@pytest.mark.parametrize(
    "path", [p for p in SOURCES if p not in NOT_YET], ids=lambda p: str(p.relative_to(ROOT))
)
def test_one_vocabulary_for_episodes_and_seeds(path):
    for flag, text in options(path):
        assert flag != "--seeds", f"{flag}: count episodes with --episodes"
        if "seed" in flag:
            assert flag in ("--seed", "--first-seed"), f"{flag}: --first-seed or --seed"
        if flag == "--seed":
            assert any(w in text for w in NOISE), f"--seed must seed noise; its help: {text!r}"
