"""What `colcon build` installs: package.xml's dependencies, the ROS executables' shebang.

package.xml is parsed and validated by catkin_pkg, the parser colcon and rosdep use. The
executables are written by cmake/oxygen_executable.cmake, configured here in a throw-away
CMake project (no compiler, no messages) with this interpreter, and then run with a PATH
that has no venv on it, as `ros2 run` does from a shell where the venv is not activated.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
