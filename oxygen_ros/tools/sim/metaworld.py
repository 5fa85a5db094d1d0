"""Meta-World's binding (tools.sim.worlds): the Sawyer as a ROS robot of ActionChunk
commands (end-effector deltas and gripper effort), its topics and messages.

The outcome goes out as std_msgs/String JSON: oxygen_ros/EpisodeOutcome holds the
tabletop's fields (family, contacts, seams), not these.
"""

from __future__ import annotations

import array
import collections
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Header, String

from oxygen_core.metaworld.env import ACTION_NAMES, SAWYER_JOINTS, STATE_NAMES
from oxygen_core.metaworld.episode import CONTROL_PERIOD_NS, Chunk, MetaWorld, MetaWorldEpisode
from oxygen_core.metaworld.tasks import MT10_TASKS
from oxygen_core.train.records import METAWORLD_DART
from oxygen_core.worlds import Refused
from oxygen_ros import convert
from oxygen_ros.convert import ns_to_stamp, stamp_to_ns
from oxygen_ros.msg import ActionChunk
from oxygen_ros.ros_args import ParamDoc
from oxygen_ros.tools.sim.worlds import expert_noise
from oxygen_ros.tools.sim_host import INSTRUCTION, SimTopic

_PERIOD_TOLERANCE_NS = 1_000  # a chunk's control_period may differ by rounding only
ACTION_TOPIC = "/oxygen/action_chunk"  # the default input: the oxygen node's ~/action_chunk

TOPICS: tuple[SimTopic, ...] = (
    SimTopic("clock", "/clock", Clock, "sim time, one env step per tick"),
    SimTopic(
        "camera/corner2",
        "/metaworld/corner2/image_raw",
        Image,
        "corner2 camera, rgb8, upright",
        parameter="camera_topic",
    ),
    SimTopic(
        "state",
        "/metaworld/state",
        JointState,
        f"the policy's state {list(STATE_NAMES)} (m; opening 0..1)",
        parameter="state_topic",
    ),
    SimTopic(
        "joints",
        "/metaworld/joint_states",
        JointState,
        "the Sawyer's arm joints (rad) and fingers (m)",
        parameter="joint_state_topic",
    ),
    INSTRUCTION,
    SimTopic("episode", "/metaworld/episode", String, "one JSON outcome per finished episode"),
    SimTopic("narration", "/metaworld/narration", String, "the episode's phase, on change"),
    SimTopic("memory", "/metaworld/memory", String, "a line per phase reached"),
    SimTopic(
        "expert_chunk",
        "/metaworld/expert/action_chunk",
        ActionChunk,
        "the scripted expert's one-row chunks",
    ),
)


def chunk_rejection(msg: ActionChunk) -> str | None:
    """Why the chunk must not reach the env (None: it may): its shape, names, values or
    control period."""
    horizon, width = msg.horizon, msg.action_dim
    if width != len(ACTION_NAMES) or horizon < 1 or len(msg.actions) != horizon * width:
        return "shape"
    if tuple(msg.joint_names) != ACTION_NAMES:
        return "action_names"
    if not np.isfinite(np.asarray(msg.actions, dtype=np.float64)).all():
        return "non_finite"
    if abs(stamp_to_ns(msg.control_period) - CONTROL_PERIOD_NS) > _PERIOD_TOLERANCE_NS:
        return "control_period"
    return None


def chunk_msg(rows: np.ndarray, t: int, sequence: int = 0) -> ActionChunk:
    """H x 4 actions laid out as the oxygen node publishes them, stamped t (ns)."""
    actions = np.ascontiguousarray(rows, dtype=np.float32)
    horizon, width = actions.shape
    return ActionChunk(
        header=Header(stamp=ns_to_stamp(t)),
        sequence=sequence,
        horizon=horizon,
        action_dim=width,
        actions=array.array("f", actions.tobytes()),
        joint_names=list(ACTION_NAMES),
        control_period=Duration(nanosec=CONTROL_PERIOD_NS),
        deadline_met=True,
    )


class MetaWorldBinding:
    """Meta-World's messages and node parameters."""

    name = "metaworld"
    world_class = MetaWorld
    node_name = "oxygen_metaworld_sim"
    topics = TOPICS
    names_parameter = ParamDoc("tasks", list(MT10_TASKS), "MT10 tasks, run interleaved.")
    parameters = (
        ParamDoc("camera_size", 224, "Width and height of the corner2 images.", span=(16, 1024)),
        ParamDoc("camera_rate_hz", 20.0, "Camera frames per sim second (80 Hz / a whole number)."),
        ParamDoc(
            "expert_noise",
            0.0,
            "policy expert: sigma of DART bursts on dx, dy, dz (training data; 0: none).",
        ),
    )
    command = ParamDoc("action_topic", ACTION_TOPIC, "ActionChunk input (external policy).")
    command_class = ActionChunk
    shown_key = "expert_chunk"
    frames_known = True
    summary_doc = (
        "Meta-World's MT10 tasks (MuJoCo, the Sawyer arm) as a ROS 2 robot: it owns sim "
        "time (/clock), publishes the corner2 camera, the policy's state, the Sawyer's "
        "joints and each episode's instruction, runs the action chunks a policy publishes "
        "at 80 Hz (row k at the chunk's stamp + k steps; none running: hold), and publishes "
        "each episode's outcome as JSON on /metaworld/episode. Rendering is headless "
        "(MUJOCO_GL=egl unless set)."
    )
    examples = (
        "oxygen-sim --world metaworld --ros-args -p policy:=expert -p episodes:=3",
        "oxygen-sim --world metaworld --ros-args -p tasks:=[drawer-open-v3] "
        "-p wait_for_peers_s:=300.0",
    )

    def world(self, p: dict[str, Any]) -> MetaWorld:
        return MetaWorld(p["camera_size"], expert_noise(p, METAWORLD_DART))

    def sensor_messages(self, sim: MetaWorldEpisode, t_ns: int) -> Iterable[tuple[str, Any]]:
        stamp = ns_to_stamp(t_ns)
        yield (
            "state",
            convert.joint_state_msg(STATE_NAMES, sim.obs.state, stamp=stamp, frame_id="world"),
        )
        yield (
            "joints",
            convert.joint_state_msg(SAWYER_JOINTS, sim.obs.joints, stamp=stamp, frame_id=""),
        )

    def image_message(self, camera: str, pixels: np.ndarray, t_ns: int) -> tuple[str, Any]:
        msg = convert.rgb8_image_msg(
            pixels, stamp=ns_to_stamp(t_ns), frame_id=f"{camera}_optical_frame"
        )
        return f"camera/{camera}", msg

    def command_msg(self, command: Chunk, t_ns: int) -> ActionChunk:
        return chunk_msg(command.rows, command.start_ns)

    def command_of(self, msg: ActionChunk, start_ns: int) -> Chunk | Refused:
        reason = chunk_rejection(msg)
        if reason is not None:
            return Refused(reason, f"action chunk refused: {reason}")
        return Chunk(start_ns, convert.action_chunk_rows(msg))

    def command_frame(self, msg: ActionChunk) -> int | None:
        return msg.sequence

    def outcome_msg(self, outcome: dict[str, Any]) -> String:
        return String(data=json.dumps(outcome))

    def summary(self, outcomes: Sequence[dict[str, Any]]) -> str:
        """Success per task, resets' wall time, rejections, renders, lockstep timeouts."""
        per_task: dict[str, list[bool]] = collections.defaultdict(list)
        rejected: collections.Counter[str] = collections.Counter()
        for o in outcomes:
            per_task[o["task"]].append(o["success"])
            rejected.update(o["chunks_rejected"])
        success = ", ".join(f"{t} {sum(s)}/{len(s)}" for t, s in per_task.items())
        renders = sum(o["renders"] for o in outcomes)
        render_s = sum(o["render_wall_s"] for o in outcomes)
        return (
            f"success {success}; {sum(o['reset_wall_s'] for o in outcomes):.1f} s of resets; "
            f"chunks accepted {sum(o['chunks_accepted'] for o in outcomes)}, rejected "
            f"{dict(rejected)}; {renders} renders at {renders / render_s if render_s else 0:.0f}/s"
            f"; {sum(o['lockstep_timeouts'] for o in outcomes)} lockstep frames timed out"
        )

    def outcome_line(self, o: dict[str, Any]) -> str:
        return outcome_line(o)


def outcome_line(o: dict[str, Any]) -> str:
    """One episode's outcome in a line."""
    return (
        f"episode {o['index'] + 1}/{o['episodes']} {o['task']} seed {o['seed']}: "
        f"{'success' if o['success'] else 'failure'} after {o['steps']}/"
        f"{o['max_path_length']} steps ({o['duration_s']:.2f} s of sim time, {o['wall_s']:.2f} "
        f"s wall of which {o['reset_wall_s']:.2f} s reset); chunks accepted "
        f"{o['chunks_accepted']}, rejected "
        f"{o['chunks_rejected']}; {o['held_steps']} steps held, {o['actions_clipped']} "
        f"clipped; memory {o['memory']}"
    )


BINDING = MetaWorldBinding()
