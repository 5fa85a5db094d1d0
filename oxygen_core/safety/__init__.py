"""What stands between the model and a robot's controller: joint limits and the chunk gate.

limits  a robot's per-joint position, velocity, acceleration and start-jump bounds, read
        from its URDF and a ros2_control-style `joint_limits` block
gate    every chunk checked against those bounds before it is sent; clamp, slow or reject
guard   a released chunk through the gate (the node and the in-process evaluation), tallied
"""
