"""Guards on the layering: oxygen_core never imports ROS or the tools; the robot's process
loads neither the sim nor training; no module imports itself back through others; every
module says what it is for.

oxygen_core is the engine and the model: it must run (and be tested and benchmarked)
without ROS, so a ROS import slipping into it would break `oxygen-bench engine` and `oxygen-verify`
on a machine without rclpy. The node's process (oxygen_ros outside tools/) and the
inference path it runs (the model, the engine, the policy and what they import) must not
load oxygen_core.sim or oxygen_core.train: the sim and training are tools around the robot,
never part of it. Imports are read with `ast` from every file, so an import inside a
function counts too, and relative imports are resolved against their package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
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


def imported_names(source: str, package: str) -> list[str]:
    """Every dotted name an import in `source` (a module of `package`) names, in any form
    and at any depth: `import a.b` gives a.b; `from a import b` gives a and a.b (b may be a
    module or a name in a); relative imports are resolved against `package`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = from_module(node, package)
            found += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return found


def from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of `from X import ...` in a module of `package`."""
    base = package.rsplit(".", node.level - 1)[0] if node.level else ""
    return ".".join(p for p in (base, node.module or "") if p)


def imports_of(source: str, package: str, banned: Iterable[str]) -> list[str]:
    """The names `source` imports that are one of the `banned` modules or inside one."""
    banned = tuple(banned)
    return [
        name
        for name in imported_names(source, package)
        if any(name == b or name.startswith(f"{b}.") for b in banned)
    ]


def tool_imports(source: str, package: str = "oxygen_ros") -> list[str]:
    """Every import of oxygen_ros.tools in `source` (a module of `package`), in any form:
    `import oxygen_ros.tools.x`, `from oxygen_ros.tools.x import y`, `from oxygen_ros
    import tools`, and the relative `from .tools import x` / `from . import tools`."""
    return imports_of(source, package, ["oxygen_ros.tools"])


@pytest.mark.parametrize(
    "source",
    [
        "import oxygen_ros.tools.replay",
        "import oxygen_ros.tools as t",
        "from oxygen_ros.tools.replay_job import Job",
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


def runtime_modules() -> list[Path]:
    """The node's own modules: what the robot's process loads (oxygen_ros outside tools/)."""
    return [p for p in modules("oxygen_ros") if "tools" not in p.relative_to(ROOT).parts]


def test_the_runtime_node_imports_no_tool():
    """The robot's process loads the node's modules only: tools import the node, never back."""
    runtime = runtime_modules()
    assert len(runtime) >= 14
    for path in runtime:
        assert tool_imports(path.read_text()) == [], path


# ------------------------------------------------------------------ the module graph

PROJECT = ("oxygen_core", "oxygen_ros")


def module_name(path: Path, root: Path = ROOT) -> str:
    """oxygen_core/engine/types.py -> oxygen_core.engine.types; a package's __init__.py is
    the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path, root: Path = ROOT) -> str:
    """The package a module's relative imports start from."""
    name = module_name(path, root)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def project_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name -> file, for every module of `packages` under `root`."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """module -> the project modules it imports (anywhere in its file), each import resolved
    to the deepest module it names: `from pkg import module` is an edge to pkg.module,
    `from pkg import name` one to pkg. The parent packages an import also runs are left
    out: their __init__ files hold docstrings and re-exports, and counting them would make
    every module of a package import whatever its __init__ re-exports."""
    paths = project_modules(root, packages)
    graph = {}
    for name, path in paths.items():
        tree, package = ast.parse(path.read_text()), package_of(path, root)
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges |= {_deepest(alias.name, paths) for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                module = from_module(node, package)
                named = (f"{module}.{alias.name}" for alias in node.names)
                edges |= {n if n in paths else _deepest(module, paths) for n in named}
        graph[name] = edges - {"", name}
    return graph


def _deepest(name: str, known: Mapping[str, Path]) -> str:
    """The longest prefix of `name` that is a known module ("" for none: not the project's)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph has none (depth-first
    search, in name order so the answer is stable)."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_projects_modules_import_in_no_cycle():
    graph = import_graph(ROOT, PROJECT)
    assert len(graph) >= 100 and "oxygen_ros.tools.bagio" in graph["oxygen_ros.tools.replay"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_the_cycle_search_finds_a_cycle_and_passes_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_resolves_relative_and_from_package_imports_into_a_cycle(tmp_path):
    """pkg.a imports pkg.b lazily as `from . import b`; pkg.b imports pkg.a as `from pkg
    import a`: a cycle through both forms, and no edge to the package itself."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""pkg."""\n')
    (pkg / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "b.py").write_text("from pkg import a\nfrom pkg.c import VALUE\n")
    (pkg / "c.py").write_text("VALUE = 1\n")
    graph = import_graph(tmp_path, ["pkg"])
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a", "pkg.c"}, "pkg.c": set()}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


# ------------------------------------------------------------------ the inference path

SIM_AND_TRAINING = ("oxygen_core.sim", "oxygen_core.train")
# What the node runs the model with; the modules the node's own modules reach through their
# imports are checked with these, so a new one cannot slip past the list.
INFERENCE_PATH = (
    "oxygen_core/model",
    "oxygen_core/engine",
    "oxygen_core/policy.py",
    "oxygen_core/robot_io.py",
    "oxygen_core/config.py",
    "oxygen_core/observation.py",
    "oxygen_core/image.py",
    "oxygen_core/text.py",
)


def inference_modules() -> list[Path]:
    """The inference path's files, the node's runtime modules and every project module
    those import, directly or through others."""
    listed = {p for entry in INFERENCE_PATH for p in _files(ROOT / entry)}
    graph = import_graph(ROOT, PROJECT)
    reached, todo = set(), [module_name(p) for p in runtime_modules()]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += graph[name]
    paths = project_modules(ROOT, PROJECT)
    return sorted(listed | {paths[name] for name in reached})


def _files(path: Path) -> list[Path]:
    assert path.exists(), f"{path.relative_to(ROOT)} of INFERENCE_PATH does not exist"
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize("path", inference_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_node_and_its_inference_path_import_neither_sim_nor_training(path):
    found = imports_of(path.read_text(), package_of(path), SIM_AND_TRAINING)
    assert found == [], f"{path.relative_to(ROOT)} imports {found}"


def test_the_inference_path_covers_the_node_and_the_engine():
    names = {module_name(p) for p in inference_modules()}
    assert {"oxygen_ros.node", "oxygen_ros.convert", "oxygen_core.engine.engine"} <= names
    assert {"oxygen_core.model.pi05", "oxygen_core.policy", "oxygen_core.text"} <= names


@pytest.mark.parametrize(
    ("source", "package"),
    [
        ("import oxygen_core.sim.arm", "oxygen_core"),
        ("import oxygen_core.train", "oxygen_ros"),
        ("from oxygen_core.sim.executor import Trajectory", "oxygen_ros"),
        ("from oxygen_core import sim", "oxygen_ros"),
        ("from oxygen_core import config, train", "oxygen_ros"),
        ("from .sim import arm", "oxygen_core"),
        ("from ..train import records", "oxygen_core.engine"),
        ("from . import sim", "oxygen_core"),
        ("def f():\n    from oxygen_core.train.records import Record", "oxygen_core.model"),
    ],
)
def test_the_sim_and_training_guard_sees_every_import_form(source, package):
    assert imports_of(source, package, SIM_AND_TRAINING)


def test_the_sim_and_training_guard_passes_other_imports():
    source = (
        "import oxygen_core.simulator\nfrom oxygen_core import config, trainer\nfrom . import image"
    )
    assert imports_of(source, "oxygen_core", SIM_AND_TRAINING) == []


PACKAGES = ("oxygen_core", "oxygen_ros", "test", "launch", "scripts")


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
