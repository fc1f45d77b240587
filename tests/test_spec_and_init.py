"""The spec's shapes, parameter and FLOP counts, and the shared numpy init."""

from dataclasses import replace

import numpy as np
import pytest

from algorithms.network.weights import initial_weights, to_channels_first
from algorithms.network.networks import (
    CNN2D_2LAYER,
    CNN2D_3LAYER,
    NETWORKS,
    Conv2D,
    Dense,
    Flatten,
    ZeroPad2D,
    get_network,
)


def test_three_layer_shapes_follow_the_original_keras_net():
    shapes = CNN2D_3LAYER.output_shapes()
    conv_shapes = [s for s, layer in zip(shapes, CNN2D_3LAYER.layers) if isinstance(layer, Conv2D)]
    assert conv_shapes == [(28, 28, 32), (28, 28, 48), (14, 14, 32)]
    assert shapes[CNN2D_3LAYER.layers.index(Flatten())] == (7 * 7 * 32,)
    assert shapes[-1] == (10,)


def test_param_count_is_the_sum_of_kernel_and_bias_sizes():
    for network in NETWORKS.values():
        weights = initial_weights(network, seed=0)
        assert network.param_count() == sum(w.kernel.size + w.bias.size for w in weights)
    # by hand: 3x3x1x32+32, 3x3x32x48+48, 3x3x48x32+32, 1568x128+128, 128x128+128, 128x10+10
    assert CNN2D_3LAYER.param_count() == 320 + 13872 + 13856 + 200832 + 16512 + 1290
    assert CNN2D_2LAYER.param_count() == 832 + 51264 + 3136 * 1024 + 1024 + 10250


def test_flops_count_convolutions_and_dense_layers():
    # 2-layer net by hand: conv1 2*25*1*32*28*28, conv2 2*25*32*64*14*14, dense 2*3136*1024 + 2*1024*10
    forward = 2 * 25 * 32 * 784 + 2 * 25 * 32 * 64 * 196 + 2 * 3136 * 1024 + 2 * 1024 * 10
    assert CNN2D_2LAYER.forward_flops_per_sample() == forward
    assert CNN2D_2LAYER.train_flops_per_sample() == 3 * forward


def test_presets_carry_the_original_training_settings():
    sgd = CNN2D_3LAYER.training
    assert (
        sgd.optimizer.name,
        sgd.optimizer.learning_rate,
        sgd.optimizer.momentum,
        sgd.optimizer.nesterov,
        sgd.batch_size,
        sgd.epochs,
        sgd.validation_split,
    ) == ("sgd", 0.05, 0.9, True, 1000, 10, 0.2)
    adam = CNN2D_2LAYER.training
    assert (adam.optimizer.name, adam.optimizer.learning_rate, adam.batch_size) == ("adam", 5e-4, 50)


def test_unknown_network_names_the_choices():
    with pytest.raises(KeyError, match="cnn2d_3layer_fullconnected_3layer"):
        get_network("resnet50")


def test_glorot_uniform_is_seeded_bounded_and_biases_zero():
    a, b, c = (initial_weights(CNN2D_3LAYER, seed) for seed in (1, 1, 2))
    assert all(np.array_equal(x.kernel, y.kernel) for x, y in zip(a, b))
    assert not np.array_equal(a[0].kernel, c[0].kernel)
    first_conv = a[0].kernel  # 3x3x1x32: fan_in 9, fan_out 288
    limit = np.sqrt(6 / (9 + 288))
    assert first_conv.dtype == np.float32 and np.abs(first_conv).max() <= limit
    assert np.abs(first_conv).max() > 0.9 * limit  # uniform over the whole range, not a narrower one
    assert all(not w.bias.any() for w in a)


def test_channels_first_conversion_matches_a_channels_last_computation():
    """A dense layer after a flatten must see the same features in either layout."""
    network = CNN2D_3LAYER
    weights = initial_weights(network, seed=0)
    converted = to_channels_first(network, weights)
    first_dense = next(i for i, w in enumerate(weights) if isinstance(network.layers[w.layer_index], Dense))
    feature_map = np.random.default_rng(0).standard_normal((7, 7, 32)).astype(np.float32)  # H, W, C
    nhwc = feature_map.reshape(-1) @ weights[first_dense].kernel
    nchw = converted[first_dense].kernel @ feature_map.transpose(2, 0, 1).reshape(-1)
    np.testing.assert_allclose(nhwc, nchw, rtol=1e-5, atol=1e-5)
    conv_kernel = weights[0].kernel
    assert converted[0].kernel.shape == (32, 1, 3, 3)
    assert converted[0].kernel[5, 0, 1, 2] == conv_kernel[1, 2, 0, 5]


def test_the_exact_rewrites_a_wrapper_may_make_are_found_in_the_layer_list():
    # 3-layer net: each ZeroPad2D(1) feeds a valid 3x3 conv; conv2 and conv3 are followed by a max-pool
    assert CNN2D_3LAYER.pads_folded_into_convs() == {1: 1, 3: 1, 6: 1}
    assert CNN2D_3LAYER.pads_folded_as_same() == {1, 3, 6}  # a pad of 1 around a 3x3 kernel: 'same'
    assert CNN2D_3LAYER.relus_after_pools() == {3, 6}
    # 2-layer net: SAME convs (nothing to fold), each followed by a max-pool; the dense ReLU is not
    assert CNN2D_2LAYER.pads_folded_into_convs() == {}
    assert CNN2D_2LAYER.pads_folded_as_same() == set()
    # a pad of 2 is 'same' around a 5x5 kernel only
    wide = replace(CNN2D_3LAYER, layers=(ZeroPad2D(2), Conv2D(8, 3), ZeroPad2D(2), Conv2D(8, 5)))
    assert wide.pads_folded_into_convs() == {1: 2, 3: 2} and wide.pads_folded_as_same() == {3}
    assert CNN2D_2LAYER.relus_after_pools() == {0, 2}
