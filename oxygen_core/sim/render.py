"""Numpy ray-cast rendering of the world: a fixed base camera and a wrist camera.

No GL: each frame starts from the table (precomputed once for the fixed base camera), lays
soft shadows under the objects and the fingers, then casts rays against every primitive
(boxes, balls, bowls, the arm's capsule links and the gripper's boxes) only over the pixels
of that primitive's projected bounding box, keeping the nearest hit per pixel in a depth
buffer. Lambert shading with one light makes blocks, balls and bowls (whose dark inside
shows) tell apart. Output is uint8 RGB, H x W x 3, a pure function of the world state.

The base camera stands across the table facing the robot, a little to its left, so the whole
workspace is in view and the arm rarely hides it; the robot's left (+y, "push to the left")
is therefore the image's right. The wrist camera sits on the palm behind the fingers,
looking past the fingertips; it draws the fingers and the objects (the arm behind it is out
of view).
"""

from __future__ import annotations

import numpy as np

from oxygen_core.sim import arm, raycast
from oxygen_core.sim.scene import BOWL_HEIGHT, BOWL_RADIUS, COLOURS, SceneObject
from oxygen_core.sim.world import World

CAMERAS = ("base", "wrist")
BASE_EYE = np.array([0.98, 0.12, 0.60])
BASE_TARGET = np.array([0.36, 0.0, 0.02])
BASE_FOV = 56.0  # degrees, horizontal
WRIST_FOV = 80.0
WRIST_MOUNT = (0.03, -0.06)  # (along the tool axis from the wrist, along tool x) in metres
WRIST_LOOK_BEYOND = 0.12  # the wrist camera aims this far past the grip point
TABLE_X, TABLE_Y = (-0.15, 0.75), (-0.45, 0.45)
TABLE_COLOUR = np.array([186, 160, 122], np.float32)
GRID_COLOUR = TABLE_COLOUR * np.float32(0.9)
FLOOR_COLOUR = np.array([70, 72, 80], np.float32)
LINK_COLOUR = np.array([165, 168, 178], np.float32)
FINGER_COLOUR = np.array([60, 62, 70], np.float32)
LIGHT = (np.array([0.3, 0.4, 0.87]) / np.linalg.norm([0.3, 0.4, 0.87])).astype(np.float32)
AMBIENT = 0.35
NEAR = 0.01
LINK_PIECE = 0.12  # links are cast in pieces this long: their screen boxes stay small
_CORNERS = np.array([[i >> 2 & 1, i >> 1 & 1, i & 1] for i in range(8)], bool)


def look_at(eye: np.ndarray, target: np.ndarray, up: np.ndarray | None = None) -> np.ndarray:
    """World <- camera rotation with camera x right, y down, z forward."""
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, np.array([0.0, 0.0, 1.0]) if up is None else up)
    right /= np.linalg.norm(right)
    return np.stack([right, np.cross(forward, right), forward], axis=1)


class _View:
    """One camera pose: rays per pixel in world coordinates and the projection."""

    def __init__(self, eye: np.ndarray, rotation: np.ndarray, unit_rays: np.ndarray, focal: float):
        self.eye, self.rotation, self.focal = eye.astype(np.float32), rotation, focal
        self.rays = (unit_rays @ rotation.T).astype(np.float32)  # (H, W, 3) world directions
        self.height, self.width = unit_rays.shape[:2]

    def bbox(self, points: np.ndarray, pad: float) -> tuple[int, int, int, int] | None:
        """Pixel rows/cols (y0, y1, x0, x1) that can see anything within `pad` of the box
        around `points` (k, 3); None if it is out of view."""
        low, high = points.min(axis=0) - pad, points.max(axis=0) + pad
        corners = np.where(_CORNERS, high, low)
        cam = (corners - self.eye) @ self.rotation
        if np.all(cam[:, 2] <= NEAR):
            return None
        if np.any(cam[:, 2] <= NEAR):
            return 0, self.height, 0, self.width
        u = self.focal * cam[:, 0] / cam[:, 2] + self.width / 2
        v = self.focal * cam[:, 1] / cam[:, 2] + self.height / 2
        x0, x1 = max(int(u.min()), 0), min(int(np.ceil(u.max())) + 1, self.width)
        y0, y1 = max(int(v.min()), 0), min(int(np.ceil(v.max())) + 1, self.height)
        return (y0, y1, x0, x1) if x0 < x1 and y0 < y1 else None


class Renderer:
    """Renders a World from the base or the wrist camera at a fixed image size."""

    def __init__(self, width: int = 224, height: int = 224) -> None:
        self.width, self.height = width, height
        self._rays_by_fov = {fov: self._unit_rays(fov) for fov in (BASE_FOV, WRIST_FOV)}
        self._base = _View(
            BASE_EYE,
            look_at(BASE_EYE, BASE_TARGET),
            self._rays_by_fov[BASE_FOV][0],
            self._rays_by_fov[BASE_FOV][1],
        )
        self._base_table, self._base_table_xy = self._table(self._base)

    def _unit_rays(self, fov_deg: float) -> tuple[np.ndarray, float]:
        focal = (self.width / 2) / np.tan(np.radians(fov_deg) / 2)
        u = np.arange(self.width) + 0.5 - self.width / 2
        v = np.arange(self.height) + 0.5 - self.height / 2
        uu, vv = np.meshgrid(u / focal, v / focal)
        rays = np.stack([uu, vv, np.ones_like(uu)], axis=-1)
        return rays / np.linalg.norm(rays, axis=-1, keepdims=True), focal

    def render(self, world: World, camera: str = "base") -> np.ndarray:
        """The camera's image of the world now: uint8 (H, W, 3)."""
        if camera == "base":
            view, image, table_xy = self._base, self._base_table.copy(), self._base_table_xy
        elif camera == "wrist":
            view = self._wrist_view(world)
            image, table_xy = self._table(view)
        else:
            raise ValueError(f"unknown camera {camera!r}; choose one of {CAMERAS}")
        self._shadows(world, view, image, table_xy)
        depth = np.full((self.height, self.width), np.inf, np.float32)
        for obj in world.objects:
            self._draw_object(view, image, depth, obj)
        self._draw_fingers(view, image, depth, world.pose)
        if camera == "base":
            self._draw_links(view, image, depth, world.pose)
        return np.clip(image, 0, 255).astype(np.uint8)

    def pixel(self, world: World, camera: str, point: np.ndarray) -> tuple[int, int] | None:
        """(row, column) where a world point appears in the camera's image; None if unseen."""
        view = self._base if camera == "base" else self._wrist_view(world)
        cam = (np.asarray(point) - view.eye) @ view.rotation
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
        rays, focal = self._rays_by_fov[WRIST_FOV]
        return _View(eye, camera, rays, focal)

    def _table(self, view: _View) -> tuple[np.ndarray, np.ndarray]:
        """The table and floor as seen by `view`, and each pixel's point on the z=0 plane."""
        down = view.rays[..., 2] < -1e-6
        t = view.eye[2] / np.where(down, -view.rays[..., 2], 1.0)  # distance to z = 0
        xy = view.eye[:2] + t[..., None] * view.rays[..., :2]
        x, y = xy[..., 0], xy[..., 1]
        on_table = down & (x > TABLE_X[0]) & (x < TABLE_X[1]) & (y > TABLE_Y[0]) & (y < TABLE_Y[1])
        # Faint 10 cm grid lines: texture for judging distance on an otherwise flat top.
        line = (np.abs(x * 10 - np.round(x * 10)) < 0.015) | (
            np.abs(y * 10 - np.round(y * 10)) < 0.015
        )
        image = np.where(
            on_table[..., None], np.where(line[..., None], GRID_COLOUR, TABLE_COLOUR), FLOOR_COLOUR
        )
        return image, np.where(on_table[..., None], xy, np.float32(np.nan))

    def _shadows(self, world: World, view: _View, image: np.ndarray, table_xy: np.ndarray):
        casters = [(o.position[:2], o.radius, o.position[2]) for o in world.objects]
        grip = world.pose.grip
        casters.append((grip[:2], 0.02, grip[2]))
        for xy, radius, height in casters:
            box = view.bbox(np.array([[*xy, 0.0]]), radius * 1.3)
            if box is None:
                continue
            y0, y1, x0, x1 = box
            patch = table_xy[y0:y1, x0:x1]
            dist = np.hypot(patch[..., 0] - xy[0], patch[..., 1] - xy[1]) / (radius * 1.3)
            # Darker and sharper the nearer the caster is to the table.
            strength = 0.45 / (1.0 + 6.0 * max(height, 0.0))
            dark = np.where(dist < 1.0, strength * (1.0 - dist**2), 0.0)
            image[y0:y1, x0:x1] *= (1.0 - np.nan_to_num(dark))[..., None]

    def _paint(self, view, image, depth, bound, hit_fn, colour):
        """Cast the bbox's rays at one primitive and keep its pixels that are nearest.
        hit_fn returns (t, normal) or (t, normal, tint), tint a per-pixel brightness."""
        box = view.bbox(np.atleast_2d(bound[0]), bound[1])
        if box is None:
            return
        y0, y1, x0, x1 = box
        out = hit_fn(view.eye, view.rays[y0:y1, x0:x1])
        t, normal = out[0], out[1]
        nearer = t < depth[y0:y1, x0:x1]
        if not nearer.any():
            return
        light = AMBIENT + (1 - AMBIENT) * np.clip(normal @ LIGHT, 0.0, 1.0)
        if len(out) == 3:
            light = light * out[2]
        shaded = colour * light[..., None]
        depth[y0:y1, x0:x1] = np.where(nearer, t, depth[y0:y1, x0:x1])
        image[y0:y1, x0:x1] = np.where(nearer[..., None], shaded, image[y0:y1, x0:x1])

    def _draw_object(self, view: _View, image, depth, obj: SceneObject) -> None:
        colour = np.array(COLOURS[obj.colour], np.float32)
        centre = obj.centre
        if obj.shape == "ball":
            r = obj.height / 2
            self._paint(
                view,
                image,
                depth,
                (centre, r),
                lambda o, d: raycast.sphere(o, d, centre, r),
                colour,
            )
        elif obj.shape == "block":
            c, s = np.cos(obj.yaw), np.sin(obj.yaw)
            rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            half = np.full(3, obj.height / 2)
            self._paint(
                view,
                image,
                depth,
                (centre, obj.height * 0.71),
                lambda o, d: raycast.box(o, d, centre, rot, half),
                colour,
            )
        else:
            sphere_centre = obj.position + np.array([0.0, 0.0, BOWL_RADIUS])
            rim = obj.position[2] + BOWL_HEIGHT
            self._paint(
                view,
                image,
                depth,
                (sphere_centre, BOWL_RADIUS),
                lambda o, d: raycast.bowl(o, d, sphere_centre, BOWL_RADIUS, rim),
                colour,
            )

    def _draw_fingers(self, view: _View, image, depth, pose: arm.ArmPose) -> None:
        rot = pose.tool_rotation
        y_axis, z_axis = rot[:, 1], rot[:, 2]
        half_len = arm.FINGER_LENGTH / 2
        finger_half = np.array([0.009, 0.005, half_len])
        for side in (-1.0, 1.0):
            centre = pose.grip - z_axis * half_len + y_axis * side * (pose.gap / 2 + 0.005)
            self._paint(
                view,
                image,
                depth,
                (centre, half_len + 0.01),
                lambda o, d, c=centre: raycast.box(o, d, c, rot, finger_half),
                FINGER_COLOUR,
            )

    def _draw_links(self, view: _View, image, depth, pose: arm.ArmPose) -> None:
        """The arm from the base to the palm (the base camera only)."""
        rot = pose.tool_rotation
        palm = pose.grip - rot[:, 2] * (arm.FINGER_LENGTH + 0.008)
        palm_half = np.array([0.018, arm.MAX_GAP / 2 + 0.012, 0.008])
        self._paint(
            view,
            image,
            depth,
            (palm, 0.06),
            lambda o, d: raycast.box(o, d, palm, rot, palm_half),
            LINK_COLOUR,
        )
        palm_top = pose.grip - pose.tool_rotation[:, 2] * (arm.FINGER_LENGTH + 0.016)
        links = [
            (np.zeros(3), pose.shoulder, 0.045),
            (pose.shoulder, pose.elbow, 0.032),
            (pose.elbow, pose.wrist, 0.026),
            (pose.wrist, palm_top, 0.02),
        ]
        for start, end, r in links:
            pieces = max(1, int(np.ceil(np.linalg.norm(end - start) / LINK_PIECE)))
            cuts = start + np.linspace(0.0, 1.0, pieces + 1)[:, None] * (end - start)
            for k in range(pieces):
                a, b, caps = cuts[k], cuts[k + 1], (k == 0, k == pieces - 1)
                self._paint(
                    view,
                    image,
                    depth,
                    (np.stack([a, b]), r),
                    lambda o, d, a=a, b=b, r=r, c=caps: raycast.capsule(o, d, a, b, r, c),
                    LINK_COLOUR,
                )
