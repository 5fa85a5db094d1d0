"""Start the oxygen lifecycle node and, unless autostart:=false, configure then activate it.

    ros2 launch oxygen_ros oxygen.launch.py params_file:=/path/robot.yaml use_sim_time:=false
        [joint_trajectory_topic:=/arm_controller/joint_trajectory]

The transitions are driven from here through lifecycle events (configure; on reaching
`inactive`, activate), so the node's own `autostart` parameter is forced off: the launch
system, not the node, owns the state machine and sees every transition it asks for.

The launch ends with the node: when its process exits (cleanly, or with an error such as a
bad parameter), and when autostart's configure or activate fails (the node would sit
unconfigured forever). Both end with an error (exit status 1) unless the node exited 0;
oxygen_ros.tools.launch_outcome says which.
"""

from launch import LaunchContext, LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    OpaqueFunction,
    RegisterEventHandler,
    Shutdown,
)
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.events.process import ProcessExited
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from lifecycle_msgs.msg import Transition

from oxygen_ros.tools.launch_outcome import FAILED_TRANSITIONS, exit_error, transition_error


def _transition(node: LifecycleNode, transition_id: int, **kwargs) -> EmitEvent:
    """Ask launch_ros to call the node's change_state service (it waits for the service)."""
    event = ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition_id)
    return EmitEvent(event=event, **kwargs)


def _on_node_exit(event: ProcessExited, context: LaunchContext) -> list:
    """End the launch with the node; an error (launch exits 1) unless it exited 0."""
    error = exit_error(event.process_name, event.returncode)
    if error is not None:
        raise RuntimeError(error)
    if context.is_shutdown:  # launch stopped the node: a second shutdown would fail
        return []
    return [Shutdown(reason=f"{event.process_name} has exited")]


def _fail_on(
    node: LifecycleNode, start_state: str, goal_state: str, condition: IfCondition
) -> RegisterEventHandler:
    """A failed configure or activate ends the launch with an error.

    Only under autostart: driving the lifecycle by hand, one may retry a failed configure.
    """
    error = transition_error("the oxygen node", start_state, goal_state)

    def fail(context: LaunchContext) -> None:
        raise RuntimeError(error)

    return RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state=start_state,
            goal_state=goal_state,
            entities=[OpaqueFunction(function=fail)],
        ),
        condition=condition,
    )


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
        # One trajectory controller without controllers.<name>.topic in the params: point
        # ~/joint_trajectory at its input (the default leaves it where it is).
        remappings=[("~/joint_trajectory", LaunchConfiguration("joint_trajectory_topic"))],
        on_exit=_on_node_exit,
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
    fail_when_a_transition_fails = [
        _fail_on(node, start, goal, autostart) for start, goal in FAILED_TRANSITIONS
    ]
    return LaunchDescription(
        [
            # No default: a misspelt or forgotten params_file must not start a robot on
            # some other robot's parameters (launch refuses, naming the argument).
            DeclareLaunchArgument("params_file", description="Node parameters YAML (required)."),
            DeclareLaunchArgument(
                "use_sim_time", default_value="false", description="Follow /clock (bag replay)."
            ),
            DeclareLaunchArgument(
                "autostart", default_value="true", description="Configure, then activate."
            ),
            DeclareLaunchArgument("namespace", default_value="", description="Node namespace."),
            DeclareLaunchArgument(
                "joint_trajectory_topic",
                default_value="~/joint_trajectory",
                description="Where ~/joint_trajectory goes, e.g. /arm_controller/joint_trajectory.",
            ),
            node,
            activate_when_inactive,
            *fail_when_a_transition_fails,
            _transition(node, Transition.TRANSITION_CONFIGURE, condition=autostart),
        ]
    )
