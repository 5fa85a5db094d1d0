"""The node's SROS2 policy: generated, shipped, and true to a running node.

The policy files in config/sros2 are what oxygen-config sros2 writes for each params file
(regenerated here and compared), and the policy of config/tiny.yaml lists exactly the
topics and services a running node (configured, active, on simulated time) has on the
ROS graph, as rclpy's graph API reports them. Security itself cannot run here (the Fast
DDS wheels have no security plugins), so the last tests check that asking for it ends
`oxygen-node` with one clear line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import rclpy
from node_harness import Spinners, wait_until
from rclpy.node import Node

from oxygen_ros.node import OxygenNode
from oxygen_ros.tools import sros2_policy

pytestmark = pytest.mark.ros

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "config").glob("*.yaml"))
TINY = ROOT / "config" / "tiny.yaml"
SECURITY_FILES = (  # what rcl looks for in an enclave folder
    "identity_ca.cert.pem",
    "cert.pem",
    "key.pem",
    "permissions_ca.cert.pem",
    "governance.p7s",
    "permissions.p7s",
)


def _policy(text: str) -> dict[str, set[str]]:
    """publish / subscribe / reply -> names, from a policy document."""
    profile = ET.fromstring(text).find("enclaves/enclave/profiles/profile")
    found: dict[str, set[str]] = {"publish": set(), "subscribe": set(), "reply": set()}
    for block in profile:
        (mode,) = block.attrib
        found[mode] |= {child.text for child in block}
    return found


@pytest.mark.parametrize("params", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_the_shipped_policy_is_what_the_generator_writes_now(params):
    shipped = sros2_policy.default_path(params)
    assert shipped.is_file(), f"run: oxygen-config sros2 --params {params.relative_to(ROOT)}"
    assert shipped.read_text() == sros2_policy.generate(params), (
        f"{shipped.relative_to(ROOT)} is out of date: run oxygen-config sros2 --params "
        f"{params.relative_to(ROOT)}"
    )


def test_a_namespace_moves_the_relative_names_and_the_profile():
    policy = sros2_policy.generate(TINY, namespace="/robot1")
    profile = ET.fromstring(policy).find("enclaves/enclave/profiles/profile")
    assert (profile.get("ns"), profile.get("node")) == ("/robot1", "oxygen")
    names = _policy(policy)
    assert "/robot1/oxygen/action_chunk" in names["publish"]
    assert "/diagnostics" in names["publish"] and "/joint_states" in names["subscribe"]
    assert "/robot1/oxygen/change_state" in names["reply"]


@pytest.mark.slow
def test_the_policy_lists_exactly_what_a_running_node_has_on_the_graph():
    rclpy.init()
    spinners = Spinners()
    args = ["--ros-args", "--params-file", str(TINY), "-p", "use_sim_time:=true"]
    node = OxygenNode(cli_args=args)
    observer = Node("policy_observer")
    spinners.add(node)
    spinners.add(observer)
    try:
        assert node.autostart()  # configured and active: every subscription exists

        def graph() -> dict[str, set[str]]:
            by_node = ("oxygen", "/")
            return {
                "publish": {n for n, _ in observer.get_publisher_names_and_types_by_node(*by_node)},
                "subscribe": {
                    n for n, _ in observer.get_subscriber_names_and_types_by_node(*by_node)
                },
                "reply": {n for n, _ in observer.get_service_names_and_types_by_node(*by_node)},
            }

        expected = _policy(sros2_policy.default_path(TINY).read_text())
        # Discovery of every endpoint converges, but slowly on 2 busy cores (20 s was seen
        # to fall short under load): wait long, the equality still has to hold.
        wait_until(lambda: graph() == expected, 60, "the graph to show the node as the policy")
    finally:
        node.release()
        spinners.shutdown()
        rclpy.shutdown()


def _start_secure(tmp_path: Path, keystore: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROS_SECURITY_ENABLE": "true", "ROS_SECURITY_STRATEGY": "Enforce"}
    env.pop("ROS_SECURITY_KEYSTORE", None)
    if keystore:  # the files rcl checks for; the DDS is what cannot do security here
        enclave = tmp_path / "keystore" / "enclaves" / "oxygen"
        enclave.mkdir(parents=True)
        for name in SECURITY_FILES:
            (enclave / name).write_text("placeholder\n")
        env["ROS_SECURITY_KEYSTORE"] = str(tmp_path / "keystore")
    script = Path(sys.executable).with_name("oxygen-node")
    if not script.exists():
        pytest.skip("oxygen-node is not installed (run the project's setup)")
    argv = [str(script), "--ros-args", "--params-file", str(TINY), "--enclave", "/oxygen"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("keystore", [True, False], ids=["enclave", "no_keystore"])
def test_requested_security_that_cannot_be_set_up_is_one_line_and_a_failure(tmp_path, keystore):
    result = _start_secure(tmp_path, keystore)
    assert result.returncode == 1, result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("oxygen-node:")]
    assert len(ours) == 1 and "Traceback" not in result.stderr, result.stderr
    assert ours[0].startswith(
        "oxygen-node: ROS 2 security is requested (ROS_SECURITY_ENABLE=true, "
        "ROS_SECURITY_STRATEGY=Enforce) but cannot be set up: "
    )
    # Anything else is rcl's own log ("Found security directory"), never a Python warning.
    others = [line for line in result.stderr.splitlines() if line not in ours]
    assert all(line.startswith("[INFO]") for line in others), others
