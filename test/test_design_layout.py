"""docs/DESIGN.md section 12 ("Layout") is the source map a newcomer reads first: it names
every module of the two packages, and names nothing that is gone.

Modules at a package's top level (`oxygen_core/*.py`, `oxygen_ros/*.py`,
`oxygen_ros/tools/*.py`) appear as `name.py`; modules of a sub-package
(`oxygen_core/model/`, `oxygen_ros/tools/sim/`, ...) appear by name in the lines of their
folder, as the map lists them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAT = ("oxygen_core", "oxygen_ros", "oxygen_ros/tools")


def _layout() -> str:
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    section = design.split("## 12. Layout", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def _modules() -> list[Path]:
    found = [*(ROOT / "oxygen_core").rglob("*.py"), *(ROOT / "oxygen_ros").rglob("*.py")]
    return sorted(p.relative_to(ROOT) for p in found if p.name != "__init__.py")


def _folder_lines(layout: str, folder: Path) -> str:
    """The lines of `folder` in the map (found under its parents' lines, in order): its
    own line and the deeper-indented ones that continue its description."""
    lines, start = layout.splitlines(), 0
    for part in folder.parts:
        start = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(f"{part}/"))
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.strip() or len(line) - len(line.lstrip()) <= indent + len(folder.name) + 1:
            break
        block.append(line)
    return "\n".join(block)


def test_every_module_is_on_the_map():
    layout = _layout()
    missing = []
    for module in _modules():
        parent = module.parent.as_posix()
        if parent in FLAT:
            named = re.search(rf"(?<![\w/]){re.escape(module.name)}\b", layout)
        else:
            words = re.findall(r"\w+", _folder_lines(layout, module.parent))
            named = module.stem in words
        if not named:
            missing.append(module.as_posix())
    assert not missing, f"docs/DESIGN.md section 12 does not name: {missing}"


def test_the_map_names_no_module_that_is_gone():
    files = {p.name for p in _modules()} | {p.name for p in (ROOT / "scripts").glob("*")}
    named = set(re.findall(r"(?<![\w/.])(\w+\.(?:py|sh))\b", _layout()))
    assert named <= files, f"section 12 names files that do not exist: {sorted(named - files)}"
