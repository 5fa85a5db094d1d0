"""Ray-primitive intersections for the numpy renderer, in camera coordinates.

Every ray starts at the camera centre (the origin here) and the ray through pixel (row, col)
is (u[col], v[row], 1): not normalised, so a hit's t is its depth along the optical axis,
which orders hits along one ray just as well as the distance does. The payoff is that the
dot product of every ray with a fixed vector w is u * w_x + v * w_y + w_z, an outer sum of a
row and a column: one pass over the pixels instead of an (h, w, 3) matrix product, and no
per-pixel ray directions to rotate into the world for every camera pose.

Nor are per-pixel normals built: shading needs only the normal's cosine with the light, and
for a sphere's normal (t d - c) / r that is (t (d . l) - c . l) / r, one more outer sum; a
box's visible face is known per axis from which side of it the camera is on.

Every function takes the Rays of a block of pixels, the light's direction and the
primitive's shape, and returns the hit depth t (h, w) float32
(inf where the ray misses) and the cosine of the normal with the light (h, w) or a scalar,
unclipped and meaningful only where t is finite. All vectors are in camera coordinates.
"""

from __future__ import annotations

import numpy as np

INF = np.float32(np.inf)
RIM_BAND = 0.004  # height of the bowl's lighter rim band (m)
RIM_TINT, INSIDE_TINT = np.float32(1.3), np.float32(0.65)


class Rays:
    """The rays through a block of pixels: directions (u, v, 1), u per column, v per row."""

    def __init__(self, u: np.ndarray, v: np.ndarray, norm2: np.ndarray | None = None):
        self.u, self.v = u.astype(np.float32), v.astype(np.float32)
        # |d|^2 per pixel, the quadratic's leading coefficient for spheres and capsules.
        self.norm2 = np.add.outer(self.v * self.v, 1 + self.u * self.u) if norm2 is None else norm2

    def window(self, y0: int, y1: int, x0: int, x1: int) -> Rays:
        return Rays(self.u[x0:x1], self.v[y0:y1], self.norm2[y0:y1, x0:x1])

    def dot(self, w: np.ndarray) -> np.ndarray:
        """d . w for every ray (h, w): one outer sum."""
        w = np.asarray(w, np.float32)
        return np.add.outer(self.v * w[1], self.u * w[0] + w[2])


def _solve_sphere(rays: Rays, centre: np.ndarray, radius: float):
    """d . c, the discriminant and its root for |t d - c| = radius."""
    b = rays.dot(centre)
    disc = b * b
    disc -= rays.norm2 * np.float32(centre @ centre - radius * radius)
    root = np.sqrt(np.maximum(disc, 0.0))
    return b, disc, root


def sphere(rays: Rays, light: np.ndarray, centre: np.ndarray, radius: float):
    b, disc, root = _solve_sphere(rays, centre, radius)
    t = (b - root) / rays.norm2  # the nearer root; an eye inside the sphere sees nothing
    cos = (t * rays.dot(light) - np.float32(centre @ light)) / np.float32(radius)
    return np.where((disc > 0) & (t > 0), t, INF), cos


def bowl(
    rays: Rays, light: np.ndarray, centre: np.ndarray, radius: float, up: np.ndarray, rim: float
):
    """A spherical shell cut `rim` above its centre along `up` (open top): the outside where
    the ray first meets the sphere below the rim, else the inside where it leaves the sphere
    below the rim. Returns t, cos and a brightness factor: darker inside, lighter on a thin rim
    band, so a bowl reads as a bowl and not as a flat disc."""
    b, disc, root = _solve_sphere(rays, centre, radius)
    near, far = (b - root) / rays.norm2, (b + root) / rays.norm2
    d_up, c_up = rays.dot(up), np.float32(centre @ up)
    z_near, z_far = near * d_up - c_up, far * d_up - c_up  # heights above the centre
    ok = disc > 0
    outside = ok & (near > 0) & (z_near <= rim)
    inside = ok & ~outside & (far > 0) & (z_far <= rim)
    t = np.where(outside, near, np.where(inside, far, INF))
    z = np.where(outside, z_near, z_far)
    cos = (np.where(outside, near, far) * rays.dot(light) - np.float32(centre @ light)) / radius
    cos = np.where(outside, cos, -cos)  # the inside's normal points to the centre
    tint = np.where(z > rim - RIM_BAND, RIM_TINT, np.where(outside, np.float32(1), INSIDE_TINT))
    return t, cos, tint


def box(rays: Rays, light: np.ndarray, centre: np.ndarray, rotation: np.ndarray, half: np.ndarray):
    """An oriented box: rotation (3, 3) maps box axes to camera axes, half the half extents.
    Slabs per axis; on an axis where the eye is outside the slab the ray can only enter by
    the face towards the eye, so that face's t is the entry and its cosine a constant."""
    local_eye = -(rotation.T @ centre)
    enters, leaves, face_cos = [], [], []
    with np.errstate(divide="ignore", invalid="ignore"):  # rays parallel to a face
        for k in range(3):
            inv = np.float32(1) / rays.dot(rotation[:, k])
            e, h = float(local_eye[k]), float(half[k])
            if abs(e) > h:
                side = np.sign(e)
                enters.append((side * h - e) * inv)
                leaves.append((-side * h - e) * inv)
                face_cos.append(np.float32(side * rotation[:, k] @ light))
            else:  # inside this slab: it only bounds how far the ray stays in the box
                leaves.append(np.maximum((-h - e) * inv, (h - e) * inv))
    if not enters:  # the eye is inside the box
        return np.full(rays.norm2.shape, INF), np.float32(0)
    enter, leave = enters[0], np.minimum(np.minimum(leaves[0], leaves[1]), leaves[2])
    cos = face_cos[0]
    for t_k, cos_k in zip(enters[1:], face_cos[1:], strict=True):
        cos = np.where(t_k > enter, cos_k, cos)
        enter = np.maximum(enter, t_k)
    return np.where((leave >= enter) & (enter > 0), enter, INF), cos


def capsule(rays: Rays, light: np.ndarray, a: np.ndarray, b: np.ndarray, radius: float):
    """A cylinder from a to b with hemispherical ends."""
    axis = b - a
    length2 = float(axis @ axis)
    axis_d = rays.dot(axis)
    axis_oa = -float(axis @ a)  # the eye (origin) relative to a, along the axis
    qa = length2 * rays.norm2 - axis_d * axis_d
    qb = rays.dot(-length2 * a - axis_oa * axis)
    qc = np.float32(length2 * (a @ a) - axis_oa**2 - radius * radius * length2)
    disc = qb * qb - qa * qc
    with np.errstate(divide="ignore", invalid="ignore"):  # rays along the axis: qa = 0
        t = (-qb - np.sqrt(np.maximum(disc, 0.0))) / qa
    along = axis_oa + t * axis_d  # position of the hit along the axis, times length2
    side = (disc > 0) & (t > 0) & (along > 0) & (along < length2)
    # normal = (t d - a - along / length2 * axis) / radius
    cos = t * rays.dot(light) - np.float32(a @ light) - along * np.float32(axis @ light / length2)
    cos /= np.float32(radius)
    t = np.where(side, t, INF)
    for end in (a, b):
        t_end, cos_end = sphere(rays, light, end, radius)
        closer = t_end < t
        t = np.where(closer, t_end, t)
        cos = np.where(closer, cos_end, cos)
    return t, cos
