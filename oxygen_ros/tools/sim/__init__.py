"""The simulated tabletop (oxygen_core.sim) as a ROS robot, and what is built on it.

messages  SIM_TOPICS (what the sim publishes) and the messages, built one way for all
loop      SimLoop: one control tick (sensors, /clock, trajectories in, world step)
node      `oxygen-sim`: the rclpy node that paces SimLoop at a real-time factor
record    `oxygen-record`: expert episodes straight into a rosbag2, no DDS
evaluate  `oxygen-eval node`: the oxygen node in closed loop on the sim, recorded and reported
report    the closed-loop report of `oxygen-eval node` (evaluate)
compare   node parameter variants through `evaluate`, side by side
animation the base camera with instruction and narration as a GIF
"""
