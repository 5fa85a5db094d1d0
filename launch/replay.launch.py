"""Replay a bag through the oxygen node on simulated time.

    ros2 launch oxygen_ros replay.launch.py bag:=/path/to/bag params_file:=/path/robot.yaml

The node runs with use_sim_time (default true here), so its frame timer, stamps and input
freshness follow the bag's /clock. `ros2 bag play` starts only once the node is active:
frames played while it is still compiling would be skipped, not processed; with
autostart:=false it waits for you to activate the node. The launch ends when the bag does.
Every argument of oxygen.launch.py (use_sim_time, autostart, namespace) is honoured.
Record the outputs with, e.g.,
`ros2 bag record /oxygen/action_chunk /oxygen/narration /oxygen/stats`.
The whole bag is played: a bag that already holds /clock or /oxygen/* outputs would
collide with the player's clock and the node's outputs, so record robot bags with the
inputs only (cameras, joint states, instruction).
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    IncludeLaunchDescription,
    RegisterEventHandler,
)
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.event_handlers import OnStateTransition


def generate_launch_description() -> LaunchDescription:
    node = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(Path(__file__).with_name("oxygen.launch.py"))),
        launch_arguments={
            "params_file": LaunchConfiguration("params_file"),
            "use_sim_time": LaunchConfiguration("use_sim_time"),
            "autostart": LaunchConfiguration("autostart"),
        }.items(),
    )
    # --clock publishes /clock at this rate; the node's timer cannot tick finer than it.
    play = ExecuteProcess(
        cmd=[
            "ros2",
            "bag",
            "play",
            LaunchConfiguration("bag"),
            "--clock",
            LaunchConfiguration("clock_hz"),
            "--rate",
            LaunchConfiguration("rate"),
        ],
        output="screen",
    )
    play_once_active = RegisterEventHandler(
        OnStateTransition(goal_state="active", entities=[play], handle_once=True)
    )
    end_with_the_bag = RegisterEventHandler(
        OnProcessExit(
            target_action=play, on_exit=[EmitEvent(event=Shutdown(reason="the bag has ended"))]
        )
    )
    return LaunchDescription(
        [
            DeclareLaunchArgument("bag", description="rosbag2 folder to play."),
            DeclareLaunchArgument("params_file", description="Node parameters YAML (required)."),
            # Declared here with replay's defaults; oxygen.launch.py's own defaults would
            # otherwise apply (use_sim_time false), since its declarations come later.
            DeclareLaunchArgument(
                "use_sim_time", default_value="true", description="Follow the bag's /clock."
            ),
            DeclareLaunchArgument(
                "autostart", default_value="true", description="Configure, then activate."
            ),
            DeclareLaunchArgument("rate", default_value="1.0", description="Playback speed."),
            DeclareLaunchArgument("clock_hz", default_value="200", description="/clock rate."),
            node,
            play_once_active,
            end_with_the_bag,
        ]
    )
