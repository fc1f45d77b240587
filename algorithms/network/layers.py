"""The spec's vocabulary as data: the layers a network is made of, the optimizer and the
training defaults, and `Network` with the questions every wrapper would otherwise answer
for itself (shapes, padding, which rewrites apply). networks.py holds the networks.

Shapes are (height, width, channels) throughout the spec; a wrapper that works
channels-first converts where it builds its model.

Conventions a wrapper must follow exactly (each maps them to its framework's own terms,
or builds the layer from primitives where its own cannot match):

- Conv2D `same` padding, any stride (TensorFlow's convention): the output has
  ceil(H / stride) rows, and the rows padded total
  pad_total = max((ceil(H / stride) - 1) * stride + kernel_size - H, 0),
  pad_total // 2 on top and the rest, one more when pad_total is odd, on the bottom (the
  same for columns: the extra one on the right). `valid`: no padding,
  (H - kernel_size) // stride + 1 rows. `Conv2D.paddings` gives the numbers.
- BatchNormalization, per channel (the last axis: over N, H and W of a map, over N of a
  vector): in training, the batch's mean and its biased variance (divided by the count n
  of values per channel) normalise, y = gamma * (x - mean) / sqrt(var + epsilon) + beta;
  after the step's forward pass the running statistics move by Keras's convention,
  running = momentum * running + (1 - momentum) * batch, with the batch's *unbiased*
  variance (var * n / (n - 1)) for the running variance (PyTorch's and Caffe's choice);
  in evaluation, the running statistics normalise. gamma and beta are trained, and start
  at 1 and 0 with no draw from the weight RNG (weights.py), so adding a
  BatchNormalization changes no other layer's initial weights; the running mean and
  variance start at 0 and 1.
- MaxPool2D and AveragePooling2D: windows of pool_size, stride pool_size, no padding; the
  rows and columns past the last whole window are left out. GlobalAveragePooling2D: the
  mean over H and W, (H, W, C) -> (C,).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil, prod
from typing import Optional, Tuple, Union


@dataclass(frozen=True)
class ZeroPad2D:
    padding: int


@dataclass(frozen=True)
class Conv2D:
    filters: int
    kernel_size: int
    padding: str = "valid"  # "valid" or "same" (module docstring: TensorFlow's convention)
    activation: Optional[str] = "relu"
    bias: bool = True  # False only for a known error put in on purpose (--fault bias:..., network/variants.py)
    # True only for a known error put in on purpose (--fault frozen:..., network/variants.py): the
    # bias is built frozen, so the framework computes no gradient for it
    bias_frozen: bool = False
    stride: int = 1
    # where `same` puts an odd pad_total's extra row and column: "end" (bottom and right, the
    # spec's); "start" only for a known error put in on purpose (--fault same_side:..., variants.py)
    extra_padding_at: str = "end"

    def paddings(self, in_shape: tuple) -> tuple:
        """((top, bottom), (left, right)): the zeros this convolution pads its (H, W, C) input with."""
        if self.padding == "valid":
            return (0, 0), (0, 0)
        return tuple(same_padding(side, self.kernel_size, self.stride, self.extra_padding_at) for side in in_shape[:2])

    def symmetric_padding(self, in_shape: tuple) -> Optional[int]:
        """The padding of every side when all four are equal (a framework's plain `pad`), else None."""
        (top, bottom), (left, right) = self.paddings(in_shape)
        return top if top == bottom == left == right else None


def same_padding(size: int, kernel_size: int, stride: int, extra_at: str = "end") -> tuple:
    """(before, after): TensorFlow's `same` padding of one side of `size` (module docstring)."""
    total = max((ceil(size / stride) - 1) * stride + kernel_size - size, 0)
    small, large = total // 2, total - total // 2
    return (small, large) if extra_at == "end" else (large, small)


@dataclass(frozen=True)
class BatchNormalization:
    momentum: float = 0.99  # Keras's convention: running = momentum * running + (1 - momentum) * batch
    epsilon: float = 1e-3
    activation: Optional[str] = None
    # False only for a known error put in on purpose (--fault bn_mean:..., network/variants.py): the
    # batch mean is cut from the gradient (treated as a constant in the backward pass)
    mean_in_gradient: bool = True
    # "running", the spec's; "batch" only for a known error put in on purpose (--fault
    # bn_eval:..., network/variants.py): evaluation normalises with the batch's statistics
    evaluation: str = "running"


@dataclass(frozen=True)
class MaxPool2D:
    pool_size: int
    # 0 but for a known error put in on purpose (--fault shape:..., network/variants.py): the pixels
    # of -inf padded on each side before pooling, which changes the output's height and width
    padding: int = 0


@dataclass(frozen=True)
class AveragePooling2D:
    pool_size: int


@dataclass(frozen=True)
class GlobalAveragePooling2D:
    pass


@dataclass(frozen=True)
class Flatten:
    pass


@dataclass(frozen=True)
class Dense:
    units: int
    activation: Optional[str] = "relu"  # "softmax" on the last layer: see Network.activation
    bias: bool = True  # False only for a known error put in on purpose (--fault bias:..., network/variants.py)
    bias_frozen: bool = False  # True only for a known error (--fault frozen:...), as Conv2D's


@dataclass(frozen=True)
class Dropout:
    rate: float
    # kept by without_dropout (parity runs): only for a known error put in on purpose
    # (--fault dropout:..., network/variants.py), a run with dropout where its pair has none
    in_parity: bool = False


Layer = Union[
    ZeroPad2D, Conv2D, BatchNormalization, MaxPool2D, AveragePooling2D, GlobalAveragePooling2D, Flatten, Dense, Dropout
]
WEIGHTED = (Conv2D, Dense)  # layers whose kernel the weight RNG draws
PARAMETRIC = (Conv2D, Dense, BatchNormalization)  # layers with trained parameters (BatchNormalization: gamma, beta)
ACTIVATIONS = (None, "relu", "softmax")


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
    # (--fault weights:..., algorithms/network/variants.py); k survives without_dropout.
    init_scales: Tuple[Tuple[int, float], ...] = ()
    # every initial kernel value times 1 +- this (a seeded sign per value): 0 but in a run's
    # yardstick twin (run/yardstick.py), which starts a float32 rounding's width from the run
    init_perturbation: float = 0.0
    # "mean": the batch's mean cross-entropy, the loss every preset trains on; "sum" only
    # for a known error put in on purpose (--fault loss:sum, network/variants.py)
    loss_reduction: str = "mean"
    # the file the network was read from ("" for one built in code); a built-in network's
    # file is one of networks.py's, a user's is recorded with its runs (settings_record.py)
    source: str = ""
    builtin: bool = True
    # the initial weights the file gave (an ONNX model's), canonical layout, one per
    # parametric layer in layer order; None: Glorot from the seed (weights.py). Left out
    # of comparisons: the file's fingerprint (source) stands for them
    given_weights: Optional[tuple] = field(default=None, compare=False, repr=False)
    # each layer's index in the network it was cut from (without_dropout), so a message names
    # the layer the user's file numbers; () where the layers are the file's own
    numbering: Tuple[int, ...] = field(default=(), compare=False, repr=False)

    def output_shapes(self) -> list:
        """Shape (H, W, C) or (units,) after each layer."""
        shapes, shape = [], self.input_shape
        for layer in self.layers:
            shape = output_shape(layer, shape)
            shapes.append(shape)
        return shapes

    def input_shapes(self) -> list:
        return [self.input_shape] + self.output_shapes()[:-1]

    def without_dropout(self) -> "Network":
        """The same network for parity runs: no random masks (but for a Dropout a --fault
        dropout:... keeps). The weights are unchanged (init draws them in parametric-layer
        order, and dropout has none)."""
        kept = [index for index, layer in enumerate(self.layers) if not isinstance(layer, Dropout) or layer.in_parity]
        return replace(
            self,
            layers=tuple(self.layers[index] for index in kept),
            numbering=tuple(self.user_index(index) for index in kept),
        )

    def user_index(self, index: int) -> int:
        """Layer `index`'s number in the user's network (the file's, before without_dropout)."""
        return self.numbering[index] if self.numbering else index

    def parametric_layers(self) -> list:
        """(layer index, layer, input shape) for every layer that owns trained parameters:
        convolutions and dense layers (kernel, bias), batch normalisations (gamma, beta)."""
        return [
            (i, layer, in_shape)
            for i, (layer, in_shape) in enumerate(zip(self.layers, self.input_shapes()))
            if isinstance(layer, PARAMETRIC)
        ]

    def batch_normalizations(self) -> list:
        """Indexes of the BatchNormalization layers."""
        return [index for index, layer in enumerate(self.layers) if isinstance(layer, BatchNormalization)]

    def param_count(self) -> int:
        total = 0
        for _, layer, in_shape in self.parametric_layers():
            kernel, bias = weight_shapes(layer, in_shape)
            total += prod(kernel) + (prod(bias) if getattr(layer, "bias", True) else 0)
        return total

    def forward_flops_per_sample(self) -> int:
        """Multiply-adds counted as 2 FLOPs, convolutions and dense layers only
        (activations, normalisation, pooling and padding are negligible and not counted)."""
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
            if 2 * padding == self.layers[index].kernel_size - 1 and self.layers[index].stride == 1
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

    def flattened_map_shape(self, index: int) -> Optional[tuple]:
        """The (H, W, C) map whose flatten layer `index`'s input is (a vector whose units a
        channels-first framework holds in (C, H, W) order, the spec in (H, W, C)), or None:
        its input is a map, or a vector made by a dense layer or a global pool."""
        shapes = self.input_shapes()
        if len(shapes[index]) != 1:
            return None
        for before in range(index - 1, -1, -1):
            layer = self.layers[before]
            if isinstance(layer, Flatten):
                shape = shapes[before]
                return shape if len(shape) == 3 and prod(shape[:2]) > 1 else None
            if isinstance(layer, (Dense, GlobalAveragePooling2D)):
                return None
        return None


def output_shape(layer: Layer, shape: tuple) -> tuple:
    if isinstance(layer, ZeroPad2D):
        h, w, c = shape
        return (h + 2 * layer.padding, w + 2 * layer.padding, c)
    if isinstance(layer, Conv2D):
        (top, bottom), (left, right) = layer.paddings(shape)
        k, s = layer.kernel_size, layer.stride
        return ((shape[0] + top + bottom - k) // s + 1, (shape[1] + left + right - k) // s + 1, layer.filters)
    if isinstance(layer, MaxPool2D):
        h, w, c = shape
        k, p = layer.pool_size, layer.padding
        return ((h + 2 * p - k) // k + 1, (w + 2 * p - k) // k + 1, c)
    if isinstance(layer, AveragePooling2D):
        h, w, c = shape
        return (h // layer.pool_size, w // layer.pool_size, c)
    if isinstance(layer, GlobalAveragePooling2D):
        return (shape[-1],)
    if isinstance(layer, Flatten):
        return (prod(shape),)
    if isinstance(layer, Dense):
        return (layer.units,)
    if isinstance(layer, (Dropout, BatchNormalization)):
        return shape
    raise TypeError(f"unknown layer {layer!r}")


def layer_label(layer: Layer) -> str:
    """A layer as a person names it: Conv2D 48 3x3, Conv2D 32 3x3/2 same, Dense 128, MaxPool2D 2, Flatten."""
    if isinstance(layer, Conv2D):
        return (
            f"Conv2D {layer.filters} {layer.kernel_size}x{layer.kernel_size}"
            + (f"/{layer.stride}" if layer.stride != 1 else "")
            + (" same" if layer.padding == "same" else "")
        )
    if isinstance(layer, BatchNormalization):
        return "BatchNorm"
    if isinstance(layer, GlobalAveragePooling2D):
        return "GlobalAvgPool"
    value = {
        ZeroPad2D: "padding",
        MaxPool2D: "pool_size",
        AveragePooling2D: "pool_size",
        Dense: "units",
        Dropout: "rate",
    }.get(type(layer))
    name = "AvgPool2D" if isinstance(layer, AveragePooling2D) else type(layer).__name__
    if not value:
        return name
    number = getattr(layer, value)
    return f"{name} {number}" if isinstance(number, int) else f"{name} {number:g}"  # 2000000000 units, not 2e+09


def weight_shapes(layer: Layer, in_shape: tuple) -> tuple:
    """Canonical (kernel shape, bias shape): conv kernels HWIO, dense (in, out); a
    BatchNormalization's gamma and beta, one per channel, in the kernel's and bias's places."""
    if isinstance(layer, Conv2D):
        k = layer.kernel_size
        return (k, k, in_shape[-1], layer.filters), (layer.filters,)
    if isinstance(layer, Dense):
        return (prod(in_shape), layer.units), (layer.units,)
    if isinstance(layer, BatchNormalization):
        return (in_shape[-1],), (in_shape[-1],)
    raise TypeError(f"{type(layer).__name__} has no weights")
