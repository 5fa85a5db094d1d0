"""Every simulated world (oxygen_core.worlds) as a ROS robot, and what is built on it.

loop      SimLoop: one control tick of any world (sensors, /clock, commands in, a step)
lockstep  the sim's clock held for the policy node's frames (latency sweeps)
node      `oxygen-sim [--world W]`: the rclpy node that paces the loop at a real-time factor
record    `oxygen-record [--world W]`: a world's expert episodes straight into a rosbag2
worlds    the worlds by name, each by its binding (topics, messages, node parameters):
tabletop  the tabletop's binding; messages: its topic table and messages
metaworld Meta-World's binding
evaluate  `oxygen-eval node`: the oxygen node in closed loop on the tabletop, recorded and reported
report    the closed-loop report of `oxygen-eval node` (evaluate)
compare   node parameter variants through `evaluate`, side by side
animation the base camera with instruction and narration as a GIF
"""
