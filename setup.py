"""Python packaging of oxygen for `pip install -e .` (the development venv).

On a robot, colcon builds the same sources through CMakeLists.txt instead. The version is
read from package.xml so the two never disagree. Dependencies are pinned in
requirements.txt (venv) and declared in package.xml (robot), not repeated here.
"""

import pathlib
import xml.etree.ElementTree as ET

from setuptools import find_packages, setup

ROOT = pathlib.Path(__file__).resolve().parent

setup(
    name="oxygen",
    version=ET.parse(ROOT / "package.xml").findtext("version"),
    description="pi0.5 VLA in JAX with one shared KV cache for actions and language (OxyGen)",
    python_requires=">=3.11",
    # An explicit "" root with the packages directly under it makes setuptools' editable
    # install a plain .pth entry for the checkout instead of an import hook. The checkout is
    # then an ordinary sys.path entry, which pkgutil.extend_path in oxygen_ros/__init__.py
    # needs in order to merge it with the generated oxygen_ros.msg in site-packages.
    package_dir={"": "."},
    packages=find_packages(include=["oxygen_core", "oxygen_core.*", "oxygen_ros", "oxygen_ros.*"]),
    package_data={"oxygen_core": ["**/*.yaml", "**/*.json", "model/assets/*"]},
    entry_points={
        "console_scripts": [
            "oxygen-node=oxygen_ros.platform_check:node_main",
            "oxygen-demo=oxygen_ros.tools.demo:main",
            "oxygen-doctor=oxygen_ros.tools.doctor:main",
            "oxygen-info=oxygen_core.model.info:main",
            "oxygen-verify=oxygen_core.engine.verify:main",
            "oxygen-sim=oxygen_ros.tools.commands:sim",
            "oxygen-record=oxygen_ros.tools.commands:record",
            "oxygen-eval=oxygen_ros.tools.commands:evaluate",
            "oxygen-train=oxygen_ros.tools.commands:train",
            "oxygen-bench=oxygen_ros.tools.commands:bench",
            "oxygen-bag=oxygen_ros.tools.commands:bag",
            "oxygen-config=oxygen_ros.tools.commands:config",
        ],
    },
)
