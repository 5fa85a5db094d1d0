"""Guards on the layering: oxygen_core never imports ROS or the tools; every module says
what it is for.

oxygen_core is the engine and the model: it must run (and be tested and benchmarked)
without ROS, so a ROS import slipping into it would break `oxygen-bench` and `oxygen-verify`
on a machine without rclpy. Imports are read with `ast` from every file, so an import
inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Top-level packages oxygen_core must not import: ROS client libraries, ROS message
# packages, bag I/O and the ROS side of this project.
FORBIDDEN = {
    "rclpy",
    "rosbags",
    "oxygen_ros",
    "rcl_interfaces",
    "sensor_msgs",
    "std_msgs",
    "builtin_interfaces",
    "diagnostic_msgs",
    "geometry_msgs",
    "trajectory_msgs",
    "visualization_msgs",
    "rosgraph_msgs",
    "lifecycle_msgs",
    "launch",
    "launch_ros",
    "cv_bridge",
}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_guards_see_every_module():
    assert len(modules("oxygen_core")) >= 30 and len(modules("oxygen_ros")) >= 20
    # The parser sees a forbidden import where there is one.
    assert "rclpy" in imported_roots(ROOT / "oxygen_ros" / "node.py")
    assert "rosbags" in imported_roots(ROOT / "oxygen_ros" / "tools" / "bagio.py")


@pytest.mark.parametrize("path", modules("oxygen_core"), ids=lambda p: str(p.relative_to(ROOT)))
def test_oxygen_core_imports_no_ros(path):
    assert not imported_roots(path) & FORBIDDEN


def tool_imports(source: str, package: str = "oxygen_ros") -> list[str]:
    """Every import of oxygen_ros.tools in `source` (a module of `package`), in any form:
    `import oxygen_ros.tools.x`, `from oxygen_ros.tools.x import y`, `from oxygen_ros
    import tools`, and the relative `from .tools import x` / `from . import tools`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if n == "oxygen_ros.tools" or n.startswith("oxygen_ros.tools.")]
    return found


@pytest.mark.parametrize(
    "source",
    [
        "import oxygen_ros.tools.replay",
        "import oxygen_ros.tools as t",
        "from oxygen_ros.tools.job import Job",
        "from oxygen_ros import tools",
        "from oxygen_ros import convert, tools",
        "from .tools import replay",
        "from . import tools",
        "def f():\n    import oxygen_ros.tools.bagio",
    ],
)
def test_the_tool_import_guard_sees_every_import_form(source):
    assert tool_imports(source)


def test_the_tool_import_guard_passes_runtime_imports():
    source = "import oxygen_ros.convert\nfrom oxygen_ros import topics\nfrom . import throttle"
    assert tool_imports(source) == []


def test_the_runtime_node_imports_no_tool():
    """The robot's process loads the node's modules only: tools import the node, never back."""
    runtime = [p for p in modules("oxygen_ros") if "tools" not in p.relative_to(ROOT).parts]
    assert len(runtime) >= 14
    for path in runtime:
        assert tool_imports(path.read_text()) == [], path


PACKAGES = ("oxygen_core", "oxygen_ros", "test", "launch")


@pytest.mark.parametrize(
    "path",
    [p for package in PACKAGES for p in modules(package)] + [ROOT / "setup.py"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_module_has_a_docstring(path):
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring and docstring.strip(), f"{path.relative_to(ROOT)} has no module docstring"


@pytest.mark.ros
def test_tools_find_the_checkout_from_their_own_place():
    """The tools sit one folder deeper than the node: paths they derive must still resolve."""
    from oxygen_ros.tools import bagio, demo

    assert demo.DEMO_BAG == ROOT / "data" / "demo_bag" and demo.DEMO_BAG.is_dir()
    assert demo.DEMO_PARAMS.is_file()
    assert bagio.interface_dir() == ROOT / "msg"
