"""config/fastdds_robot.xml: big images through shared memory, and UDP for a remote viewer.

The profile's shape is read as Fast DDS reads it (one default participant profile, built-in
transports off, a shared-memory transport big enough for 720p frames and a UDPv4 one next
to it). Then two processes load it and pass VGA images between them; the UDP transport is
pinned to loopback in the copy they load (this machine sends nothing off it), which is the
only change made to the shipped file, so a profile Fast DDS refuses (its XML parser logs an
error and falls back to its defaults) fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros

PROFILE = Path(__file__).resolve().parents[1] / "config" / "fastdds_robot.xml"
NS = {"dds": "http://www.eprosima.com"}
VGA_RGB8 = 640 * 480 * 3

_SUBSCRIBER = """
import sys, threading, rclpy
from sensor_msgs.msg import Image
rclpy.init()
node = rclpy.create_node("profile_sub")
got, done = [], threading.Event()
def on_image(msg):
    got.append(len(msg.data) == msg.step * msg.height and msg.data[-1] == 7)
    if len(got) >= 3:
        done.set()
node.create_subscription(Image, "/profile_check", on_image, 10)
threading.Thread(target=rclpy.spin, args=(node,), daemon=True).start()
print("received intact" if done.wait(60) and all(got) else f"received {got}", flush=True)
"""

_PUBLISHER = """
import time, rclpy
from sensor_msgs.msg import Image
rclpy.init()
node = rclpy.create_node("profile_pub")
pub = node.create_publisher(Image, "/profile_check", 10)
data = bytes(640 * 480 * 3 - 1) + bytes([7])
end = time.monotonic() + 60
while time.monotonic() < end:
    if pub.get_subscription_count() > 0:
        pub.publish(Image(height=480, width=640, encoding="rgb8", step=1920, data=data))
    time.sleep(0.1)
"""


def _descriptors(root: ET.Element) -> dict[str, ET.Element]:
    found = root.findall("dds:profiles/dds:transport_descriptors/dds:transport_descriptor", NS)
    return {d.findtext("dds:transport_id", namespaces=NS): d for d in found}


def test_the_default_profile_carries_big_shared_memory_and_udp():
    root = ET.parse(PROFILE).getroot()
    [participant] = root.findall("dds:profiles/dds:participant", NS)
    assert participant.get("is_default_profile") == "true"
    rtps = participant.find("dds:rtps", NS)
    assert rtps.findtext("dds:useBuiltinTransports", namespaces=NS) == "false"
    used = [t.text for t in rtps.findall("dds:userTransports/dds:transport_id", NS)]
    descriptors = _descriptors(root)
    kinds = {descriptors[name].findtext("dds:type", namespaces=NS): name for name in used}
    assert set(kinds) == {"SHM", "UDPv4"}, kinds
    shm = descriptors[kinds["SHM"]]
    assert int(shm.findtext("dds:maxMessageSize", namespaces=NS)) >= 1920 * 1080 * 3
    assert int(shm.findtext("dds:segment_size", namespaces=NS)) >= 2 * 1920 * 1080 * 3


def _loopback_copy(tmp_path: Path) -> Path:
    """The shipped profile with its UDP transport restricted to 127.0.0.1."""
    ET.register_namespace("", NS["dds"])
    tree = ET.parse(PROFILE)
    [udp] = [
        d
        for d in _descriptors(tree.getroot()).values()
        if d.findtext("dds:type", namespaces=NS) == "UDPv4"
    ]
    allowed = ET.SubElement(udp, f"{{{NS['dds']}}}interfaceWhiteList")
    ET.SubElement(allowed, f"{{{NS['dds']}}}address").text = "127.0.0.1"
    path = tmp_path / "fastdds_loopback.xml"
    tree.write(path, xml_declaration=True, encoding="UTF-8")
    return path


def test_two_processes_on_the_profile_pass_vga_images(tmp_path):
    env = {**os.environ, "FASTDDS_DEFAULT_PROFILES_FILE": str(_loopback_copy(tmp_path))}
    env["ROS_DOMAIN_ID"] = str(50 + os.getpid() % 50)  # apart from other tests' nodes
    run = {"env": env, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    publisher = subprocess.Popen([sys.executable, "-c", _PUBLISHER], **run)
    try:
        subscriber = subprocess.run(
            [sys.executable, "-c", _SUBSCRIBER], timeout=120, check=False, **run
        )
    finally:
        publisher.kill()
        published, _ = publisher.communicate(timeout=30)
    output = subscriber.stdout + published
    assert "XMLPARSER" not in output and "Error" not in output, output
    assert "received intact" in subscriber.stdout, output
