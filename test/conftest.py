"""Process environment shared by every test, set when pytest loads this file.

That is before any test module imports rclpy or jax, which read these variables once.
DDS discovery is kept on loopback (the only traffic this workplace allows); each session
gets its own ROS domain so parallel runs do not see each other's topics; ROS logs go to a
temporary folder; JAX runs on the CPU in full float32, so numeric tests compare like with
like on any machine. A value already set in the environment wins, except the discovery range.
"""

import atexit
import os
import shutil
import tempfile

os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
# 1..100: domain 0 is everyone's default, and ids above ~101 collide with ephemeral ports.
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
if "ROS_LOG_DIR" not in os.environ:
    os.environ["ROS_LOG_DIR"] = tempfile.mkdtemp(prefix="oxygen-test-ros-log-")
    atexit.register(shutil.rmtree, os.environ["ROS_LOG_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "0")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "float32")
