"""A kinematic tabletop world for closed-loop evaluation, with no ROS imports.

    arm       the 6-joint arm and gripper: JOINT_NAMES, limits, forward and top-down inverse
              kinematics, the servo step
    scene     objects (colour, shape, pose) and seeded non-overlapping placement
    world     World: joint targets in, grasp/release/fall/push rules, sim time
    tasks     task families, instruction strings, success checks, make_task(family, seed)
    render    numpy ray casting: base and wrist cameras, uint8 RGB
    expert    the scripted expert: joint targets plus narration and memory lines per step
    executor  TrajectoryExecutor: joint trajectories executed as a trajectory controller does
    jtc       the Jazzy/Kilted joint_trajectory_controller model behind controller="jtc"
    seam      the hand-over metric between consecutive trajectories (jump and jerk)
    runner    expert episodes without ROS; bench: `oxygen-bench sim`

A ROS node drives it as: task = make_task(family, seed); world = task.new_world(); each
control tick: targets = executor.command(world.time) (or expert.act(world, dt).targets);
world.step(targets, dt); publish renderer.render(world, camera) and world.joints; stop at
task.verdict(world) (True or False once decided) or task.time_limit.
"""
