"""What `colcon build` installs: package.xml's dependencies, the ROS executables' shebang,
the same executables as setup.py's console scripts, each of which answers --help.

package.xml is parsed and validated by catkin_pkg, the parser colcon and rosdep use. The
executables are written by cmake/oxygen_executable.cmake, configured here in a throw-away
CMake project (no compiler, no messages) with this interpreter, and then run with a PATH
that has no venv on it, as `ros2 run` does from a shell where the venv is not activated.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from node_harness import console_script

ROOT = Path(__file__).resolve().parents[1]


def _console_scripts() -> dict[str, str]:
    """setup.py's console scripts, name -> module (read from its source, not run)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.func.id == "setup")
    entry_points = next(k.value for k in call.keywords if k.arg == "entry_points")
    scripts = ast.literal_eval(entry_points)["console_scripts"]
    pairs = [line.replace(" ", "").split("=") for line in scripts]
    return {name: target.removesuffix(":main") for name, target in pairs}


def _cmake_executables() -> dict[str, str]:
    """CMakeLists.txt's `oxygen_install_executable(name module [function])` calls,
    name -> module, or module:function where the function is not main."""
    text = (ROOT / "CMakeLists.txt").read_text()
    pattern = r"^\s*oxygen_install_executable\((\w+) ([\w.]+)(?: (\w+))?\)"
    calls = [(n, f"{m}:{f}" if f else m) for n, m, f in re.findall(pattern, text, re.M)]
    assert len(calls) == len(dict(calls)), f"an executable is installed twice: {calls}"
    return dict(calls)


def test_cmake_installs_exactly_the_console_scripts_under_ros_names():
    scripts = _console_scripts()
    assert all(target for target in scripts.values())
    expected = {name.replace("-", "_"): module for name, module in scripts.items()}
    assert _cmake_executables() == expected


@pytest.mark.parametrize("name", sorted(_console_scripts()))
def test_every_console_script_answers_help_without_starting(name):
    result = subprocess.run(
        [console_script(name), "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"usage: {name}" in result.stdout, result.stdout


def test_package_xml_is_valid_format_3_with_the_launch_and_test_dependencies():
    from catkin_pkg.package import parse_package

    package = parse_package(str(ROOT / "package.xml"))  # validates, raises when invalid
    assert package.package_format == 3
    exec_depends = {d.name for d in package.exec_depends}
    test_depends = {d.name for d in package.test_depends}
    # `ros2 launch` (README), the launch file's imports, and the installed-share lookup
    assert {"ros2launch", "launch", "launch_ros", "ament_index_python"} <= exec_depends
    assert {"launch_testing", "launch_testing_ament_cmake", "python3-pytest"} <= test_depends


def test_installed_executables_carry_the_interpreter_path(tmp_path):
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed (run the project's setup)")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "project(shebang NONE)\n"
        "find_package(Python3 REQUIRED COMPONENTS Interpreter)\n"
        f'include("{ROOT / "cmake" / "oxygen_executable.cmake"}")\n'
        'oxygen_write_executable("${CMAKE_BINARY_DIR}/oxygen_info" oxygen_core.model.info)\n'
    )
    subprocess.run(
        [cmake, "-S", str(tmp_path), "-B", str(tmp_path / "build"),
         f"-DPython3_EXECUTABLE={sys.executable}"],
        check=True, capture_output=True,
    )  # fmt: skip
    script = tmp_path / "build" / "oxygen_info"
    assert script.read_text().splitlines()[0] == f"#!{sys.executable}"
    assert os.access(script, os.X_OK)
    # No venv on PATH: `#!/usr/bin/env python3` would find a Python without oxygen_core.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    result = subprocess.run(
        [str(script), "--preset", "tiny", "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert '"preset": "tiny"' in result.stdout


def test_the_python_3_12_run_names_only_test_files_that_exist():
    """`make test-py312` lists its tests by name: a renamed test file must not vanish from it
    (pytest would stop at the missing file and run none)."""
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    names = re.search(r"addsuffix \.py,([^)]*)\)", makefile).group(1).split()
    assert "node_signals" in names
    missing = [n for n in names if not (ROOT / "test" / f"test_{n}.py").is_file()]
    assert missing == []
