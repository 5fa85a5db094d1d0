"""Start the oxygen lifecycle node and, unless autostart:=false, configure then activate it.

    ros2 launch oxygen_ros oxygen.launch.py params_file:=/path/robot.yaml use_sim_time:=false

The transitions are driven from here through lifecycle events (configure; on reaching
`inactive`, activate), so the node's own `autostart` parameter is forced off: the launch
system, not the node, owns the state machine and sees every transition it asks for.
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from lifecycle_msgs.msg import Transition


def _transition(node: LifecycleNode, transition_id: int, **kwargs) -> EmitEvent:
    """Ask launch_ros to call the node's change_state service (it waits for the service)."""
    event = ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition_id)
    return EmitEvent(event=event, **kwargs)


def generate_launch_description() -> LaunchDescription:
    params_file = LaunchConfiguration("params_file")
    use_sim_time = LaunchConfiguration("use_sim_time")
    autostart = IfCondition(LaunchConfiguration("autostart"))
    node = LifecycleNode(
        package="oxygen_ros",
        executable="oxygen_node",
        name="oxygen",
        namespace=LaunchConfiguration("namespace"),
        output="screen",
        parameters=[
            params_file,
            {
                "use_sim_time": ParameterValue(use_sim_time, value_type=bool),
                "autostart": False,
            },
        ],
    )
    activate_when_inactive = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state="configuring",
            goal_state="inactive",
            entities=[_transition(node, Transition.TRANSITION_ACTIVATE)],
        ),
        condition=autostart,
    )
    # launch/ and config/ sit side by side both in the checkout and in share/oxygen_ros.
    default_params = str(Path(__file__).parent.parent / "config" / "tiny.yaml")
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "params_file", default_value=default_params, description="Node parameters YAML."
            ),
            DeclareLaunchArgument(
                "use_sim_time", default_value="false", description="Follow /clock (bag replay)."
            ),
            DeclareLaunchArgument(
                "autostart", default_value="true", description="Configure, then activate."
            ),
            DeclareLaunchArgument("namespace", default_value="", description="Node namespace."),
            node,
            activate_when_inactive,
            _transition(node, Transition.TRANSITION_CONFIGURE, condition=autostart),
        ]
    )
