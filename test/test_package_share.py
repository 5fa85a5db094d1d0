"""oxygen_ros.tools.package_share: data files from the install's share folder, else the checkout.

The install prefixes here are real ament index layouts (what colcon writes), read by the
real ament_index_python.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ament_index_python")

from oxygen_ros.tools import package_share  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _install_prefix(prefix: Path, files: list[str]) -> Path:
    """A colcon-like install of oxygen_ros holding `files` under share/oxygen_ros."""
    marker = prefix / "share" / "ament_index" / "resource_index" / "packages" / "oxygen_ros"
    marker.parent.mkdir(parents=True)
    marker.write_text("")
    for relative in files:
        path = prefix / "share" / "oxygen_ros" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("installed")
    return prefix / "share" / "oxygen_ros"


def test_outside_a_ros_environment_the_checkout_serves(monkeypatch):
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    assert package_share.installed_share() is None
    assert package_share.resource("config/tiny.yaml") == ROOT / "config" / "tiny.yaml"
    assert (ROOT / "data" / "demo_bag").is_dir()


def test_the_installed_copy_wins_when_it_exists(monkeypatch, tmp_path):
    installed = _install_prefix(tmp_path / "install", ["data/demo_bag/metadata.yaml"])
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "install"))
    assert package_share.installed_share() == installed
    assert package_share.resource("data/demo_bag") == installed / "data" / "demo_bag"
    # The development venv's share folder has only the messages: fall back to the checkout.
    assert package_share.resource("config/tiny.yaml") == ROOT / "config" / "tiny.yaml"


def test_an_install_without_oxygen_ros_is_not_used(monkeypatch, tmp_path):
    (tmp_path / "other" / "share").mkdir(parents=True)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "other"))
    assert package_share.installed_share() is None
    assert package_share.resource("data/missing") == ROOT / "data" / "missing"
