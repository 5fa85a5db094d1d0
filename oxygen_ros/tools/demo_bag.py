"""A synthetic robot recording: the bag the demo and the replay tests play.

The scene is a table seen from above with three coloured objects drifting on it and a
gripper that reaches for the object the current instruction names. Three cameras see it:
a fixed base camera and two wrist cameras that ride with the gripper. The arm's joint
state follows the gripper (the first two joints by planar inverse kinematics, the wrist
joints sway, the last one closes near the target). Halfway through, the instruction
changes and the gripper turns to another object, so the memory stream has something to
remember and the narration something new to see.

Everything is a pure function of `Scene` (seeded), so the bundled bag can be rebuilt
bit for bit (which is why messages are serialised by rosbags here, not built with
oxygen_ros.convert and rclpy: rclpy's CDR leaves the alignment padding bytes unset, so its
bytes differ from run to run where the values do not):

    oxygen-bag synth data/demo_bag --params config/tiny.yaml

The recording starts on a whole second and sensors are stamped half a sensor period off
it, so with a frame period that is a multiple of the sensor period no message lands on a
frame tick (ticks fall on multiples of the period, see oxygen_ros.tools.replay_job): a live node
that keeps up then sees the same inputs per frame as an offline replay.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from oxygen_core.clock import NS_PER_S
from oxygen_ros.convert import ns_to_stamp
from oxygen_ros.tools.bagio import STORAGES, BagMessage, BagWriter, Storage, typestore
from oxygen_ros.tools.configure import load_settings

# World: the unit square seen from above; y grows towards the robot's base.
_TABLE = np.array([186, 150, 110], np.float32)  # wood
_FLOOR = np.array([40, 40, 48], np.uint8)
_GRIPPER = np.array([30, 30, 30], np.uint8)
_SHOULDER = np.array([0.5, 1.15])  # below the table edge, out of the base camera's view
_LINK_M = 0.6  # both arm links (world units)
_WRIST_VIEW = 0.35  # side of the world square a wrist camera sees
_WRIST_OFFSET = 0.08  # each wrist camera sits this far left/right of the gripper


@dataclasses.dataclass(frozen=True)
class SceneObject:
    name: str
    colour: tuple[int, int, int]
    shape: str  # "box", "ball" or "bowl"
    size: float  # half side or radius (world units)


OBJECTS = (
    SceneObject("red block", (200, 40, 40), "box", 0.06),
    SceneObject("blue ball", (40, 70, 210), "ball", 0.055),
    SceneObject("yellow bowl", (230, 200, 40), "bowl", 0.08),
)


@dataclasses.dataclass(frozen=True)
class Scene:
    """What to record. Instructions take equal shares of the recording, in order."""

    seconds: float = 12.0
    sensor_hz: float = 20.0
    image_size: int = 96
    start_ns: int = 1_700_000_000 * 10**9  # a whole second: frame ticks fall on its grid
    seed: int = 0
    instructions: tuple[str, ...] = (
        "pick up the red block",
        "put the blue ball in the yellow bowl",
    )
    targets: tuple[str, ...] = ("red block", "blue ball")  # what the gripper reaches for


@dataclasses.dataclass(frozen=True)
class SceneTopics:
    """Where the recording goes: the topics the node's parameters name."""

    cameras: tuple[str, ...]
    joint_state: str
    joint_names: tuple[str, ...]
    instruction: str


# --------------------------------------------------------------------------- motion


class Motion:
    """Object paths (seeded Lissajous drifts), the gripper chasing its target, the arm."""

    def __init__(self, scene: Scene, joints: int) -> None:
        rng = np.random.default_rng(scene.seed)
        n = len(OBJECTS)
        self.centre = rng.uniform(0.3, 0.7, (n, 2))
        self.amplitude = rng.uniform(0.08, 0.18, (n, 2))
        self.freq = rng.uniform(0.05, 0.15, (n, 2))  # Hz
        self.phase = rng.uniform(0.0, 2 * math.pi, (n, 2))
        self.sway = rng.uniform(0.2, 0.6, max(joints - 3, 0))  # Hz of the wrist joints
        self.joints = joints
        self.gripper = np.array([0.5, 0.85])

    def objects(self, t: float) -> np.ndarray:
        """[objects, 2] world positions at t seconds."""
        return self.centre + self.amplitude * np.sin(2 * math.pi * self.freq * t + self.phase)

    def step(self, target: np.ndarray, dt: float) -> np.ndarray:
        """Move the gripper towards target (time constant 0.6 s); its new position."""
        self.gripper = self.gripper + (target - self.gripper) * (1 - math.exp(-dt / 0.6))
        return self.gripper

    def arm(self, target: np.ndarray, t: float) -> list[float]:
        """Joint positions: shoulder and elbow (radians) place the gripper by planar inverse
        kinematics, the wrist joints sway, the last is the gripper opening (metres)."""
        reach = self.gripper - _SHOULDER
        distance = min(float(np.hypot(*reach)), 2 * _LINK_M - 1e-6)
        elbow = 2 * math.acos(distance / (2 * _LINK_M))
        shoulder = math.atan2(reach[0], -reach[1]) - elbow / 2
        wrist = [0.3 * math.sin(2 * math.pi * f * t) for f in self.sway]
        opening = 0.04 * min(1.0, float(np.hypot(*(target - self.gripper))) / 0.1)
        return [shoulder, elbow, *wrist, opening][: self.joints]


# --------------------------------------------------------------------------- pictures


def render(
    objects: np.ndarray,
    gripper: np.ndarray,
    centre: np.ndarray,
    view: float,
    size: int,
    draw_gripper: bool,
) -> np.ndarray:
    """uint8 [size, size, 3]: the world square of side `view` around `centre`."""
    axis = (np.arange(size) + 0.5) / size - 0.5
    x, y = np.broadcast_arrays(centre[0] + axis[None, :] * view, centre[1] + axis[:, None] * view)
    shade = 0.85 + 0.15 * (1 - y)  # light falls from the far edge
    image = (_TABLE * np.clip(shade, 0.0, 1.0)[..., None]).astype(np.uint8)
    for obj, (ox, oy) in zip(OBJECTS, objects, strict=True):
        image[_mask(obj, x - ox, y - oy)] = obj.colour
    if draw_gripper:
        dx, dy = x - gripper[0], y - gripper[1]
        ring = np.abs(np.hypot(dx, dy) - 0.04) < 0.008
        cross = (np.abs(dx) < 0.004) & (np.abs(dy) < 0.03)
        image[ring | cross] = _GRIPPER
    outside = (x < 0) | (x > 1) | (y < 0) | (y > 1)
    image[outside] = _FLOOR
    return image


def _mask(obj: SceneObject, dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    if obj.shape == "box":
        return (np.abs(dx) < obj.size) & (np.abs(dy) < obj.size)
    radius = np.hypot(dx, dy)
    if obj.shape == "ball":
        return radius < obj.size
    return (radius < obj.size) & (radius > 0.6 * obj.size)  # bowl: a ring seen from above


def camera_views(objects: np.ndarray, gripper: np.ndarray, size: int) -> list[np.ndarray]:
    """Base camera (whole table), left and right wrist cameras (around the gripper)."""
    offset = np.array([_WRIST_OFFSET, 0.0])
    return [
        render(objects, gripper, np.array([0.5, 0.5]), 1.0, size, draw_gripper=True),
        render(objects, gripper, gripper - offset, _WRIST_VIEW, size, draw_gripper=False),
        render(objects, gripper, gripper + offset, _WRIST_VIEW, size, draw_gripper=False),
    ]


# --------------------------------------------------------------------------- messages


def scene_messages(scene: Scene, topics: SceneTopics) -> Iterator[BagMessage]:
    """The recording in time order: images, joint states and instruction changes."""
    if not 1 <= len(topics.cameras) <= 3:
        raise ValueError(f"the scene has 3 cameras; got {len(topics.cameras)} camera topics")
    if len(scene.targets) != len(scene.instructions):
        raise ValueError(f"{len(scene.targets)} targets for {len(scene.instructions)} instructions")
    motion, names = Motion(scene, len(topics.joint_names)), [o.name for o in OBJECTS]
    dt = 1.0 / scene.sensor_hz
    count = round(scene.seconds * scene.sensor_hz)
    share = count / len(scene.instructions)
    for j in range(count):
        t = (j + 0.5) * dt
        time_ns = scene.start_ns + round(t * NS_PER_S)
        phase = min(int(j / share), len(scene.instructions) - 1)
        if j == math.ceil(phase * share):
            yield _string(topics.instruction, time_ns, scene.instructions[phase])
        objects = motion.objects(t)
        target = objects[names.index(scene.targets[phase])]
        gripper = motion.step(target, dt)
        yield _joint_state(topics, time_ns, motion.arm(target, t))
        views = camera_views(objects, gripper, scene.image_size)
        for i, topic in enumerate(topics.cameras):
            yield _image(topic, time_ns, views[i], f"camera{i}_optical_frame")


def _header(time_ns: int, frame_id: str) -> object:
    types = typestore().types
    time = ns_to_stamp(time_ns)  # rclpy's, read into the rosbags type the bag is built of
    stamp = types["builtin_interfaces/msg/Time"](sec=time.sec, nanosec=time.nanosec)
    return types["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)


def _image(topic: str, time_ns: int, pixels: np.ndarray, frame_id: str) -> BagMessage:
    height, width, _ = pixels.shape
    msg = typestore().types["sensor_msgs/msg/Image"](
        header=_header(time_ns, frame_id),
        height=height,
        width=width,
        encoding="rgb8",
        is_bigendian=0,
        step=width * 3,
        data=pixels.reshape(-1),
    )
    return _message(topic, "sensor_msgs/msg/Image", time_ns, msg)


def _joint_state(topics: SceneTopics, time_ns: int, positions: Sequence[float]) -> BagMessage:
    empty = np.zeros(0, np.float64)
    msg = typestore().types["sensor_msgs/msg/JointState"](
        header=_header(time_ns, "base_link"),
        name=list(topics.joint_names),
        position=np.asarray(positions, np.float64),
        velocity=empty,
        effort=empty,
    )
    return _message(topics.joint_state, "sensor_msgs/msg/JointState", time_ns, msg)


def _string(topic: str, time_ns: int, text: str) -> BagMessage:
    msg = typestore().types["std_msgs/msg/String"](data=text)
    return _message(topic, "std_msgs/msg/String", time_ns, msg)


def _message(topic: str, msgtype: str, time_ns: int, msg: object) -> BagMessage:
    return BagMessage(topic, msgtype, time_ns, bytes(typestore().serialize_cdr(msg, msgtype)))


def write_scene(path: Path, scene: Scene, topics: SceneTopics, storage: Storage = "mcap") -> int:
    """Record the scene into a new bag folder; the number of messages written."""
    written = 0
    with BagWriter(path, storage) as writer:
        for message in scene_messages(scene, topics):
            writer.write(message)
            written += 1
    return written


def scene_topics(params: Path) -> SceneTopics:
    """The topics a node with this params YAML subscribes to."""
    settings, names = load_settings(params)
    return SceneTopics(
        cameras=names.cameras,
        joint_state=names.joint_state,
        joint_names=settings.node.joint_names,
        instruction=names.instruction,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`oxygen-bag synth OUT`: write the synthetic scene as a new bag."""
    parser = argparse.ArgumentParser(prog="oxygen-bag synth", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="bag folder to create (must not exist)")
    parser.add_argument("--params", type=Path, default=Path("config/tiny.yaml"))
    parser.add_argument("--seconds", type=float, default=Scene.seconds)
    parser.add_argument("--sensor-hz", type=float, default=Scene.sensor_hz)
    parser.add_argument("--image-size", type=int, default=Scene.image_size)
    parser.add_argument("--seed", type=int, default=Scene.seed, help="the scene's noise")
    parser.add_argument("--storage", choices=STORAGES, default="mcap")
    args = parser.parse_args(argv)
    scene = Scene(
        seconds=args.seconds,
        sensor_hz=args.sensor_hz,
        image_size=args.image_size,
        seed=args.seed,
    )
    count = write_scene(args.out, scene, scene_topics(args.params), args.storage)
    print(f"wrote {count} messages ({scene.seconds:g} s) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
