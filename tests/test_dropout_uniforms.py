"""Dropout's shared uniforms (algorithms/network/dropout.py): a pure function of (seed, epoch,
layer, sample, element), so they follow the rows through any split, uniform on [0, 1),
the same in numpy 1 and 2 (tests/legacy/ checks the legacy env against the values here),
and the mask rule every wrapper applies."""

import numpy as np

from algorithms.network.dropout import MASK_RULE, apply, dropout_layers, layer_uniforms, scale, uniforms
from algorithms.network.networks import CNN2D_2LAYER, CNN2D_3LAYER

# the first uniforms of seed 0, epoch 0, the 3-layer net's first Dropout (layer 10), rows 0 and 1:
# tests/legacy/test_dropout_uniforms_legacy.py holds numpy 1.23 to the same numbers
KNOWN = np.array([[6209504, 5259773, 2000034], [6099602, 4297037, 16412116]]) / np.float32(2**24)  # exact: k / 2**24


def test_each_dropout_layer_gets_uniforms_of_its_input_shape_in_layer_order():
    rows = np.arange(7)
    assert [index for index, _, _ in dropout_layers(CNN2D_3LAYER)] == [10, 12]
    assert [u.shape for u in uniforms(CNN2D_3LAYER, 0, 0, rows)] == [(7, 128), (7, 128)]
    assert [u.shape for u in uniforms(CNN2D_2LAYER, 0, 0, rows)] == [(7, 1024)]
    assert uniforms(CNN2D_3LAYER.without_dropout(), 0, 0, rows) == ()
    conv_shape = layer_uniforms(0, 0, 3, (5, 5, 4), rows)
    assert conv_shape.shape == (7, 5, 5, 4) and conv_shape.dtype == np.float32


def test_a_samples_uniforms_do_not_depend_on_the_batch_it_is_in():
    whole = uniforms(CNN2D_3LAYER, 3, 2, np.arange(100))
    shuffled_rows = np.array([42, 7, 99, 0])
    part = uniforms(CNN2D_3LAYER, 3, 2, shuffled_rows)
    for layer_whole, layer_part in zip(whole, part):
        assert np.array_equal(layer_part, layer_whole[shuffled_rows])
    np.testing.assert_array_equal(uniforms(CNN2D_3LAYER, 0, 0, np.arange(2))[0][:, :3], KNOWN)


def test_seed_epoch_and_layer_each_draw_other_numbers():
    rows = np.arange(50)
    base = layer_uniforms(0, 0, 10, (128,), rows)
    for other in (layer_uniforms(1, 0, 10, (128,), rows), layer_uniforms(0, 1, 10, (128,), rows)):
        assert np.mean(other == base) < 0.01
    assert np.mean(layer_uniforms(0, 0, 12, (128,), rows) == base) < 0.01


def test_they_are_uniform_on_0_1_and_exact_float32_fractions():
    u = layer_uniforms(0, 0, 10, (128,), np.arange(4000)).ravel()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.002 and abs(u.var() - 1 / 12) < 0.001
    counts, _ = np.histogram(u, bins=20, range=(0, 1))
    expected = u.size / 20
    assert ((counts - expected) ** 2 / expected).sum() < 45  # chi-square, 19 degrees of freedom: p < 1e-3 above 43.8
    assert np.array_equal(u * 2**24, np.floor(u * 2**24))  # k / 2**24: exactly a float32
    neighbours = np.corrcoef(u[:-1], u[1:])[0, 1]
    assert abs(neighbours) < 0.01


def test_the_mask_rule_keeps_units_above_the_rate_scaled_by_float32_one_over_one_minus_rate():
    x = np.full((4, 3), 2.0, np.float32)
    u = np.array([[0.1, 0.25, 0.9]] * 4, np.float32)
    out = apply(x, u, 0.25)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[0], np.array([0.0, 0.0, 2.0 * scale(0.25)], np.float32))  # 0.25 is not > 0.25
    assert scale(0.25) == np.float32(1 / 0.75) and "u > rate" in MASK_RULE
    kept = apply(np.ones((1000, 128), np.float32), layer_uniforms(0, 0, 10, (128,), np.arange(1000)), 0.25)
    assert abs((kept > 0).mean() - 0.75) < 0.01
