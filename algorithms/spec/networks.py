"""The network spec as data: layers, presets with their original training settings.

A wrapper reads a `Network` and translates each layer; it never hard-codes one.
Shapes are (height, width, channels) throughout the spec; a wrapper that works
channels-first converts where it builds its model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Optional, Tuple, Union


@dataclass(frozen=True)
class ZeroPad2D:
    padding: int


@dataclass(frozen=True)
class Conv2D:
    filters: int
    kernel_size: int
    padding: str = "valid"  # "valid" or "same" (stride 1, so "same" keeps H and W)
    activation: Optional[str] = "relu"
    bias: bool = True  # False only for a known error put in on purpose (--fault bias:..., spec/variants.py)
    # True only for a known error put in on purpose (--fault frozen:..., spec/variants.py): the
    # bias is built frozen, so the framework computes no gradient for it
    bias_frozen: bool = False


@dataclass(frozen=True)
class MaxPool2D:
    pool_size: int
    # 0 but for a known error put in on purpose (--fault shape:..., spec/variants.py): the pixels
    # of -inf padded on each side before pooling, which changes the output's height and width
    padding: int = 0


@dataclass(frozen=True)
class Flatten:
    pass


@dataclass(frozen=True)
class Dense:
    units: int
    activation: Optional[str] = "relu"  # "softmax" on the last layer: see Network.activation
    bias: bool = True  # False only for a known error put in on purpose (--fault bias:..., spec/variants.py)
    bias_frozen: bool = False  # True only for a known error (--fault frozen:...), as Conv2D's


@dataclass(frozen=True)
class Dropout:
    rate: float
    # kept by without_dropout (parity runs): only for a known error put in on purpose
    # (--fault dropout:..., spec/variants.py), a run with dropout where its pair has none
    in_parity: bool = False


Layer = Union[ZeroPad2D, Conv2D, MaxPool2D, Flatten, Dense, Dropout]


@dataclass(frozen=True)
class Optimizer:
    name: str  # "sgd" (momentum, optionally Nesterov) or "adam"
    learning_rate: float
    momentum: float = 0.0
    nesterov: bool = False
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8


@dataclass(frozen=True)
class TrainingDefaults:
    optimizer: Optimizer
    batch_size: int
    epochs: int
    validation_split: float = 0.2


@dataclass(frozen=True)
class Network:
    name: str
    layers: Tuple[Layer, ...]
    training: TrainingDefaults
    input_shape: Tuple[int, int, int] = (28, 28, 1)  # (H, W, C)
    num_classes: int = 10
    description: str = ""
    # the main command's (run_all.py's) default batch, where the preset's own makes too few
    # updates to converge on the default data (3,200 training rows): the preset's samples
    # in smaller batches. None: the preset's batch. `run_all.py --preset original` runs the preset.
    main_command_batch: Optional[int] = None
    # ((k, factor), ...): the kernel of the k-th weighted layer (conv or dense, in layer order)
    # times factor after the Glorot draw. Always () but for a known error put in on purpose
    # (--fault weights:..., algorithms/spec/variants.py); k survives without_dropout.
    init_scales: Tuple[Tuple[int, float], ...] = ()
    # "mean": the batch's mean cross-entropy, the loss every preset trains on; "sum" only
    # for a known error put in on purpose (--fault loss:sum, spec/variants.py)
    loss_reduction: str = "mean"

    def output_shapes(self) -> list:
        """Shape (H, W, C) or (units,) after each layer."""
        shapes, shape = [], self.input_shape
        for layer in self.layers:
            shape = _output_shape(layer, shape)
            shapes.append(shape)
        return shapes

    def input_shapes(self) -> list:
        return [self.input_shape] + self.output_shapes()[:-1]

    def without_dropout(self) -> "Network":
        """The same network for parity runs: no random masks (but for a Dropout a --fault
        dropout:... keeps). The weights are unchanged (init draws them in parametric-layer
        order, and dropout has none)."""
        return replace(
            self,
            layers=tuple(layer for layer in self.layers if not isinstance(layer, Dropout) or layer.in_parity),
        )

    def parametric_layers(self) -> list:
        """(layer index, layer, input shape) for every layer that owns weights."""
        return [
            (i, layer, in_shape)
            for i, (layer, in_shape) in enumerate(zip(self.layers, self.input_shapes()))
            if isinstance(layer, (Conv2D, Dense))
        ]

    def param_count(self) -> int:
        total = 0
        for _, layer, in_shape in self.parametric_layers():
            kernel, bias = weight_shapes(layer, in_shape)
            total += prod(kernel) + (prod(bias) if layer.bias else 0)
        return total

    def forward_flops_per_sample(self) -> int:
        """Multiply-adds counted as 2 FLOPs, convolutions and dense layers only
        (activations, pooling and padding are negligible and not counted)."""
        flops = 0
        for layer, in_shape, out_shape in zip(self.layers, self.input_shapes(), self.output_shapes()):
            if isinstance(layer, Conv2D):
                out_h, out_w, out_c = out_shape
                flops += 2 * layer.kernel_size**2 * in_shape[-1] * out_c * out_h * out_w
            elif isinstance(layer, Dense):
                flops += 2 * prod(in_shape) * layer.units
        return flops

    def train_flops_per_sample(self) -> int:
        """Forward + backward: the usual 3x forward (the backward pass computes
        gradients for both inputs and weights, each costing one forward)."""
        return 3 * self.forward_flops_per_sample()

    def pads_folded_into_convs(self) -> dict:
        """{conv layer index: padding} for each ZeroPad2D directly before a 'valid'
        Conv2D. The pair is one convolution with that zero padding: a wrapper may
        build it so, and skip the padded copy of the activation."""
        return {
            index + 1: layer.padding
            for index, layer in enumerate(self.layers[:-1])
            if isinstance(layer, ZeroPad2D)
            and isinstance(self.layers[index + 1], Conv2D)
            and self.layers[index + 1].padding == "valid"
        }

    def pads_folded_as_same(self) -> set:
        """Of pads_folded_into_convs, the convolutions whose folded pad is exactly 'same'
        padding: stride 1 with (kernel_size - 1) / 2 zeros on every side. A framework
        can name such a pair 'same', where its explicitly padded convolution is slower."""
        return {
            index
            for index, padding in self.pads_folded_into_convs().items()
            if 2 * padding == self.layers[index].kernel_size - 1
        }

    def relus_after_pools(self) -> set:
        """Indexes of layers whose ReLU a wrapper may apply after the MaxPool2D that
        follows them instead: the max of ReLUs is the ReLU of the max, and the
        gradient reaches the same element (or none), on a quarter of the elements."""
        return {
            index
            for index, layer in enumerate(self.layers[:-1])
            if getattr(layer, "activation", None) == "relu" and isinstance(self.layers[index + 1], MaxPool2D)
        }

    def outputs_fused_away(self) -> set:
        """Indexes of layers whose output a model built with both rewrites never holds: each
        ZeroPad2D folded into its convolution, and each layer whose ReLU runs after the pool
        (its output there is before the ReLU). At every other layer boundary the fused
        model's values are the spec's by construction."""
        return {index - 1 for index in self.pads_folded_into_convs()} | self.relus_after_pools()

    def activation(self, index: int) -> Optional[str]:
        """The activation a model applies after layer `index`: the layer's own, except the
        last layer's softmax, which every wrapper fuses into the cross-entropy loss
        (log-softmax), so models emit logits (argmax is unchanged). None: no activation."""
        activation = getattr(self.layers[index], "activation", None)
        return None if activation == "softmax" and index == len(self.layers) - 1 else activation


def _output_shape(layer: Layer, shape: tuple) -> tuple:
    if isinstance(layer, ZeroPad2D):
        h, w, c = shape
        return (h + 2 * layer.padding, w + 2 * layer.padding, c)
    if isinstance(layer, Conv2D):
        h, w, _ = shape
        if layer.padding == "same":
            return (h, w, layer.filters)
        return (h - layer.kernel_size + 1, w - layer.kernel_size + 1, layer.filters)
    if isinstance(layer, MaxPool2D):
        h, w, c = shape
        k, p = layer.pool_size, layer.padding
        return ((h + 2 * p - k) // k + 1, (w + 2 * p - k) // k + 1, c)
    if isinstance(layer, Flatten):
        return (prod(shape),)
    if isinstance(layer, Dense):
        return (layer.units,)
    if isinstance(layer, Dropout):
        return shape
    raise TypeError(f"unknown layer {layer!r}")


def layer_label(layer: Layer) -> str:
    """A layer as a person names it: Conv2D 48 3x3, Dense 128, MaxPool2D 2, Flatten."""
    if isinstance(layer, Conv2D):
        return f"Conv2D {layer.filters} {layer.kernel_size}x{layer.kernel_size}" + (
            " same" if layer.padding == "same" else ""
        )
    value = {ZeroPad2D: "padding", MaxPool2D: "pool_size", Dense: "units", Dropout: "rate"}.get(type(layer))
    return type(layer).__name__ + (f" {getattr(layer, value):g}" if value else "")


def weight_shapes(layer: Layer, in_shape: tuple) -> tuple:
    """Canonical (kernel shape, bias shape): conv kernels HWIO, dense (in, out)."""
    if isinstance(layer, Conv2D):
        k = layer.kernel_size
        return (k, k, in_shape[-1], layer.filters), (layer.filters,)
    if isinstance(layer, Dense):
        return (prod(in_shape), layer.units), (layer.units,)
    raise TypeError(f"{type(layer).__name__} has no weights")


CNN2D_3LAYER = Network(
    name="cnn2d_3layer_fullconnected_3layer",
    description="the original Keras net: 3 conv (32, 48, 32; 3x3), 2 max-pools, 3 dense",
    layers=(
        ZeroPad2D(1),
        Conv2D(32, 3),
        ZeroPad2D(1),
        Conv2D(48, 3),
        MaxPool2D(2),
        ZeroPad2D(1),
        Conv2D(32, 3),
        MaxPool2D(2),
        Flatten(),
        Dense(128),
        Dropout(0.25),
        Dense(128),
        Dropout(0.25),
        Dense(10, activation="softmax"),
    ),
    training=TrainingDefaults(
        optimizer=Optimizer("sgd", learning_rate=0.05, momentum=0.9, nesterov=True),
        batch_size=1000,
        epochs=10,
    ),
    # batch 1000 makes 40 updates on the default data (0.77-0.90 test accuracy); batch 100
    # makes 320 from the same 32,000 samples
    main_command_batch=100,
)

CNN2D_2LAYER = Network(
    name="cnn2d_2layer_full_connected_2layer",
    description="the original TensorFlow net: 2 conv (32, 64; 5x5 SAME), 2 max-pools, 2 dense",
    layers=(
        Conv2D(32, 5, padding="same"),
        MaxPool2D(2),
        Conv2D(64, 5, padding="same"),
        MaxPool2D(2),
        Flatten(),
        Dense(1024),
        Dropout(0.5),
        Dense(10, activation="softmax"),
    ),
    training=TrainingDefaults(
        # tf.train.AdamOptimizer(5e-4) of the original: TensorFlow 1's epsilon 1e-8.
        optimizer=Optimizer("adam", learning_rate=5e-4, epsilon=1e-8),
        batch_size=50,
        epochs=10,
    ),
)

NETWORKS = {net.name: net for net in (CNN2D_3LAYER, CNN2D_2LAYER)}
DEFAULT_NETWORK = CNN2D_3LAYER.name


def get_network(name: str) -> Network:
    try:
        return NETWORKS[name]
    except KeyError:
        raise KeyError(f"unknown network {name!r}; choose one of: {', '.join(NETWORKS)}") from None
