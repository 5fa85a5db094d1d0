"""resize_with_pad and to_rgb: exact geometry of the fit and the padding, channel rules."""

import numpy as np
import pytest

from oxygen_core.image import resize_with_pad, to_rgb


def test_to_rgb_replicates_mono_into_grey():
    mono = np.array([[0, 7], [128, 255]], dtype=np.uint8)
    rgb = to_rgb(mono)
    assert rgb.shape == (2, 2, 3)
    for c in range(3):
        np.testing.assert_array_equal(rgb[:, :, c], mono)
    np.testing.assert_array_equal(to_rgb(mono[:, :, None]), rgb)


def test_to_rgb_drops_alpha_and_keeps_rgb_without_copy():
    rgba = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(to_rgb(rgba), rgba[:, :, :3])
    rgb = np.ascontiguousarray(rgba[:, :, :3])
    assert to_rgb(rgb) is rgb


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (np.zeros((2, 2, 3), np.uint16), "must be uint8"),
        (np.zeros((2, 2, 2), np.uint8), r"C in \(1, 3, 4\), got \(2, 2, 2\)"),
        (np.zeros((2,), np.uint8), r"got \(2,\)"),
    ],
)
def test_to_rgb_rejects_other_layouts(image, message):
    with pytest.raises(ValueError, match=message):
        to_rgb(image)


def test_model_sized_image_comes_back_unchanged():
    image = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    assert resize_with_pad(image, 16) is image


def test_vga_fits_width_and_pads_top_and_bottom_equally():
    # openpi: ratio = max(480/224, 640/224); 480/ratio = 168 rows; (224-168)/2 = 28 on top.
    image = np.full((480, 640, 3), 200, dtype=np.uint8)
    out = resize_with_pad(image, 224)
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    assert np.all(out[28:196] == 200)
    assert np.all(out[:28] == 0) and np.all(out[196:] == 0)


def test_tall_image_fits_height_and_pads_left_first_when_odd():
    # 100x50 -> ratio 10 -> 10 rows x 5 columns; (10-5)//2 = 2 columns left, 3 right.
    image = np.full((100, 50, 3), 9, dtype=np.uint8)
    out = resize_with_pad(image, 10)
    assert np.all(out[:, 2:7] == 9)
    assert np.all(out[:, :2] == 0) and np.all(out[:, 7:] == 0)


def test_content_at_scale_one_is_pasted_pixel_for_pixel():
    # 2x4 into 4: the width already fits, so the pixels are copied and centred vertically.
    image = np.arange(2 * 4 * 3, dtype=np.uint8).reshape(2, 4, 3)
    out = resize_with_pad(image, 4)
    np.testing.assert_array_equal(out[1:3], image)
    assert np.all(out[0] == 0) and np.all(out[3] == 0)


def test_truncating_rounding_of_the_fitted_size():
    # 3x5 into 4: ratio 1.25, 3/1.25 = 2.4 -> 2 rows (truncated, as openpi), 1 row on top.
    out = resize_with_pad(np.full((3, 5, 3), 50, np.uint8), 4)
    assert np.all(out[1:3] == 50)
    assert np.all(out[0] == 0) and np.all(out[3] == 0)


def test_bilinear_downscale_keeps_flat_regions_exact():
    # Left half 0, right half 200; halving the width averages only within each half at
    # the outer columns.
    image = np.zeros((8, 8, 3), np.uint8)
    image[:, 4:] = 200
    out = resize_with_pad(image, 4)
    np.testing.assert_array_equal(out[:, 0], 0)
    np.testing.assert_array_equal(out[:, 3], 200)
    assert np.all((out[:, 1] > 0) & (out[:, 1] < out[:, 2]) & (out[:, 2] < 200))


def test_mono_input_becomes_grey_rgb():
    out = resize_with_pad(np.full((4, 8), 77, np.uint8), 8)
    assert np.all(out[2:6] == 77) and np.all(out[:2] == 0)


def test_a_sliver_keeps_one_row():
    out = resize_with_pad(np.full((1, 1000, 3), 255, np.uint8), 10)
    assert np.all(out[4] == 255)  # (10 - 1) // 2 rows above it
    assert out.sum() == 255 * 10 * 3
