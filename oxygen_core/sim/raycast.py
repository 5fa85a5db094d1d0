"""Ray-primitive intersections for the numpy renderer, vectorised over pixels.

Every function takes one ray origin `o` (3,) (a pinhole camera's centre) and unit ray
directions `d` (..., 3), and returns the hit distance t (...,) (inf where the ray misses)
and the unit surface normal (..., 3). The renderer calls them on the pixels of a primitive's
screen bounding box only, which is what makes a frame cost a few milliseconds.
"""

from __future__ import annotations

import numpy as np

INF = np.float32(np.inf)
RIM_BAND = 0.004  # height of the bowl's lighter rim band (m)


def _like(d: np.ndarray, *vectors: np.ndarray):
    """The small vectors in the rays' dtype, so float32 rays stay float32 throughout."""
    return [np.asarray(v, d.dtype) for v in vectors]


def sphere(o: np.ndarray, d: np.ndarray, centre: np.ndarray, radius: float):
    o, centre = _like(d, o, centre)
    oc = o - centre
    b = d @ oc
    disc = b * b - (oc @ oc - radius * radius)
    root = np.sqrt(np.maximum(disc, 0.0))
    t = -b - root
    t = np.where((disc > 0) & (t > 0), t, INF)
    normal = (o + np.where(np.isfinite(t), t, 0.0)[..., None] * d - centre) / radius
    return t, normal


def bowl(o: np.ndarray, d: np.ndarray, centre: np.ndarray, radius: float, rim_z: float):
    """A spherical shell cut at height rim_z (open top): the outside where the ray first
    meets the sphere below the rim, else the inside where it leaves the sphere below the rim.
    Returns t, normal and a brightness factor: darker inside, lighter on a thin rim band,
    so a bowl reads as a bowl and not as a flat disc."""
    o, centre = _like(d, o, centre)
    oc = o - centre
    b = d @ oc
    disc = b * b - (oc @ oc - radius * radius)
    root = np.sqrt(np.maximum(disc, 0.0))
    near, far = -b - root, -b + root
    z_near = o[2] + near * d[..., 2]
    z_far = o[2] + far * d[..., 2]
    outside = (disc > 0) & (near > 0) & (z_near <= rim_z)
    inside = (disc > 0) & ~outside & (far > 0) & (z_far <= rim_z)
    t = np.where(outside, near, np.where(inside, far, INF))
    hit = o + np.where(np.isfinite(t), t, 0.0)[..., None] * d
    normal = (hit - centre) / radius
    normal = np.where(inside[..., None], -normal, normal)
    rim = (outside & (z_near > rim_z - RIM_BAND)) | (inside & (z_far > rim_z - RIM_BAND))
    tint = np.where(rim, np.float32(1.3), np.where(inside, np.float32(0.65), np.float32(1.0)))
    return t, normal, tint


def box(o: np.ndarray, d: np.ndarray, centre: np.ndarray, rotation: np.ndarray, half: np.ndarray):
    """An oriented box: rotation (3, 3) maps box axes to world, half the half extents (3,)."""
    o, centre, rotation, half = _like(d, o, centre, rotation, half)
    local_o = rotation.T @ (o - centre)
    local_d = d @ rotation
    safe = np.where(np.abs(local_d) < 1e-12, np.float32(1e-12), local_d)
    t1 = (-half - local_o) / safe
    t2 = (half - local_o) / safe
    t_in = np.minimum(t1, t2)
    t_out = np.maximum(t1, t2)
    # Per-axis reductions written out: numpy's reductions over a last axis of 3 are slow.
    tx, ty, tz = t_in[..., 0], t_in[..., 1], t_in[..., 2]
    enter = np.maximum(np.maximum(tx, ty), tz)
    leave = np.minimum(np.minimum(t_out[..., 0], t_out[..., 1]), t_out[..., 2])
    t = np.where((leave >= enter) & (enter > 0), enter, INF)
    axis = np.where(enter == tx, 0, np.where(enter == ty, 1, 2))
    sign = -np.sign(np.take_along_axis(local_d, axis[..., None], axis=-1))
    normal = rotation.T[axis] * sign
    return t, normal


def capsule(
    o: np.ndarray, d: np.ndarray, a: np.ndarray, b: np.ndarray, radius: float, caps=(True, True)
):
    """A cylinder from a to b with hemispherical ends where `caps` says (a link cast in
    pieces needs them only at its two real ends)."""
    o, a, b = _like(d, o, a, b)
    axis = b - a
    length2 = axis @ axis
    oa = o - a
    axis_d = d @ axis
    axis_oa = axis @ oa
    qa = length2 - axis_d * axis_d
    qb = length2 * (d @ oa) - axis_oa * axis_d
    qc = length2 * (oa @ oa) - axis_oa * axis_oa - radius * radius * length2
    disc = qb * qb - qa * qc
    t_side = (-qb - np.sqrt(np.maximum(disc, 0.0))) / np.where(qa == 0, 1e-12, qa)
    along = axis_oa + t_side * axis_d  # position of the hit along the axis, times length2
    side = (disc > 0) & (t_side > 0) & (along > 0) & (along < length2)
    t_side = np.where(side, t_side, INF)
    hit = o + np.where(side, t_side, 0.0)[..., None] * d
    foot = a + (np.clip(along, 0, length2) / length2)[..., None] * axis
    normal = (hit - foot) / radius
    for end in [e for e, cap in zip((a, b), caps, strict=True) if cap]:
        t_end, n_end = sphere(o, d, end, radius)
        closer = t_end < t_side
        t_side = np.where(closer, t_end, t_side)
        normal = np.where(closer[..., None], n_end, normal)
    return t_side, normal
