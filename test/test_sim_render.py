"""The numpy renderer: image format, determinism per seed, objects drawn where they are, the
camera-frame ray casts against the geometry, and screen boxes that lose no pixels."""

import copy

import numpy as np
import pytest

from oxygen_core.sim import raycast, render
from oxygen_core.sim.expert import Expert
from oxygen_core.sim.render import CAMERAS, Renderer
from oxygen_core.sim.scene import COLOURS, SceneObject
from oxygen_core.sim.tasks import FAMILIES, make_task
from oxygen_core.sim.world import World


@pytest.fixture(scope="module")
def renderer():
    return Renderer()


@pytest.mark.parametrize("camera", CAMERAS)
def test_images_are_uint8_rgb_and_deterministic_per_seed(renderer, camera):
    first = renderer.render(make_task("put", 3).new_world(), camera)
    again = renderer.render(make_task("put", 3).new_world(), camera)
    other = renderer.render(make_task("put", 4).new_world(), camera)
    assert first.shape == (224, 224, 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first, again)
    assert np.any(first != other)


def test_size_is_configurable():
    image = Renderer(96, 64).render(make_task("pick", 0).new_world(), "base")
    assert image.shape == (64, 96, 3)


def test_unknown_camera_is_a_clear_error(renderer):
    with pytest.raises(ValueError, match="unknown camera 'side'"):
        renderer.render(make_task("pick", 0).new_world(), "side")


def _dominant(pixel):
    """Which of the sim's colours a shaded pixel is (nearest direction in RGB)."""
    unit = pixel / np.linalg.norm(pixel)
    refs = {k: np.array(v, float) / np.linalg.norm(v) for k, v in COLOURS.items()}
    return max(refs, key=lambda k: unit @ refs[k])


@pytest.mark.parametrize("colour", list(COLOURS))
@pytest.mark.parametrize("shape", ["block", "ball", "bowl"])
def test_an_objects_colour_appears_where_it_is(renderer, colour, shape):
    obj = SceneObject(colour, shape, np.array([0.45, -0.1, 0.0]))
    world = World([obj])
    for camera in ("base", "wrist"):
        image = renderer.render(world, camera)
        point = obj.centre if shape != "bowl" else obj.position + [0.0, 0.0, 0.005]
        row, col = renderer.pixel(world, camera, point)
        patch = image[row - 1 : row + 2, col - 1 : col + 2].reshape(-1, 3).astype(float)
        assert all(_dominant(p) == colour for p in patch), (camera, patch)
        # And the table there is not: the same pixels without the object.
        empty = renderer.render(World([]), camera)[row, col].astype(float)
        assert np.abs(empty - image[row, col]).sum() > 60


def test_shapes_render_differently(renderer):
    images = [
        renderer.render(World([SceneObject("red", s, np.array([0.4, 0.0, 0.0]))]), "base")
        for s in ("block", "ball", "bowl")
    ]
    red = [np.sum((im[..., 0] > 120) & (im[..., 1] < 90)) for im in images]
    assert len(set(red)) == 3 and min(red) > 20  # three different red footprints


def _axis_rays():
    """Three pixels' rays: straight ahead, and 0.1 to the right and left (u = +-0.1)."""
    return raycast.Rays(np.array([-0.1, 0.0, 0.1]), np.array([0.0]))


LIGHT_AHEAD = np.array([0.0, 0.0, -1.0])  # towards the camera: faces seen head-on get cos 1


def test_sphere_and_bowl_hits_match_the_geometry():
    rays, centre = _axis_rays(), np.array([0.0, 0.0, 1.0])
    t, cos = raycast.sphere(rays, LIGHT_AHEAD, centre, 0.2)
    # Straight ahead: depth 0.8, facing the camera. At u = 0.1 the ray (0.1, 0, 1) meets
    # |t d - c| = 0.2 at t = (1 - sqrt(1 - 1.01 * 0.96)) / 1.01.
    side = (1 - np.sqrt(1 - 1.01 * 0.96)) / 1.01
    np.testing.assert_allclose(t[0], [side, 0.8, side], rtol=1e-5)
    np.testing.assert_allclose(cos[0, 1], 1.0, rtol=1e-5)
    up = np.array([0.0, -1.0, 0.0])  # camera y points down: a bowl opening towards -y
    t, cos, tint = raycast.bowl(rays, LIGHT_AHEAD, centre, 0.2, up, 0.05)
    np.testing.assert_allclose(t[0, 1], 0.8, rtol=1e-5)  # its outside, seen from the side
    np.testing.assert_allclose([cos[0, 1], tint[0, 1]], [1.0, 1.0], rtol=1e-5)
    t, cos, tint = raycast.bowl(rays, LIGHT_AHEAD, centre, 0.2, -np.array([0, 0, 1.0]), -0.1)
    # Opening towards the camera, cut 0.1 before the centre: the ray passes the rim and
    # hits the inside at the far side, 1.2 deep, darker, its normal facing the camera.
    np.testing.assert_allclose([t[0, 1], cos[0, 1], tint[0, 1]], [1.2, 1.0, 0.65], rtol=1e-5)


def test_box_and_capsule_hits_match_the_geometry():
    rays = _axis_rays()
    half = np.array([0.05, 0.05, 0.05])
    t, cos = raycast.box(rays, LIGHT_AHEAD, np.array([0.0, 0.0, 1.0]), np.eye(3), half)
    assert np.isinf(t[0, 0]) and np.isinf(t[0, 2])  # 0.1 aside at depth 0.95: past the edge
    np.testing.assert_allclose([t[0, 1], cos], [0.95, 1.0], rtol=1e-5)
    yaw = np.radians(30)  # turned about camera y: the front face tilts away from the light
    rot = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
    t, cos = raycast.box(rays, LIGHT_AHEAD, np.array([0.0, 0.0, 1.0]), rot, half)
    expected = [1 - 0.05 / np.cos(yaw), np.cos(yaw)]  # the front face, not the side
    np.testing.assert_allclose([t[0, 1], np.broadcast_to(cos, t.shape)[0, 1]], expected, rtol=1e-5)
    # A capsule across the view at depth 1 (from x = -0.5 to 0.5), radius 0.05.
    a, b = np.array([-0.5, 0.0, 1.0]), np.array([0.5, 0.0, 1.0])
    t, cos = raycast.capsule(rays, LIGHT_AHEAD, a, b, 0.05)
    np.testing.assert_allclose(t[0], [0.95, 0.95, 0.95], rtol=1e-5)  # depth, not distance
    np.testing.assert_allclose(cos[0], 1.0, rtol=1e-5)
    # Along the view (a cap towards the camera): the hemisphere at a, depth 0.95.
    t, cos = raycast.capsule(rays, LIGHT_AHEAD, np.array([0, 0, 1.0]), np.array([0, 0, 2.0]), 0.05)
    np.testing.assert_allclose([t[0, 1], cos[0, 1]], [0.95, 1.0], rtol=1e-5)
    assert np.isinf(t[0, 0]) and np.isinf(t[0, 2])


def _episode_worlds():
    """Worlds along expert episodes: the wrist camera close over objects, the arm moving."""
    worlds = []
    for family in FAMILIES:
        task = make_task(family, 1)
        world = task.new_world()
        expert = Expert(task, world)
        for step in range(100):
            if step % 25 == 0:
                worlds.append(copy.deepcopy(world))
            world.step(expert.act(world, 0.05).targets, 0.05)
    return worlds


def test_screen_boxes_lose_no_pixels(renderer, monkeypatch):
    """Each primitive is cast only over its screen box (clipped at the near plane for
    objects beside the wrist camera): casting every primitive over the whole image instead
    must give the same images."""
    worlds = _episode_worlds()
    fast = [renderer.render(w, c) for w in worlds for c in CAMERAS]
    whole = (0, renderer.height, 0, renderer.width)
    monkeypatch.setattr(render._View, "bbox", lambda view, hull: whole)
    slow = [renderer.render(w, c) for w in worlds for c in CAMERAS]
    for image, reference in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(image, reference)


def test_screen_box_of_a_hull_through_the_near_plane(renderer):
    """A hull from behind the camera to 0.5 m in front of it, right of the optical axis:
    its part in front can reach the image's right edge and all rows (near the camera its
    0.02 m height fills the view), but starts at its far corner's column, not at column 0."""
    rays, focal = renderer._rays_by_fov[render.WRIST_FOV]
    view = render._View(np.zeros(3), np.eye(3), rays, focal)
    hull = render._corners(np.array([0.075, 0.0, 0.2]), np.array([0.025, 0.01, 0.3]))
    assert view.bbox(hull) == (0, 224, int(focal * 0.05 / 0.5 + 112), 224)
    assert view.bbox(hull - [0.0, 0.0, 0.6]) is None  # wholly behind
    ahead = view.bbox(hull + [0.0, 0.0, 0.2])  # wholly in front: just the corners' projection
    # Rows from its nearest face (0.1 m away), columns from its far left and near right edges.
    v_near, u_far = int(focal * 0.01 / 0.1), int(focal * 0.05 / 0.7)
    assert ahead == (112 - v_near - 1, 112 + v_near + 2, 112 + u_far, 224)
