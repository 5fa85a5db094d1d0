"""Numpy ray-cast rendering of the world: a fixed base camera and a wrist camera.

No GL: each frame starts from the table (precomputed once for the fixed base camera), lays
soft shadows under the objects and the fingers, then casts rays against every primitive
(boxes, balls, bowls, the arm's capsule links and the gripper's boxes) only over the pixels
of that primitive's projected bounding box, keeping the nearest hit per pixel in a depth
buffer. Lambert shading with one light makes blocks, balls and bowls (whose dark inside
shows) tell apart. Output is uint8 RGB, H x W x 3, a pure function of the world state.

Speed (a frame must cost a few milliseconds, wrist camera included, whose near objects cover
much of the image): the casting happens in camera coordinates, where the per-pixel rays are
fixed per field of view and each ray-vector dot product is an outer sum (see `raycast`);
the primitives are moved into the camera frame instead, three vectors each. A primitive
writes only a depth, a material number and a brightness per pixel, all (H, W) float32 or
uint8; the RGB image is made once at the end by looking the materials' colours up and
scaling them by the brightness.

The base camera stands across the table facing the robot, high and narrow (38 degrees), so
the workspace fills the image and the arm rarely hides it: an object is 5-6 pixels across
at the demo policy's 64 px, enough to tell a ball from a block (a wider view that also
showed the floor left it 2-3 pixels, and the trained policy did not use that camera). The
robot's left (+y, "push to the left") is the image's right. The wrist camera sits on the
palm behind the fingers, looking past the fingertips; it draws the fingers and the objects
(the arm behind it is out of view).
"""

from __future__ import annotations

import numpy as np

from oxygen_core.sim import arm, raycast
from oxygen_core.sim.scene import (
    BOWL_HEIGHT,
    BOWL_RADIUS,
    BOWL_RIM,
    COLOURS,
    TABLE_X,
    TABLE_Y,
    SceneObject,
)
from oxygen_core.sim.world import World

CAMERAS = ("base", "wrist")
BASE_EYE = np.array([0.86, 0.0, 0.80])
BASE_TARGET = np.array([0.38, 0.0, 0.0])
BASE_FOV = 38.0  # degrees, horizontal
WRIST_FOV = 80.0
WRIST_MOUNT = (0.03, -0.06)  # (along the tool axis from the wrist, along tool x) in metres
WRIST_LOOK_BEYOND = 0.12  # the wrist camera aims this far past the grip point
TABLE_MIDDLE = (np.mean(TABLE_X), np.mean(TABLE_Y))
TABLE_HALF = ((TABLE_X[1] - TABLE_X[0]) / 2, (TABLE_Y[1] - TABLE_Y[0]) / 2)
TABLE_COLOUR = np.array([186, 160, 122], np.float32)
GRID_COLOUR = TABLE_COLOUR * np.float32(0.9)
FLOOR_COLOUR = np.array([70, 72, 80], np.float32)
LINK_COLOUR = np.array([165, 168, 178], np.float32)
FINGER_COLOUR = np.array([60, 62, 70], np.float32)
# Material numbers of the fixed colours; each frame appends its objects' colours.
FLOOR, TABLE, GRID, LINK, FINGER = range(5)  # _table relies on the first three
FIXED_COLOURS = (FLOOR_COLOUR, TABLE_COLOUR, GRID_COLOUR, LINK_COLOUR, FINGER_COLOUR)
LIGHT = np.array([0.3, 0.4, 0.87]) / np.linalg.norm([0.3, 0.4, 0.87])
AMBIENT = np.float32(0.35)
NEAR = 0.01
OFF_TABLE = np.float32(1e3)  # the table coordinates of pixels that do not see it: no shadow
_CORNERS = np.array([[i >> 2 & 1, i >> 1 & 1, i & 1] for i in range(8)], float) * 2 - 1
# The image is made through a look-up table of each material's colour at this many evenly
# spaced brightnesses up to the brightest there is (a bowl's rim in full light): an error
# of at most one grey level, for a third of a float RGB image's memory traffic.
LEVELS = 256
BRIGHTEST = float(raycast.RIM_TINT)


def look_at(eye: np.ndarray, target: np.ndarray, up: np.ndarray | None = None) -> np.ndarray:
    """World <- camera rotation with camera x right, y down, z forward."""
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, np.array([0.0, 0.0, 1.0]) if up is None else up)
    right /= np.linalg.norm(right)
    return np.stack([right, np.cross(forward, right), forward], axis=1)


class _View:
    """One camera pose: the projection, and world points and directions in its frame."""

    def __init__(self, eye: np.ndarray, rotation: np.ndarray, rays: raycast.Rays, focal: float):
        self.eye, self.rotation, self.rays, self.focal = eye, rotation, rays, focal
        self.height, self.width = rays.norm2.shape
        self.light = self.direction(LIGHT)

    def point(self, p: np.ndarray) -> np.ndarray:
        return (p - self.eye) @ self.rotation

    def direction(self, v: np.ndarray) -> np.ndarray:
        return v @ self.rotation

    def bbox(self, points: np.ndarray) -> tuple[int, int, int, int] | None:
        """Pixel rows/cols (y0, y1, x0, x1) that can see anything in the convex hull of
        `points` (k, 3) in front of the near plane; None if none of it is in view."""
        cam = self.point(points)
        front = cam[:, 2] > NEAR
        seen = np.count_nonzero(front)
        if seen == 0:
            return None
        if seen < len(cam):
            # Clip the hull by the near plane: where the segments from each point in front
            # to each point behind cross it. Near objects beside the camera keep a tight box.
            a, b = cam[front][:, None], cam[~front][None]
            s = (NEAR - a[..., 2:]) / (b[..., 2:] - a[..., 2:])
            cam = np.concatenate([cam[front], (a + s * (b - a)).reshape(-1, 3)])
        uv = cam[:, :2] / cam[:, 2:]
        (u0, v0), (u1, v1) = uv.min(axis=0) * self.focal, uv.max(axis=0) * self.focal
        x0, x1 = max(int(u0 + self.width / 2), 0), min(int(u1 + self.width / 2) + 2, self.width)
        y0 = max(int(v0 + self.height / 2), 0)
        y1 = min(int(v1 + self.height / 2) + 2, self.height)
        return (y0, y1, x0, x1) if x0 < x1 and y0 < y1 else None


def _near_grid_line(x: np.ndarray) -> np.ndarray:
    tenths = x * np.float32(10)
    return np.abs(tenths - np.rint(tenths)) < 0.015


def _corners(centre: np.ndarray, half, rotation: np.ndarray | None = None) -> np.ndarray:
    """The 8 corners (8, 3) of a box: half extents along its axes (the world's if no
    rotation); the convex hull a primitive's screen box is found from."""
    local = _CORNERS * half
    return centre + (local if rotation is None else local @ rotation.T)


class _Frame:
    """The buffers one render fills: depth, material and brightness per pixel."""

    def __init__(self, material: np.ndarray):
        self.material = material
        self.depth = np.full(material.shape, np.inf, np.float32)
        self.light = np.ones(material.shape, np.float32)
        self.colours = list(FIXED_COLOURS)

    def add_colour(self, colour) -> int:
        self.colours.append(np.asarray(colour, np.float32))
        return len(self.colours) - 1

    def image(self) -> np.ndarray:
        steps = np.arange(LEVELS, dtype=np.float32) * np.float32(BRIGHTEST / (LEVELS - 1))
        lut = np.stack(self.colours)[:, None, :] * steps[None, :, None]
        lut = np.minimum(lut, 255).astype(np.uint8).reshape(-1, 3)
        index = (self.light * np.float32((LEVELS - 1) / BRIGHTEST) + 0.5).astype(np.uint16)
        index += self.material.astype(np.uint16) * LEVELS
        return np.take(lut, index, axis=0)


class Renderer:
    """Renders a World from the base or the wrist camera at a fixed image size."""

    def __init__(self, width: int = 224, height: int = 224) -> None:
        self.width, self.height = width, height
        self._rays_by_fov = {fov: self._pixel_rays(fov) for fov in (BASE_FOV, WRIST_FOV)}
        self._base = _View(BASE_EYE, look_at(BASE_EYE, BASE_TARGET), *self._rays_by_fov[BASE_FOV])
        self._base_table = self._table(self._base)

    def _pixel_rays(self, fov_deg: float) -> tuple[raycast.Rays, float]:
        focal = (self.width / 2) / np.tan(np.radians(fov_deg) / 2)
        u = np.arange(self.width) + 0.5 - self.width / 2
        v = np.arange(self.height) + 0.5 - self.height / 2
        return raycast.Rays(u / focal, v / focal), focal

    def render(self, world: World, camera: str = "base") -> np.ndarray:
        """The camera's image of the world now: uint8 (H, W, 3)."""
        if camera == "base":
            view, (material, table_x, table_y) = self._base, self._base_table
            material = material.copy()
        elif camera == "wrist":
            view = self._wrist_view(world)
            material, table_x, table_y = self._table(view)
        else:
            raise ValueError(f"unknown camera {camera!r}; choose one of {CAMERAS}")
        frame = _Frame(material)
        self._shadows(world, view, frame.light, table_x, table_y)
        for obj in world.objects:
            self._draw_object(frame, view, obj)
        self._draw_fingers(frame, view, world.pose)
        if camera == "base":
            self._draw_links(frame, view, world.pose)
        return frame.image()

    def pixel(self, world: World, camera: str, point: np.ndarray) -> tuple[int, int] | None:
        """(row, column) where a world point appears in the camera's image; None if unseen."""
        view = self._base if camera == "base" else self._wrist_view(world)
        cam = view.point(np.asarray(point))
        if cam[2] <= NEAR:
            return None
        col = int(view.focal * cam[0] / cam[2] + self.width / 2)
        row = int(view.focal * cam[1] / cam[2] + self.height / 2)
        return (row, col) if 0 <= row < self.height and 0 <= col < self.width else None

    def _wrist_view(self, world: World) -> _View:
        pose = world.pose
        rot = pose.tool_rotation
        along, back = WRIST_MOUNT
        eye = pose.wrist + rot[:, 2] * along + rot[:, 0] * back
        # Looking past the fingertips, with the finger axis horizontal in the image: the
        # fingers sit left and right of what they are about to grasp.
        forward = pose.grip + rot[:, 2] * WRIST_LOOK_BEYOND - eye
        forward /= np.linalg.norm(forward)
        right = rot[:, 1] - (rot[:, 1] @ forward) * forward
        right /= np.linalg.norm(right)
        camera = np.stack([right, np.cross(forward, right), forward], axis=1)
        return _View(eye, camera, *self._rays_by_fov[WRIST_FOV])

    def _table(self, view: _View) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The table and floor as seen by `view` (materials), and each pixel's point (x, y)
        on the table, OFF_TABLE where it sees none."""
        rays, (ex, ey, ez), rotation = view.rays, view.eye, view.rotation
        # A ray's world direction is rotation @ d, so its world z is rotation[2] . d; it meets
        # z = 0 at eye + t d, t = -ez / dz, whose x is (ex dz - ez dx) / dz: one outer sum.
        dz = rays.dot(rotation[2])
        with np.errstate(divide="ignore", invalid="ignore"):  # rays parallel to the table
            x = rays.dot(ex * rotation[2] - ez * rotation[0]) / dz
            y = rays.dot(ey * rotation[2] - ez * rotation[1]) / dz
        on_table = (dz < -1e-6) & (np.abs(x - TABLE_MIDDLE[0]) < TABLE_HALF[0])
        on_table &= np.abs(y - TABLE_MIDDLE[1]) < TABLE_HALF[1]
        # Faint 10 cm grid lines: texture for judging distance on an otherwise flat top.
        line = _near_grid_line(x) | _near_grid_line(y)
        material = on_table.astype(np.uint8)  # FLOOR 0, TABLE 1
        material += on_table & line  # GRID 2
        return material, np.where(on_table, x, OFF_TABLE), np.where(on_table, y, OFF_TABLE)

    def _shadows(self, world: World, view: _View, light, table_x, table_y) -> None:
        casters = [(o.position[:2], o.radius, o.position[2]) for o in world.objects]
        grip = world.pose.grip
        casters.append((grip[:2], 0.02, grip[2]))
        for xy, radius, height in casters:
            reach = radius * 1.3
            box = view.bbox(_corners(np.array([*xy, 0.0]), [reach, reach, 0.0]))
            if box is None:
                continue
            y0, y1, x0, x1 = box
            dx = table_x[y0:y1, x0:x1] - np.float32(xy[0])
            dy = table_y[y0:y1, x0:x1] - np.float32(xy[1])
            dist2 = (dx * dx + dy * dy) * np.float32(1 / reach**2)
            # Darker and sharper the nearer the caster is to the table.
            strength = np.float32(0.45 / (1.0 + 6.0 * max(height, 0.0)))
            dark = np.maximum(1 - dist2, 0, out=dist2)
            light[y0:y1, x0:x1] *= 1 - strength * dark

    def _paint(self, frame: _Frame, view: _View, hull, material: int, cast, *shape) -> None:
        """Cast the rays of the screen box of `hull` (points around the primitive) at one
        primitive, cast(rays, light, *shape) from `raycast`, and keep its pixels that are
        nearest. cast returns (t, cos) or (t, cos, tint), tint a per-pixel brightness."""
        box = view.bbox(hull)
        if box is None:
            return
        y0, y1, x0, x1 = box
        out = cast(view.rays.window(*box), view.light, *shape)
        depth = frame.depth[y0:y1, x0:x1]
        nearer = out[0] < depth
        if not nearer.any():
            return
        light = AMBIENT + (1 - AMBIENT) * np.clip(out[1], 0.0, 1.0)
        if len(out) == 3:
            light = light * out[2]
        np.copyto(depth, out[0], where=nearer)
        np.copyto(frame.light[y0:y1, x0:x1], light, where=nearer)
        np.copyto(frame.material[y0:y1, x0:x1], material, where=nearer)

    def _draw_object(self, frame: _Frame, view: _View, obj: SceneObject) -> None:
        material = frame.add_colour(COLOURS[obj.colour])
        if obj.shape == "ball":
            r = obj.height / 2
            hull = _corners(obj.centre, r)
            self._paint(frame, view, hull, material, raycast.sphere, view.point(obj.centre), r)
        elif obj.shape == "block":
            c, s = np.cos(obj.yaw), np.sin(obj.yaw)
            rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            half = np.full(3, obj.height / 2)
            self._paint(
                frame,
                view,
                _corners(obj.centre, half, rot),
                material,
                raycast.box,
                view.point(obj.centre),
                view.rotation.T @ rot,
                half,
            )
        else:
            # Cut below its sphere's centre, the bowl is widest at the rim.
            middle = obj.position + np.array([0.0, 0.0, BOWL_HEIGHT / 2])
            self._paint(
                frame,
                view,
                _corners(middle, [BOWL_RIM, BOWL_RIM, BOWL_HEIGHT / 2]),
                material,
                raycast.bowl,
                view.point(obj.position + np.array([0.0, 0.0, BOWL_RADIUS])),
                BOWL_RADIUS,
                view.direction(np.array([0.0, 0.0, 1.0])),
                BOWL_HEIGHT - BOWL_RADIUS,  # the rim above the sphere's centre
            )

    def _draw_box(self, frame: _Frame, view: _View, centre, rotation, half, material) -> None:
        """An oriented box given in the world (rotation: box axes to world)."""
        hull = _corners(centre, half, rotation)
        rot_cam = view.rotation.T @ rotation
        self._paint(frame, view, hull, material, raycast.box, view.point(centre), rot_cam, half)

    def _draw_fingers(self, frame: _Frame, view: _View, pose: arm.ArmPose) -> None:
        rot = pose.tool_rotation
        y_axis, z_axis = rot[:, 1], rot[:, 2]
        half_len = arm.FINGER_LENGTH / 2
        finger_half = np.array([0.009, 0.005, half_len])
        for side in (-1.0, 1.0):
            centre = pose.grip - z_axis * half_len + y_axis * side * (pose.gap / 2 + 0.005)
            self._draw_box(frame, view, centre, rot, finger_half, FINGER)

    def _draw_links(self, frame: _Frame, view: _View, pose: arm.ArmPose) -> None:
        """The arm from the base to the palm (the base camera only)."""
        rot = pose.tool_rotation
        palm = pose.grip - rot[:, 2] * (arm.FINGER_LENGTH + 0.008)
        palm_half = np.array([0.018, arm.MAX_GAP / 2 + 0.012, 0.008])
        self._draw_box(frame, view, palm, rot, palm_half, LINK)
        palm_top = pose.grip - rot[:, 2] * (arm.FINGER_LENGTH + 0.016)
        links = [
            (np.zeros(3), pose.shoulder, 0.045),
            (pose.shoulder, pose.elbow, 0.032),
            (pose.elbow, pose.wrist, 0.026),
            (pose.wrist, palm_top, 0.02),
        ]
        # One capsule per link: its screen box (from the hull of its two end cubes) stays
        # tight enough that casting it whole costs less than cutting it in pieces.
        for start, end, r in links:
            hull = np.concatenate([_corners(start, r), _corners(end, r)])
            a, b = view.point(start), view.point(end)
            self._paint(frame, view, hull, LINK, raycast.capsule, a, b, r)
