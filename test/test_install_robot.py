"""scripts/install_robot.sh, run as on a robot, against the PyPI ROS 2 wheels laid out as
/opt/ros/<distro>.

A robot's ROS comes from apt: /opt/ros/<distro>/setup.bash puts its Python packages on
PYTHONPATH, its prefix on AMENT_PREFIX_PATH and CMAKE_PREFIX_PATH, and colcon is a command.
Here the stand-in for that prefix is built from this venv's own `ros-*` distributions (and
what they require), linked into a site folder of their own, so the venv the script makes
sees rclpy only as a robot's venv would: through PYTHONPATH, never through pip. colcon comes
from PyPI into a folder of its own, behind a `colcon` command. The script then makes its
venv, installs the CPU accelerator's pinned wheels, builds this checkout with colcon and
checks that the installed `oxygen_node` starts; the test checks what it printed.
Not covered here (no apt, no launch packages on PyPI): rosdep (--no-rosdep) and
`ros2 launch` itself (test_launch_outcomes runs the launch file against a colcon install
where launch is installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
DISTRO = "kilted"  # what the PyPI wheels are
COLCON = "colcon-common-extensions==0.3.0"
# What apt's ROS brings for building that no ros-* wheel requires (python3-catkin-pkg).
ROS_BUILD_TOOLS = ("catkin-pkg",)
# What rosdep installs for package.xml's non-ROS dependencies, as PyPI distributions (the
# test skips rosdep: no apt here). A key missing here fails the test.
ROSDEP_KEYS = {
    "python3-numpy": "numpy",
    "python3-yaml": "pyyaml",
    "python3-pil": "pillow",
    "python3-matplotlib": "matplotlib",
    "python3-tqdm": "tqdm",
    "urdfdom_py": "urdfdom-py",
}


def _rosdep_distributions() -> list[str]:
    """package.xml's exec dependencies that are not ROS packages, as PyPI names."""
    xml = ET.parse(ROOT / "package.xml").getroot()
    keys = [e.text for e in xml.iter("exec_depend") if e.text.startswith("python3-")]
    keys += [e.text for e in xml.iter("exec_depend") if e.text == "urdfdom_py"]  # not python3-
    unknown = sorted(set(keys) - set(ROSDEP_KEYS))
    assert not unknown, f"map these package.xml keys to PyPI in ROSDEP_KEYS: {unknown}"
    return [ROSDEP_KEYS[key] for key in keys]


def _ros_distributions() -> list[metadata.Distribution]:
    """The venv's ros-* distributions, ROS_BUILD_TOOLS and what rosdep would install and,
    recursively, what they require (any extra of a ros-* one)."""
    by_name = {d.metadata["Name"].lower().replace("_", "-"): d for d in metadata.distributions()}
    todo = [name for name in by_name if name.startswith("ros-")]
    todo += [*ROS_BUILD_TOOLS, *_rosdep_distributions()]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        for line in by_name[name].requires or []:
            requirement = Requirement(line)
            if (
                requirement.marker is None
                or name.startswith("ros-")
                or requirement.marker.evaluate({"extra": ""})
            ):
                todo.append(requirement.name.lower().replace("_", "-"))
    return [by_name[name] for name in sorted(seen)]


def _link_site(site: Path) -> list[str]:
    """Link every top-level entry of those distributions into `site`; the ros_*.libs dirs."""
    site.mkdir(parents=True)
    source = Path(sysconfig.get_paths()["purelib"])
    libs = []
    for dist in _ros_distributions():
        for top in {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            target = site / top
            if not target.exists() and (source / top).exists():
                target.symlink_to(source / top)
            if top.startswith("ros_") and top.endswith(".libs"):
                libs.append(str(source / top))
    return libs


def _fake_ros_prefix(tmp_path: Path) -> Path:
    """/opt/ros/<distro> as apt lays it out, from this venv's wheels."""
    prefix = tmp_path / "opt" / "ros" / DISTRO
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = prefix / "lib" / version / "site-packages"
    libs = _link_site(site)
    colcon_site = tmp_path / "colcon"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(colcon_site), COLCON],
        check=True, timeout=300,
    )  # fmt: skip
    bin_dir = prefix / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys._base_executable)  # the system Python
    for tool in ("cmake", "ninja"):
        (bin_dir / tool).symlink_to(Path(sys.executable).with_name(tool))
    colcon = bin_dir / "colcon"  # colcon off PYTHONPATH: its pytest must not reach the build
    colcon.write_text(
        f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); "
        f'from colcon_core.command import main; sys.exit(main())\' {colcon_site} "$@"\n'
    )
    colcon.chmod(0o755)
    venv_prefix = sys.prefix
    (prefix / "setup.bash").write_text(
        f"export ROS_DISTRO={DISTRO}\n"
        f"export PATH={bin_dir}:$PATH\n"
        f"export PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"export AMENT_PREFIX_PATH={venv_prefix} CMAKE_PREFIX_PATH={venv_prefix}\n"
        f"export LD_LIBRARY_PATH={':'.join([f'{venv_prefix}/lib', *libs])}\n"
        "export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1\n"
    )
    return prefix


def test_the_install_script_builds_a_workspace_whose_node_starts(tmp_path):
    prefix = _fake_ros_prefix(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"  # no venv of this test on it: the script brings its own
    env["ROS_PREFIX"] = str(prefix)
    venv, ws = tmp_path / "oxygen-venv", tmp_path / "oxygen_ws"
    command = [
        "bash", str(ROOT / "scripts" / "install_robot.sh"), "--distro", DISTRO, "--accel", "cpu",
        "--venv", str(venv), "--workspace", str(ws), "--params", "tiny.yaml", "--no-rosdep",
    ]  # fmt: skip
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=1200, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    launch = result.stdout.strip().splitlines()[-2:]
    assert launch == [
        f"source {prefix}/setup.bash && source {venv}/bin/activate && "
        f"source {ws}/install/setup.bash",
        "ros2 launch oxygen_ros oxygen.launch.py "
        f"params_file:={ws}/install/share/oxygen_ros/config/tiny.yaml",
    ]
    share = ws / "install" / "share" / "oxygen_ros"
    assert (share / "launch" / "oxygen.launch.py").is_file()
    assert (share / "config" / "tiny.yaml").is_file()
    assert "jax 0.10.2 [CpuDevice(id=0)]" in result.stdout


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ([], "--distro is required (jazzy or kilted)"),
        (["--distro", "humble", "--accel", "cpu"], "no ROS 2 humble at /nonexistent/humble"),
        (["--distro", "jazzy", "--accel", "tpu"], "accelerator 'tpu' is not one of"),
        (["--distro", "jazzy", "--accel", "cpu", "--venv", str(ROOT / "v")], "must not lie"),
    ],
)
def test_the_install_script_refuses_bad_arguments_in_one_line(tmp_path, arguments, says):
    setup = tmp_path / "jazzy" / "setup.bash"
    setup.parent.mkdir()
    setup.write_text("")
    prefix = str(tmp_path / "jazzy") if "humble" not in arguments else "/nonexistent/humble"
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install_robot.sh"), *arguments],
        env={**os.environ, "ROS_PREFIX": prefix}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("install_robot.sh: ") and says in line, line
