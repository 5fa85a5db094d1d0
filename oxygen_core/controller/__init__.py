"""Models of the controllers the node drives, and what it sends each of them.

`jtc` is ros2_control's joint_trajectory_controller as released for Jazzy and Kilted (the
sim's executor, oxygen-bag limit-check and the node's output shaping share it); `shaping` turns
the rows a frame releases into the trajectory such a controller runs without a step.
Neither imports ROS, the sim or the trainer: the node's process loads them.
"""
