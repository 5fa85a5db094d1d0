"""Tools around the oxygen node: bag replay, the demo, reports, live views, evaluation.

The runtime node (oxygen_ros.node and the modules it imports) runs on the robot; these modules
drive the same frame loop from a rosbag (replay, live), write what it publishes to a bag, build
the report (report), run the demo (demo, demo_bag), watch the node (foxglove,
viewer_configs), run the tabletop simulation and its closed-loop evaluation (sim), evaluate
many bags and configurations on Ray (eval) and find installed resources (package_share).
They import the node's modules, never the other way round, so the robot's process loads none
of them. configure is here too: resolving a params file outside a running node
(load_settings) is something only the tools need.
"""
