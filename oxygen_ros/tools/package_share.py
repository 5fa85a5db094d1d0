"""Where the package's data files are: the installed share folder, else the checkout.

`colcon build` installs launch/, config/ and data/ to share/oxygen_ros and the Python
sources to site-packages, so a file next to the sources is not next to its data any more.
ament_index_python finds the share folder of an installed package; in the development
venv (sources served from the checkout by `pip install -e .`) the share folder holds only
the generated interfaces, so a file missing there is looked up in the checkout.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = "oxygen_ros"
CHECKOUT = Path(__file__).resolve().parents[2]


def installed_share() -> Path | None:
    """share/oxygen_ros of the install the ament index names, or None outside one."""
    try:
        from ament_index_python.packages import (
            PackageNotFoundError,
            get_package_share_directory,
        )
    except ImportError:  # not a ROS environment: only the checkout exists
        return None
    try:
        return Path(get_package_share_directory(PACKAGE))
    except (PackageNotFoundError, OSError):  # OSError: AMENT_PREFIX_PATH is not set
        return None


def resource(relative: str) -> Path:
    """The installed copy of `relative` (e.g. "config/tiny.yaml"), else the checkout's.

    Returns the checkout path even when it does not exist, so the caller's error names
    where the file was expected.
    """
    share = installed_share()
    if share is not None and (share / relative).exists():
        return share / relative
    return CHECKOUT / relative
