"""The numpy renderer: image format, determinism per seed, objects drawn where they are."""

import numpy as np
import pytest

from oxygen_core.sim.render import CAMERAS, Renderer
from oxygen_core.sim.scene import COLOURS, SceneObject
from oxygen_core.sim.tasks import make_task
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
