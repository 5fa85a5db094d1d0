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
            "oxygen-info=oxygen_core.model.info:main",
            "oxygen-verify=oxygen_core.engine.verify:main",
            "oxygen-bench=oxygen_core.bench.cli:main",
            "oxygen-sim-bench=oxygen_core.sim.bench:main",
            "oxygen-train=oxygen_ros.tools.train:main",
            "oxygen-train-eval=oxygen_core.train.cli:eval_main",
            "oxygen-latency-sweep=oxygen_core.train.latency_sweep:main",
            "oxygen-train-dagger=oxygen_core.train.dagger:main",
            "oxygen-train-average=oxygen_core.train.average:main",
            "oxygen-node=oxygen_ros.platform_check:node_main",
            "oxygen-doctor=oxygen_ros.tools.doctor:main",
            "oxygen-replay=oxygen_ros.tools.replay:main",
            "oxygen-demo=oxygen_ros.tools.demo:main",
            "oxygen-foxglove=oxygen_ros.tools.foxglove:main",
            "oxygen-viewer-configs=oxygen_ros.tools.viewer_configs:main",
            "oxygen-sim=oxygen_ros.tools.sim.node:main",
            "oxygen-sim-eval=oxygen_ros.tools.sim.evaluate:main",
            "oxygen-sim-record=oxygen_ros.tools.sim.record:main",
            "oxygen-metaworld-sim=oxygen_ros.tools.metaworld_sim:main",
            "oxygen-metaworld-record=oxygen_ros.tools.metaworld_record:main",
            "oxygen-metaworld-eval=oxygen_ros.tools.metaworld_eval:main",
            "oxygen-metaworld-sweep=oxygen_ros.tools.metaworld_sweep:main",
            "oxygen-eval=oxygen_ros.tools.eval.cli:main",
            "oxygen-sros2-policy=oxygen_ros.tools.sros2_policy:main",
            "oxygen-bag-recover=oxygen_ros.tools.bag_recover:main",
            "oxygen-limit-check=oxygen_ros.tools.limit_check:main",
            "oxygen-bag-to-lerobot=oxygen_ros.tools.lerobot_export:main",
        ],
    },
)
