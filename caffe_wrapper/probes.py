"""Caffe's probes: the Net of the spec's prototxt, seen from outside a run. Its own loss
and logits of the shared initial weights (the cross-framework tests), its parameter blobs
(the structural check) and each layer's output and gradient in the spec's layout (the
localisation, algorithms/localisation/)."""

from __future__ import annotations

import os
import tempfile

import caffe

from algorithms.contract.types import LayerProbe, ModelParameter
from algorithms.network.weights import gradients_from_channels_first, initial_weights, output_from_channels_first
from caffe_wrapper.model import (
    LOGITS,
    build_model,
    layer_names,
    layer_tops,
    pad_references,
    statistics_names,
    write_prototxt,
)
from caffe_wrapper.trainer import feed, load_weights


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """Caffe's own SoftmaxWithLoss and logits of the shared initial weights, dropout off."""
    net = spec_net(network, len(images), caffe.TEST)
    load_weights(net, network, initial_weights(network, seed))
    feed(net, images, labels)
    outputs = net.forward()
    return float(outputs["loss"]), net.blobs[LOGITS].data.copy()


def spec_net(network, batch_size: int, phase):
    """The train net of `network` without its dropout (the loss and logits of the weights
    as they are) as a pycaffe Net in `phase`, read from a scratch folder."""
    caffe.set_mode_cpu()
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "train.prototxt")
        write_prototxt(build_model(network, batch_size, deploy=False, dropout=False), path)
        return caffe.Net(path, phase)


def model_parameters(network) -> list:
    """The Net's own parameter blobs: each layer's blob 0 (the kernel, OIHW or (out, in)) and blob 1 (the bias)."""
    owners = {name: index for index, name in layer_names(network).items()}
    paddings = {f"{name}_zeros" for name, _ in pad_references(network).values()}
    helpers = set(statistics_names(network).values()) | paddings
    found = []
    for name, blobs in spec_net(network, 1, caffe.TEST).params.items():
        if name in helpers:  # a BatchNorm's running statistics, an explicit padding's fixed weight
            continue
        for position, blob in enumerate(blobs):
            shape = tuple(blob.data.shape)
            kernel_layout = {4: "OIHW", 2: "OI", 1: "O"}[len(shape)]
            role, layout = ("kernel", kernel_layout) if position == 0 else ("bias", "O")
            found.append(ModelParameter(f"{name}[{position}]", owners.get(name, -1), role, shape, layout))
    return found


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """Net.forward then Net.backward in the TRAIN phase (dropout off): the blobs after the
    forward pass (each handed to `on_output` before the backward one) and the parameter
    diffs after it. A blob whose ParamSpec has lr_mult 0 (frozen) is one Caffe computes no
    diff for (Net::Init sets its param_propagate_down false): None."""
    net = spec_net(network, len(images), caffe.TRAIN)
    load_weights(net, network, weights)
    for blobs in net.params.values():
        for blob in blobs:
            blob.diff[...] = 0  # Caffe adds each backward pass's gradients to the diffs
    feed(net, images, labels)
    loss = float(net.forward()["loss"])
    outputs = {
        index: output_from_channels_first(network, index, net.blobs[top].data.copy())
        for index, top in layer_tops(network).items()
    }
    for index, output in outputs.items():
        if on_output is not None:
            on_output(index, output)
    evaluation = {}
    if network.batch_normalizations():  # the TEST net: Caffe's BatchNorm on its stored statistics
        test = spec_net(network, len(images), caffe.TEST)
        load_weights(test, network, weights)
        feed(test, images, labels)
        test.forward()
        evaluation = {
            index: output_from_channels_first(network, index, test.blobs[top].data.copy())
            for index, top in layer_tops(network).items()
        }
    net.backward()
    frozen = {
        (layer.name, position)
        for layer in build_model(network, len(images), deploy=False).layer  # the message spec_net's Net was read from
        for position, spec in enumerate(layer.param)
        if spec.lr_mult == 0
    }
    gradients = {
        (index, role): None if (name, position) in frozen else net.params[name][position].diff.copy()
        for index, name in layer_names(network).items()
        for position, role in enumerate(("kernel", "bias"))
    }
    return LayerProbe(loss, outputs, gradients_from_channels_first(network, gradients), {}, evaluation)
