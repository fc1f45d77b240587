"""The float64 numpy reference of the spec (algorithms/reference/reference.py), the yardstick of
the localisation: its gradients against central finite differences of its own loss, its
forward pass against sums written out by hand, and the layout conversions that bring a
channels-first framework's arrays into the spec's layout."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from algorithms.network.networks import (
    AveragePooling2D,
    BatchNormalization,
    GlobalAveragePooling2D,
    CNN2D_2LAYER,
    CNN2D_3LAYER,
    Conv2D,
    Dense,
    Flatten,
    MaxPool2D,
    Network,
    TrainingDefaults,
    Optimizer,
    ZeroPad2D,
)
from algorithms.reference.reference import cross_entropy, forward, forward_backward, sgd_or_adam_step, update_running
from algorithms.network.weights import (
    LayerWeights,
    from_channels_first,
    initial_weights,
    output_from_channels_first,
    to_channels_first,
)

# every layer kind the spec has, at a size whose every weight a finite difference can visit:
# a pad before a valid conv, a "same" conv, two pools (one dropping an odd row), flatten, dense
TINY = Network(
    name="tiny",
    layers=(
        ZeroPad2D(1),
        Conv2D(3, 3),
        MaxPool2D(2),
        Conv2D(4, 3, padding="same"),
        MaxPool2D(2),
        Flatten(),
        Dense(5),
        Dense(3, activation="softmax"),
    ),
    training=TrainingDefaults(Optimizer("sgd", 0.1, momentum=0.9, nesterov=True), batch_size=4, epochs=1),
    input_shape=(9, 9, 2),
    num_classes=3,
)


def random_weights(network: Network, seed: int) -> list:
    """Glorot kernels and non-zero biases, so no pre-activation sits at ReLU's kink by design."""
    rng = np.random.default_rng(seed)
    return [
        LayerWeights(w.layer_index, np.float64(w.kernel), rng.normal(0.0, 0.1, w.bias.shape))
        for w in initial_weights(network, seed)
    ]


def loss_at(network, weights, images, labels, key, position, delta) -> float:
    moved = []
    for w in weights:
        kernel, bias = w.kernel.copy(), w.bias.copy()
        if w.layer_index == key[0]:
            (kernel if key[1] == "kernel" else bias)[position] += delta
        moved.append(LayerWeights(w.layer_index, kernel, bias))
    return cross_entropy(forward(network, moved, images)[-1], labels)[0]


def test_every_gradient_of_a_small_net_equals_central_finite_differences():
    rng = np.random.default_rng(3)
    images, labels = rng.random((4, 9, 9, 2)), np.array([0, 1, 2, 1])
    weights = random_weights(TINY, 5)
    gradients = forward_backward(TINY, weights, images, labels).gradients
    assert sorted(gradients) == [(i, role) for i in (1, 3, 6, 7) for role in ("bias", "kernel")]
    step = 1e-6
    for key, gradient in gradients.items():
        numeric = np.zeros_like(gradient)
        for position in np.ndindex(gradient.shape):
            numeric[position] = (
                loss_at(TINY, weights, images, labels, key, position, step)
                - loss_at(TINY, weights, images, labels, key, position, -step)
            ) / (2 * step)
        # central differences are exact to O(step^2) plus float64 rounding of the loss / step (~1e-10)
        np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8, err_msg=str(key))


@pytest.mark.parametrize("network", [CNN2D_3LAYER, CNN2D_2LAYER], ids=lambda n: n.name)
def test_the_real_nets_gradients_match_finite_differences_at_sampled_weights(network):
    network = network.without_dropout()
    rng = np.random.default_rng(11)
    images, labels = rng.random((2, 28, 28)), np.array([3, 7])
    weights = random_weights(network, 2)
    gradients = forward_backward(network, weights, images, labels).gradients
    # a small step: a larger one moves some of the 1,568 pre-activations a bias shifts
    # across ReLU's kink (1e-5 already does here), where the difference quotient is not the derivative
    step = 1e-6
    for key, gradient in gradients.items():
        position = np.unravel_index(rng.choice(gradient.size), gradient.shape)
        numeric = (
            loss_at(network, weights, images, labels, key, position, step)
            - loss_at(network, weights, images, labels, key, position, -step)
        ) / (2 * step)
        assert gradient[position] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (key, position)


def test_the_forward_pass_is_the_sums_written_out():
    rng = np.random.default_rng(1)
    images = rng.random((2, 9, 9, 2))
    weights = random_weights(TINY, 4)
    outputs = forward_backward(TINY, weights, images, np.array([0, 1])).outputs
    kernel, bias = weights[0].kernel, weights[0].bias
    padded = np.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)))
    # conv at (n=1, row 4, col 0, filter 2): the 3x3x2 window times the kernel, plus bias, then ReLU
    expected = max(0.0, float(np.sum(padded[1, 4:7, 0:3, :] * kernel[:, :, :, 2]) + bias[2]))
    assert outputs[1][1, 4, 0, 2] == pytest.approx(expected, rel=1e-12)
    assert outputs[2][1, 2, 0, 2] == outputs[1][1, 4:6, 0:2, 2].max()  # the pool's window (rows 4-5, cols 0-1)
    assert outputs[2].shape == (2, 4, 4, 3)  # 9 rows pooled by 2: the odd last row dropped
    assert outputs[3].shape == (2, 4, 4, 4)  # "same" keeps the size
    dense = weights[2]
    np.testing.assert_allclose(outputs[6], np.maximum(outputs[5] @ dense.kernel + dense.bias, 0.0))
    assert outputs[7].shape == (2, 3)  # logits: the last layer's softmax is in the loss


def test_the_loss_is_the_mean_cross_entropy_of_the_logits():
    network = CNN2D_3LAYER.without_dropout()
    weights = [LayerWeights(w.layer_index, w.kernel * 0, w.bias) for w in initial_weights(network, 0)]
    result = forward_backward(network, weights, np.ones((3, 28, 28)), np.array([1, 2, 3]))
    assert result.loss == pytest.approx(np.log(10), rel=1e-12)  # zero weights: uniform over 10 classes
    # the last bias's gradient is the mean of softmax - one-hot over the batch
    last = len(network.layers) - 1
    assert result.gradients[(last, "bias")][1] == pytest.approx(np.mean([0.1 - 1.0, 0.1, 0.1]))


def test_max_pool_sends_a_tied_windows_gradient_to_its_first_maximum():
    # a 1x1 conv with a zero kernel makes every output its bias: the window ties, and the
    # kernel's gradient is the input pixel the pool chose times what reached it
    network = replace(
        TINY,
        layers=(Conv2D(1, 1, activation=None), MaxPool2D(2), Flatten(), Dense(2, activation="softmax")),
        input_shape=(2, 2, 1),
        num_classes=2,
    )
    weights = [
        LayerWeights(0, np.zeros((1, 1, 1, 1)), np.array([0.5])),
        LayerWeights(3, np.array([[1.0, -1.0]]), np.zeros(2)),
    ]
    images = np.array([[[[1.0], [2.0]], [[3.0], [4.0]]]])  # row-major: 1 is the first
    gradients = forward_backward(network, weights, images, np.array([0])).gradients
    kernel, bias = gradients[(0, "kernel")].item(), gradients[(0, "bias")].item()
    assert bias != 0.0 and kernel / bias == pytest.approx(1.0)  # all four: 10; the last: 4


def test_one_reference_step_of_sgd_with_nesterov_momentum():
    optimizer = Optimizer("sgd", 0.5, momentum=0.9, nesterov=True)
    weights = [LayerWeights(1, np.array([1.0]), np.array([0.0]))]
    gradients = {(1, "kernel"): np.array([2.0]), (1, "bias"): np.array([-1.0])}
    state = {}
    first = sgd_or_adam_step(optimizer, weights, gradients, state, 1)
    # torch's formulation: v = g (first step); w -= lr * (g + momentum * v)
    assert first[0].kernel[0] == pytest.approx(1.0 - 0.5 * (2.0 + 0.9 * 2.0))
    second = sgd_or_adam_step(optimizer, first, gradients, state, 2)
    velocity = 0.9 * 2.0 + 2.0
    assert second[0].kernel[0] == pytest.approx(first[0].kernel[0] - 0.5 * (2.0 + 0.9 * velocity))
    adam = sgd_or_adam_step(Optimizer("adam", 0.01), weights, gradients, {}, 1)
    assert adam[0].kernel[0] == pytest.approx(1.0 - 0.01, rel=1e-6)  # bias-corrected: one lr-sized step


@pytest.mark.parametrize("network", [CNN2D_3LAYER, CNN2D_2LAYER], ids=lambda n: n.name)
def test_channels_first_weights_and_outputs_come_back_to_the_spec_layout(network):
    weights = initial_weights(network, 9)
    back = from_channels_first(network, to_channels_first(network, weights))
    for before, after in zip(weights, back):
        np.testing.assert_array_equal(before.kernel, after.kernel)
    rng = np.random.default_rng(0)
    flatten = next(i for i, layer in enumerate(network.layers) if isinstance(layer, Flatten))
    h, w, c = network.input_shapes()[flatten]
    nhwc = rng.random((2, h, w, c))
    nchw = nhwc.transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(output_from_channels_first(network, flatten - 1, nchw), nhwc)
    np.testing.assert_array_equal(
        output_from_channels_first(network, flatten, nchw.reshape(2, -1)), nhwc.reshape(2, -1)
    )
    dense = flatten + 1
    vector = rng.random((2, network.layers[dense].units))
    assert output_from_channels_first(network, dense, vector) is vector  # a dense output has no layout


# the layers the network files added: a strided `same` convolution whose odd padding goes to
# the bottom and right, batch normalisation of a map and of a vector, an even `same` kernel,
# average and global average pooling
MODERN = Network(
    name="modern",
    layers=(
        Conv2D(3, 3, padding="same", stride=2, activation=None),
        BatchNormalization(momentum=0.9, epsilon=1e-3, activation="relu"),
        Conv2D(4, 2, padding="same"),
        AveragePooling2D(2),
        Flatten(),
        Dense(5, activation=None),
        BatchNormalization(momentum=0.5, epsilon=1e-2, activation="relu"),
        Dense(3, activation="softmax"),
    ),
    training=TrainingDefaults(Optimizer("sgd", 0.1, momentum=0.9), batch_size=4, epochs=1),
    input_shape=(8, 8, 2),
    num_classes=3,
)
GLOBAL = replace(
    MODERN,
    layers=(Conv2D(4, 3, stride=2), BatchNormalization(), GlobalAveragePooling2D(), Dense(3, activation="softmax")),
    input_shape=(9, 7, 2),
)


def random_modern_weights(network: Network, seed: int) -> list:
    """random_weights, and each BatchNormalization's gamma, beta and running statistics off their start."""
    rng = np.random.default_rng(seed)
    weights = []
    for w in random_weights(network, seed):
        if isinstance(network.layers[w.layer_index], BatchNormalization):
            size = w.kernel.shape
            w = LayerWeights(
                w.layer_index,
                rng.uniform(0.5, 1.5, size),
                rng.normal(0, 0.1, size),
                rng.normal(0, 0.1, size),
                rng.uniform(0.5, 2, size),
            )
        weights.append(w)
    return weights


def moved(weights: list, key: tuple, position: tuple, delta: float) -> list:
    result = []
    for w in weights:
        w = replace(w, kernel=w.kernel.copy(), bias=w.bias.copy())
        if w.layer_index == key[0]:
            (w.kernel if key[1] == "kernel" else w.bias)[position] += delta
        result.append(w)
    return result


@pytest.mark.parametrize("network", [MODERN, GLOBAL], ids=lambda n: n.name)
def test_strided_same_batch_norm_and_average_pools_match_finite_differences(network):
    rng = np.random.default_rng(7)
    images, labels = rng.random((4, *network.input_shape)), np.array([0, 1, 2, 1])
    weights = random_modern_weights(network, 3)
    result = forward_backward(network, weights, images, labels)

    def loss(weights, images):
        return cross_entropy(forward(network, weights, images, training=True)[-1], labels)[0]

    step = 1e-6
    for key, gradient in result.gradients.items():
        numeric = np.zeros_like(gradient)
        for position in np.ndindex(gradient.shape):
            numeric[position] = (
                loss(moved(weights, key, position, step), images) - loss(moved(weights, key, position, -step), images)
            ) / (2 * step)
        np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8, err_msg=str(key))
    # the gradient with respect to the images: each layer's input gradient, the first's checked here
    numeric = np.zeros_like(images)
    for position in np.ndindex(images.shape):
        plus, minus = images.copy(), images.copy()
        plus[position] += step
        minus[position] -= step
        numeric[position] = (loss(weights, plus) - loss(weights, minus)) / (2 * step)
    np.testing.assert_allclose(result.input_gradients[0], numeric, rtol=1e-6, atol=1e-8)


def test_same_padding_is_tensorflows_the_odd_pixel_at_the_bottom_and_right():
    conv = Conv2D(1, 3, padding="same", stride=2)
    assert conv.paddings((8, 9, 1)) == ((0, 1), (1, 1))  # 8: 4 rows, 1 pad; 9: 5 columns, 2 pads
    assert replace(conv, extra_padding_at="start").paddings((8, 9, 1)) == ((1, 0), (1, 1))
    assert Conv2D(1, 2, padding="same").paddings((5, 5, 1)) == ((0, 1), (0, 1))
    assert MODERN.output_shapes()[0] == (4, 4, 3) and GLOBAL.output_shapes()[0] == (4, 3, 4)
    # the output pixel at (0, 0) of the strided conv sees rows 0-2 and columns 0-2, unpadded
    rng = np.random.default_rng(2)
    images = rng.random((1, 8, 8, 2))
    weights = random_modern_weights(MODERN, 1)
    out = forward(MODERN, weights, images)[0]
    expected = np.sum(images[0, 0:3, 0:3, :] * weights[0].kernel[:, :, :, 1]) + weights[0].bias[1]
    assert out[0, 0, 0, 1] == pytest.approx(expected, rel=1e-12)
    # and the last one, (3, 3), rows and columns 6-8: the 8th of each is the padding's zero
    expected = np.sum(images[0, 6:8, 6:8, :] * weights[0].kernel[:2, :2, :, 1]) + weights[0].bias[1]
    assert out[0, 3, 3, 1] == pytest.approx(expected, rel=1e-12)


def test_batch_norm_trains_on_batch_statistics_and_evaluates_on_the_running_ones():
    network = replace(MODERN, layers=MODERN.layers[:2] + MODERN.layers[3:])
    rng = np.random.default_rng(4)
    images = rng.random((6, 8, 8, 2))
    weights = initial_weights(network, 0)  # gamma 1, beta 0, running mean 0 and variance 1
    bn = weights[1]
    assert (bn.kernel == 1).all() and (bn.bias == 0).all() and (bn.running_mean == 0).all()
    result = forward_backward(network, weights, images, np.array([0, 1, 2, 0, 1, 2]))
    conv = result.outputs[0]
    mean, variance = conv.mean(axis=(0, 1, 2)), conv.var(axis=(0, 1, 2))
    np.testing.assert_allclose(result.outputs[1], np.maximum((conv - mean) / np.sqrt(variance + 1e-3), 0), rtol=1e-12)
    np.testing.assert_allclose(result.evaluation_outputs[1], np.maximum(conv / np.sqrt(1 + 1e-3), 0), rtol=1e-12)
    count = conv.size // conv.shape[-1]
    stats_mean, stats_variance = result.statistics[1]
    np.testing.assert_allclose(stats_variance, variance * count / (count - 1), rtol=1e-12)  # unbiased
    after = update_running(network, weights, result.statistics)[1]
    np.testing.assert_allclose(after.running_mean, 0.1 * mean, rtol=1e-12)  # 0.9 * 0 + 0.1 * mean
    np.testing.assert_allclose(after.running_var, 0.9 + 0.1 * stats_variance, rtol=1e-12)


def test_a_kink_above_a_batch_norm_reaches_every_sample_below_it():
    # a channel the conv makes constant normalises to exactly 0, ReLU's kink; carried back
    # through the BatchNormalization, its other side changes every sample's gradients below
    network = replace(
        MODERN,
        layers=(
            Conv2D(3, 3, padding="same", activation=None),
            BatchNormalization(activation="relu"),
            Flatten(),
            Dense(3, activation="softmax"),
        ),
        input_shape=(4, 4, 1),
    )
    weights = random_modern_weights(network, 5)
    kernel = weights[0].kernel.copy()
    kernel[..., 0] = 0.0  # filter 0: its bias everywhere, so the batch normalises it to 0
    weights[0] = replace(weights[0], kernel=kernel)
    weights[1] = replace(weights[1], bias=np.array([0.0, 0.1, -0.1]))  # beta 0 on channel 0
    images = np.random.default_rng(1).random((3, 4, 4, 1))
    result = forward_backward(network, weights, images, np.array([0, 1, 2]))
    assert np.abs(result.outputs[1][..., 0]).max() < 1e-12  # 0 but for the rounding of the mean
    assert result.allowances[(0, "kernel")].max() > 0 and result.allowances[(1, "kernel")].max() > 0
    # every sample's gradient at the BatchNormalization's input (the images' stays: filter 0 is zero)
    assert (result.input_allowances[1].reshape(3, -1).max(axis=1) > 0).all()
    without = forward_backward(network, weights, images, np.array([0, 1, 2]), kinks=False)
    np.testing.assert_array_equal(without.gradients[(0, "kernel")], result.gradients[(0, "kernel")])
