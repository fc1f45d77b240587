"""The spec translated to Caffe's own messages: a NetParameter (train net with loss
and accuracy; deploy net ending in logits) and a SolverParameter, built with
caffe.proto.caffe_pb2 and written as prototxt a person can read and run with
Caffe's tools.

Caffe has no zero-padding layer: a ZeroPad2D followed by a convolution becomes
that convolution's `pad`. Only fields of BVLC Caffe 1.0 are emitted. A `same`
convolution whose padding differs between its sides (its odd pixel at the bottom and
right) is padded explicitly first: a 1x1 convolution per channel with the weight 1 (exact,
never trained) and Caffe's symmetric pad of the larger side, then a Crop to the padded
size from the right offset (its reference shape an Input blob `padref<k>`, never fed).
A BatchNormalization is Caffe's BatchNorm (batch statistics in TRAIN, its stored ones in
TEST) and a Scale with a bias (gamma, beta). Caffe stores the running sums s and their
weight w, and normalises with s / w; started at w = 1 / (1 - momentum) (and s = the
running value times w), w stays there and s / w moves exactly by Keras's momentum rule;
Caffe's stored variance is the unbiased one, the spec's. A global average pool is a
Pooling with global_pooling, flattened.

Caffe's own Dropout layer draws its mask from Caffe's RNG. The train net applies the
uniforms fed with the rows instead (algorithms/network/dropout.py), with standard layers:
each Dropout layer's uniforms come in through an Input blob (`uniforms<k>`,
channels-first), a Threshold makes the keep mask (1 where u > rate: the mask rule's
comparison, in float32), a Power scales it by float32(1 / (1 - rate)), and an Eltwise
PROD multiplies the activation by it (one float32 multiply, as in every framework); its
`propagate_down: false` on the mask, and Input layers that never need one, keep every
gradient out of the uniforms. The deploy net has no dropout.
"""

from __future__ import annotations

from caffe.proto import caffe_pb2
from google.protobuf import text_format

from algorithms.network.dropout import dropout_layers, scale as dropout_scale
from algorithms.network.networks import (
    AveragePooling2D,
    BatchNormalization,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAveragePooling2D,
    MaxPool2D,
    Network,
    ZeroPad2D,
)

LOGITS = "logits"


def layer_names(network: Network) -> dict:
    """Spec layer index -> Caffe layer name, for the layers that own weights (a
    BatchNormalization's: its Scale, which holds gamma and beta)."""
    names, counts = {}, {}
    for index, layer, _ in network.parametric_layers():
        kind = "conv" if isinstance(layer, Conv2D) else "bn" if isinstance(layer, BatchNormalization) else "fc"
        counts[kind] = counts.get(kind, 0) + 1
        names[index] = f"{kind}{counts[kind]}" + ("_scale" if kind == "bn" else "")
    names[len(network.layers) - 1] = LOGITS
    return names


def statistics_names(network: Network) -> dict:
    """BatchNormalization index -> its Caffe BatchNorm layer (the running statistics' blobs)."""
    return {
        index: name.removesuffix("_scale") for index, name in layer_names(network).items() if name.endswith("_scale")
    }


def layer_tops(network: Network) -> dict:
    """Spec layer index -> the blob that holds its output (after its in-place ReLU), for
    the layers that have one: convolutions, batch normalisations, pools, global pools and
    inner products. A ZeroPad2D lives in the next convolution's `pad` and a Flatten in the
    next InnerProduct (or the Flatten before a Dropout): neither has a blob of its own."""
    tops = dict(layer_names(network))
    tops.update(statistics_names(network))  # the Scale works in place on its BatchNorm's blob
    pools = [index for index, layer in enumerate(network.layers) if isinstance(layer, (MaxPool2D, AveragePooling2D))]
    tops.update({index: f"pool{number}" for number, index in enumerate(pools, start=1)})
    globals_ = [index for index, layer in enumerate(network.layers) if isinstance(layer, GlobalAveragePooling2D)]
    tops.update({index: f"gap{number}_flat" for number, index in enumerate(globals_, start=1)})
    return tops


def pad_references(network: Network) -> dict:
    """Convolution index -> (the Input blob giving its explicit padding's shape, [C, H, W]) for
    each convolution padded explicitly (its sides differ)."""
    references = {}
    for index, (layer, in_shape) in enumerate(zip(network.layers, network.input_shapes())):
        if isinstance(layer, Conv2D) and layer.padding == "same" and layer.symmetric_padding(in_shape) is None:
            (top, bottom), (left, right) = layer.paddings(in_shape)
            shape = [in_shape[2], in_shape[0] + top + bottom, in_shape[1] + left + right]
            references[index] = (f"padref{len(references) + 1}", shape)
    return references


def uniform_blob(position: int) -> str:
    """The train net's Input blob of the uniforms of the network's `position`-th Dropout
    layer (0-based, layer order: the order of a step's uniforms)."""
    return f"uniforms{position + 1}"


def uniform_blobs(network: Network) -> list:
    return [uniform_blob(position) for position in range(len(dropout_layers(network)))]


def channels_first(shape: tuple) -> list:
    """A spec shape without the batch, as a Caffe blob holds it: (H, W, C) -> [C, H, W]."""
    return [shape[2], shape[0], shape[1]] if len(shape) == 3 else list(shape)


def build_model(network: Network, batch_size: int, deploy: bool, dropout: bool = True) -> caffe_pb2.NetParameter:
    """The train net (Input blobs for the data, the labels and, with `dropout`, each
    Dropout layer's uniforms; the loss and accuracy) or, with `deploy`, the net that ends
    in the logits (no dropout)."""
    dropout = dropout and not deploy
    net = caffe_pb2.NetParameter(name=network.name)
    uniforms = add_inputs(net, network, batch_size, deploy, dropout)
    builder = NetBuilder(net, network, iter(uniforms), dropout)
    for index, (layer, in_shape) in enumerate(zip(network.layers, network.input_shapes())):
        builder.add(index, layer, in_shape)
    if not deploy:  # the final softmax is fused into the loss, as in every wrapper
        net.layer.add(name="loss", type="SoftmaxWithLoss", bottom=[LOGITS, "label"], top=["loss"])
        net.layer.add(name="accuracy", type="Accuracy", bottom=[LOGITS, "label"], top=["accuracy"])
    return net


def add_inputs(net, network: Network, batch_size: int, deploy: bool, dropout: bool) -> list:
    """The Input blobs: the data, the labels (not in deploy), each Dropout layer's uniforms
    (with `dropout`) and each explicit padding's reference shape; returns the uniforms' names."""
    height, width, channels = network.input_shape
    data = net.layer.add(name="data", type="Input", top=["data"])
    data.input_param.shape.add(dim=[batch_size, channels, height, width])
    if not deploy:
        label = net.layer.add(name="label", type="Input", top=["label"])
        label.input_param.shape.add(dim=[batch_size])
    uniforms = uniform_blobs(network) if dropout else []
    shapes = [channels_first(shape) for _, _, shape in dropout_layers(network)]
    for name, shape in list(zip(uniforms, shapes)) + list(pad_references(network).values()):
        blob = net.layer.add(name=name, type="Input", top=[name])
        blob.input_param.shape.add(dim=[batch_size, *shape])
    return uniforms


class NetBuilder:
    """Adds the spec's layers to `net` one at a time, from the data blob on: `bottom` is the
    blob the next layer reads; a ZeroPad2D waits (`pending_pad`) for the convolution it folds into."""

    def __init__(self, net, network: Network, uniforms, dropout: bool):
        self.net, self.network, self.uniforms, self.dropout = net, network, uniforms, dropout
        self.names, self.references = layer_tops(network), pad_references(network)
        self.statistics, self.scales = statistics_names(network), layer_names(network)
        self.bottom, self.pending_pad, self.counts = "data", 0, {}
        self.translations = {
            Conv2D: self.convolution,
            BatchNormalization: self.batch_normalization,
            MaxPool2D: self.pooling,
            AveragePooling2D: self.pooling,
            GlobalAveragePooling2D: self.global_pooling,
            Dense: self.inner_product,
        }

    def add(self, index: int, layer, in_shape: tuple) -> None:
        if self.pending_pad and not isinstance(layer, Conv2D):
            raise ValueError(f"caffe_wrapper: zero padding must be followed by a convolution (layer {index})")
        if isinstance(layer, ZeroPad2D):
            self.pending_pad += layer.padding
        elif isinstance(layer, Flatten):
            self.flatten(index, in_shape)
        elif isinstance(layer, Dropout):
            if self.dropout:
                self.bottom = add_dropout(self.net, self.bottom, next(self.uniforms), layer.rate)
        elif type(layer) in self.translations:
            self.translations[type(layer)](index, layer, in_shape)
            self.activation(self.network.activation(index))
        else:
            raise TypeError(f"caffe_wrapper cannot translate {layer!r}")

    def convolution(self, index: int, layer: Conv2D, in_shape: tuple) -> None:
        name, same = self.names[index], 0
        if index in self.references:  # the sides differ: padded explicitly first
            reference = self.references[index]
            self.bottom = add_explicit_padding(self.net, self.bottom, layer.paddings(in_shape), in_shape[2], *reference)
        elif layer.padding == "same":
            same = layer.symmetric_padding(in_shape)
        conv = self.net.layer.add(name=name, type="Convolution", bottom=[self.bottom], top=[name])
        conv.convolution_param.num_output = layer.filters
        conv.convolution_param.kernel_size.append(layer.kernel_size)
        if layer.stride != 1:
            conv.convolution_param.stride.append(layer.stride)
        if self.pending_pad + same:
            conv.convolution_param.pad.append(self.pending_pad + same)
        frozen_bias(conv, layer)
        self.pending_pad, self.bottom = 0, name

    def batch_normalization(self, index: int, layer: BatchNormalization, in_shape: tuple) -> None:
        if not layer.mean_in_gradient or layer.evaluation != "running":
            raise ValueError(f"caffe_wrapper does not build a faulty BatchNormalization (layer {index})")
        name = self.statistics[index]
        norm = self.net.layer.add(name=name, type="BatchNorm", bottom=[self.bottom], top=[name])
        norm.batch_norm_param.moving_average_fraction = layer.momentum
        norm.batch_norm_param.eps = layer.epsilon
        for _ in range(3):  # the statistics are Caffe's to update in the forward pass, never the solver's
            norm.param.add(lr_mult=0, decay_mult=0)
        scale = self.net.layer.add(name=self.scales[index], type="Scale", bottom=[name], top=[name])
        scale.scale_param.bias_term = True
        self.bottom = name

    def pooling(self, index: int, layer, in_shape: tuple) -> None:
        name = self.names[index]
        pool = self.net.layer.add(name=name, type="Pooling", bottom=[self.bottom], top=[name])
        is_max = isinstance(layer, MaxPool2D)
        pool.pooling_param.pool = caffe_pb2.PoolingParameter.MAX if is_max else caffe_pb2.PoolingParameter.AVE
        pool.pooling_param.kernel_size = layer.pool_size
        pool.pooling_param.stride = layer.pool_size
        pool.pooling_param.ceil_mode = False  # Caffe's default pools a partial last window; the spec drops it
        self.bottom = name

    def global_pooling(self, index: int, layer: GlobalAveragePooling2D, in_shape: tuple) -> None:
        flat = self.names[index]
        name = flat.removesuffix("_flat")
        pool = self.net.layer.add(name=name, type="Pooling", bottom=[self.bottom], top=[name])
        pool.pooling_param.pool = caffe_pb2.PoolingParameter.AVE
        pool.pooling_param.global_pooling = True
        flatten = self.net.layer.add(name=flat, type="Flatten", bottom=[name], top=[flat])
        flatten.flatten_param.axis = 1  # (N, C, 1, 1) -> (N, C)
        self.bottom = flat

    def flatten(self, index: int, in_shape: tuple) -> None:
        """InnerProduct flattens its input itself (C, H, W order, as to_channels_first
        expects); a Dropout right after a map needs the flat blob, its mask's (N, C*H*W)."""
        layers = self.network.layers
        after = layers[index + 1] if index + 1 < len(layers) else None
        if isinstance(after, Dropout) and len(in_shape) == 3 and self.dropout:
            self.net.layer.add(name=f"flat{index}", type="Flatten", bottom=[self.bottom], top=[f"flat{index}"])
            self.bottom = f"flat{index}"

    def inner_product(self, index: int, layer: Dense, in_shape: tuple) -> None:
        name = self.names[index]
        fc = self.net.layer.add(name=name, type="InnerProduct", bottom=[self.bottom], top=[name])
        fc.inner_product_param.num_output = layer.units
        frozen_bias(fc, layer)
        self.bottom = name

    def activation(self, activation) -> None:
        if activation == "relu":
            self.net.layer.add(name=self.fresh("relu"), type="ReLU", bottom=[self.bottom], top=[self.bottom])
        elif activation == "softmax":
            name = self.fresh("softmax")
            self.net.layer.add(name=name, type="Softmax", bottom=[self.bottom], top=[name])
            self.bottom = name
        elif activation is not None:
            raise ValueError(f"caffe_wrapper: unsupported activation {activation!r}")

    def fresh(self, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return f"{kind}{self.counts[kind]}"


def add_explicit_padding(net, bottom: str, paddings: tuple, channels: int, reference: str, shape: list) -> str:
    """`bottom` padded by ((top, bottom), (left, right)) zeros with BVLC layers: a 1x1
    per-channel convolution of weight 1 with the larger side's symmetric pad, then a Crop to
    `shape` from the offset that leaves the smaller side's; returns the padded blob."""
    (top, bottom_rows), (left, right) = paddings
    grow = f"{reference}_zeros"
    identity = net.layer.add(name=grow, type="Convolution", bottom=[bottom], top=[grow])
    identity.convolution_param.num_output = channels
    identity.convolution_param.group = channels
    identity.convolution_param.kernel_size.append(1)
    identity.convolution_param.pad_h = max(top, bottom_rows)
    identity.convolution_param.pad_w = max(left, right)
    identity.convolution_param.bias_term = False
    identity.convolution_param.weight_filler.type = "constant"
    identity.convolution_param.weight_filler.value = 1.0
    identity.param.add(lr_mult=0, decay_mult=0)  # exact and never trained: x * 1
    padded = f"{reference}_padded"
    crop = net.layer.add(name=padded, type="Crop", bottom=[grow, reference], top=[padded])
    crop.crop_param.axis = 2
    crop.crop_param.offset.extend([max(top, bottom_rows) - top, max(left, right) - left])
    crop.propagate_down.extend([True, False])
    return padded


def add_dropout(net: caffe_pb2.NetParameter, bottom: str, uniforms: str, rate: float) -> str:
    """The mask rule on `bottom` from the `uniforms` blob (Threshold, Power, Eltwise PROD);
    returns the dropped blob's name."""
    number = uniforms.removeprefix("uniforms")
    keep, mask, dropped = f"keep{number}", f"mask{number}", f"drop{number}"
    threshold = net.layer.add(name=keep, type="Threshold", bottom=[uniforms], top=[keep])
    threshold.threshold_param.threshold = rate  # 1 where u > rate, else 0
    power = net.layer.add(name=mask, type="Power", bottom=[keep], top=[mask])
    power.power_param.scale = float(dropout_scale(rate))  # (0 + scale * keep) ** 1
    product = net.layer.add(name=dropped, type="Eltwise", bottom=[bottom, mask], top=[dropped])
    product.eltwise_param.operation = caffe_pb2.EltwiseParameter.PROD
    product.propagate_down.extend([True, False])  # the activation's gradient only: none into the mask
    return dropped


def frozen_bias(caffe_layer, layer) -> None:
    """--fault frozen:...: the bias blob's lr_mult 0, so Caffe computes no diff for it."""
    if layer.bias_frozen:
        caffe_layer.param.add(lr_mult=1)
        caffe_layer.param.add(lr_mult=0)


def solver_parameter(optimizer, train_net_path: str, seed: int, snapshot_prefix: str = "") -> caffe_pb2.SolverParameter:
    """`snapshot_prefix`: where `solver.snapshot()` writes (the run saves when it
    decides to, never on Caffe's own `snapshot` interval)."""
    solver = caffe_pb2.SolverParameter(
        train_net=train_net_path,
        base_lr=optimizer.learning_rate,
        lr_policy="fixed",
        max_iter=10**9,
        display=0,
        snapshot=0,
        random_seed=seed,
        solver_mode=caffe_pb2.SolverParameter.CPU,
    )
    if snapshot_prefix:
        solver.snapshot_prefix = snapshot_prefix
    if optimizer.name == "sgd":
        solver.type = "Nesterov" if optimizer.nesterov else "SGD"
        solver.momentum = optimizer.momentum
    elif optimizer.name == "adam":
        solver.type = "Adam"
        solver.momentum, solver.momentum2, solver.delta = optimizer.beta_1, optimizer.beta_2, optimizer.epsilon
    else:
        raise ValueError(f"unknown optimizer {optimizer.name!r}")
    return solver


def write_prototxt(message, path: str) -> None:
    with open(path, "w") as handle:
        handle.write(text_format.MessageToString(message))


def read_prototxt(path: str, message_type):
    message = message_type()
    with open(path) as handle:
        text_format.Merge(handle.read(), message)
    return message
