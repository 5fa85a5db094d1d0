"""Time as the node keeps it: integer nanoseconds, as ROS stamps and rosbag2 do.

Ticks, stamps and chunk rows are counted in integer nanoseconds so that sums and
comparisons are exact; seconds appear only at the edges (parameters, logs, reports). This
is the one definition of the conversion factor, for the core and for every ROS module.
"""

NS_PER_S = 1_000_000_000
