"""Meta-World (MuJoCo, the Sawyer arm) as a benchmark the oxygen policy is driven on, with no
ROS imports.

    env      MetaWorldEnv: an MT10 task's env for a seed, actions checked and clipped, the
             corner2 camera, the state LeRobot's Meta-World setup reads, the Sawyer's joints,
             the benchmark's success flag and step limit; Expert: the task's scripted policy
    tasks    the MT10 task list, one instruction per task, narration and memory lines
    episode  MetaWorld: the world the sim runs (oxygen_core.worlds), chunks run at 80 Hz

The ROS side (`oxygen-sim --world metaworld`) is its binding, oxygen_ros.tools.sim.metaworld.
"""
