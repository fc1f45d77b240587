"""The spec translated to Caffe's own messages: a NetParameter (train net with loss
and accuracy; deploy net ending in logits) and a SolverParameter, built with
caffe.proto.caffe_pb2 and written as prototxt a person can read and run with
Caffe's tools.

Caffe has no zero-padding layer: a ZeroPad2D followed by a convolution becomes
that convolution's `pad`. Only fields of BVLC Caffe 1.0 are emitted.
"""

from __future__ import annotations

from caffe.proto import caffe_pb2
from google.protobuf import text_format

from algorithms.spec.networks import Conv2D, Dense, Dropout, Flatten, MaxPool2D, Network, ZeroPad2D

LOGITS = "logits"


def layer_names(network: Network) -> dict:
    """Spec layer index -> Caffe layer name, for the layers that own weights."""
    names, counts = {}, {}
    for index, layer, _ in network.parametric_layers():
        kind = "conv" if isinstance(layer, Conv2D) else "fc"
        counts[kind] = counts.get(kind, 0) + 1
        names[index] = f"{kind}{counts[kind]}"
    names[len(network.layers) - 1] = LOGITS
    return names


def layer_tops(network: Network) -> dict:
    """Spec layer index -> the blob that holds its output (after its in-place ReLU), for
    the layers that have one: convolutions, pools and inner products. A ZeroPad2D lives in
    the next convolution's `pad` and a Flatten in the next InnerProduct: neither has a blob."""
    tops = dict(layer_names(network))
    pools = [index for index, layer in enumerate(network.layers) if isinstance(layer, MaxPool2D)]
    tops.update({index: f"pool{number}" for number, index in enumerate(pools, start=1)})
    return tops


def build_model(network: Network, batch_size: int, deploy: bool) -> caffe_pb2.NetParameter:
    height, width, channels = network.input_shape
    net = caffe_pb2.NetParameter(name=network.name)
    data = net.layer.add(name="data", type="Input", top=["data"])
    data.input_param.shape.add(dim=[batch_size, channels, height, width])
    if not deploy:
        label = net.layer.add(name="label", type="Input", top=["label"])
        label.input_param.shape.add(dim=[batch_size])
    names = layer_tops(network)
    bottom, pending_pad, counts = "data", 0, {}

    def fresh(kind):
        counts[kind] = counts.get(kind, 0) + 1
        return f"{kind}{counts[kind]}"

    for index, layer in enumerate(network.layers):
        if pending_pad and not isinstance(layer, Conv2D):
            raise ValueError(f"caffe_wrapper: zero padding must be followed by a convolution (layer {index})")
        if isinstance(layer, ZeroPad2D):
            pending_pad += layer.padding
            continue
        if isinstance(layer, Conv2D):
            name = names[index]
            conv = net.layer.add(name=name, type="Convolution", bottom=[bottom], top=[name])
            same = (layer.kernel_size - 1) // 2 if layer.padding == "same" else 0
            conv.convolution_param.num_output = layer.filters
            conv.convolution_param.kernel_size.append(layer.kernel_size)
            if pending_pad + same:
                conv.convolution_param.pad.append(pending_pad + same)
            frozen_bias(conv, layer)
            pending_pad, bottom = 0, name
        elif isinstance(layer, MaxPool2D):
            name = names[index]
            pool = net.layer.add(name=name, type="Pooling", bottom=[bottom], top=[name])
            pool.pooling_param.pool = caffe_pb2.PoolingParameter.MAX
            pool.pooling_param.kernel_size = layer.pool_size
            pool.pooling_param.stride = layer.pool_size
            pool.pooling_param.ceil_mode = False  # Caffe's default pools a partial last window; the spec drops it
            bottom = name
        elif isinstance(layer, Flatten):
            continue  # InnerProduct flattens its input (C, H, W order, as to_channels_first expects)
        elif isinstance(layer, Dense):
            name = names[index]
            fc = net.layer.add(name=name, type="InnerProduct", bottom=[bottom], top=[name])
            fc.inner_product_param.num_output = layer.units
            frozen_bias(fc, layer)
            bottom = name
        elif isinstance(layer, Dropout):
            name = fresh("drop")
            drop = net.layer.add(name=name, type="Dropout", bottom=[bottom], top=[bottom])  # in place
            drop.dropout_param.dropout_ratio = layer.rate
            continue
        else:
            raise TypeError(f"caffe_wrapper cannot translate {layer!r}")
        activation = network.activation(index)
        if activation == "relu":
            net.layer.add(name=fresh("relu"), type="ReLU", bottom=[bottom], top=[bottom])
        elif activation == "softmax":
            name = fresh("softmax")
            net.layer.add(name=name, type="Softmax", bottom=[bottom], top=[name])
            bottom = name
        elif activation is not None:
            raise ValueError(f"caffe_wrapper: unsupported activation {activation!r}")
    if not deploy:  # the final softmax is fused into the loss, as in every wrapper
        net.layer.add(name="loss", type="SoftmaxWithLoss", bottom=[LOGITS, "label"], top=["loss"])
        net.layer.add(name="accuracy", type="Accuracy", bottom=[LOGITS, "label"], top=["accuracy"])
    return net


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
