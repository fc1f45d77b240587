"""A network from an ONNX model (`--network model.onnx`): a sequential CNN of the spec's
vocabulary read with the `onnx` package, its initial weights included, so a model defined
in torch (or Keras) and exported trains in every framework from the same numbers.

    Conv                 Conv2D: square kernel, one stride, no dilation or groups; pads of
                         0 (valid), TensorFlow's `same` (auto_pad SAME_UPPER, or the pads
                         it makes), or the same on every side (a ZeroPad2D before it)
    BatchNormalization   BatchNormalization (its momentum and epsilon; trained by the
                         spec's convention, layers.py), its running statistics included
    Relu                 the activation of the Conv, Gemm or BatchNormalization before it
    MaxPool, AveragePool MaxPool2D, AveragePooling2D: square windows, stride = window, no pads
    GlobalAveragePool    GlobalAveragePooling2D
    Flatten, Reshape     Flatten (to (N, features))
    Gemm, MatMul + Add   Dense
    Dropout              Dropout (its ratio)
    Softmax              the last layer's softmax (fused into the loss, as every network's)
    Identity, Constant   nothing (a constant feeds another node)

The graph must be a chain: one image input (N, C, H, W), each node taking the one before's
output and constants. Anything else is refused in one line naming the node. The model
has no training settings: the network file defaults' (network_file.py) and the flags'.

torch.onnx.export(model, example, path, dynamo=False, do_constant_folding=False,
                  training=torch.onnx.TrainingMode.TRAINING)
keeps the BatchNormalization and Dropout nodes (an export in evaluation folds a batch norm
into the convolution before it, and drops dropout). The legacy env has no `onnx`: the main
env caches the network and its weights beside the file (`cache_path`), and the legacy env
reads the cache (run_all.py and every script started from the main env write it first).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, replace
from typing import Optional

import numpy as np

from algorithms.errors import InputError
from algorithms.dataset.input_files import DAMAGED_ARCHIVE
from algorithms.network.layers import (
    AveragePooling2D,
    BatchNormalization,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAveragePooling2D,
    MaxPool2D,
    Network,
    Optimizer,
    TrainingDefaults,
    ZeroPad2D,
    output_shape,
    same_padding,
)
from algorithms.network.network_file import TRAINING_DEFAULTS
from algorithms.network.weights import LayerWeights, from_channels_first

VOCABULARY = (
    "Conv, BatchNormalization, Relu, MaxPool, AveragePool, GlobalAveragePool, Flatten, Reshape, Gemm, "
    "MatMul+Add, Dropout, Softmax"
)
LAYER_CLASSES = {
    cls.__name__: cls
    for cls in (
        ZeroPad2D,
        Conv2D,
        BatchNormalization,
        MaxPool2D,
        AveragePooling2D,
        GlobalAveragePooling2D,
        Flatten,
        Dense,
        Dropout,
    )
}
CACHE_FORMAT = 1


def decimal(value) -> float:
    """An ONNX float attribute (float32: 0.8999999761581421) as the number it was written as (0.9)."""
    return float(f"{float(value):.7g}")


def cache_path(path: str) -> str:
    return path + ".cache.npz"


def read_onnx_network(path: str) -> Network:
    """The network and its initial weights (Network.given_weights) of an ONNX model."""
    cached = _read_cache(path)
    if cached is not None:
        return cached
    try:
        import onnx
    except ImportError:
        raise InputError(
            f"{path}: this environment has no onnx package (the legacy env reads the cache the main env writes "
            f"beside the model, {os.path.basename(cache_path(path))}): run the script from .venv, or run_all.py, once"
        ) from None
    try:
        model = onnx.load(path)
    except Exception as error:  # onnx raises protobuf's DecodeError and others
        raise InputError(
            f"{path}: not an ONNX model, or one cut short or damaged ({str(error).splitlines()[0][:100]}); "
            "export or copy it again"
        ) from None
    network, weights = _Translation(path, model).run()
    _write_cache(path, network, weights)
    return replace(network, given_weights=tuple(weights))


class _Translation:
    def __init__(self, path: str, model):
        from onnx import numpy_helper

        self.path, self.graph = path, model.graph
        self.constants = {tensor.name: numpy_helper.to_array(tensor) for tensor in self.graph.initializer}
        for node in self.graph.node:
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        self.constants[node.output[0]] = numpy_helper.to_array(attribute.t)
        self.layers, self.weights = [], []  # weights: channels-first, one per parametric layer
        self.skipped, self.renamed = set(), {}  # a MatMul's bias Add: folded into its Dense

    def refuse(self, position: int, node, why: str):
        name = f" '{node.name}'" if node.name else ""
        raise InputError(f"{self.path}: node {position}{name} ({node.op_type}): {why}")

    def attributes(self, node) -> dict:
        from onnx import helper

        return {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}

    def run(self) -> tuple:
        current, shape = self._input()
        input_shape = shape
        for position, node in enumerate(self.graph.node):
            if node.op_type == "Constant" or position in self.skipped:
                continue
            data = [name for name in node.input if name and name not in self.constants]
            if data != [current]:
                self.refuse(
                    position,
                    node,
                    f"takes {', '.join(map(repr, data)) or 'no tensor'}, not the output of the node before "
                    f"({current!r}): the spec's networks are a chain, one layer after another (no branches or "
                    "skip connections)",
                )
            shape = self._node(position, node, shape)
            current = self.renamed.get(position, node.output[0])
        outputs = [output.name for output in self.graph.output]
        if outputs[:1] != [current]:
            raise InputError(
                f"{self.path}: the graph's output is {outputs[:1]}, not the last node's ({current!r}); "
                "a network ends in its logits (or their softmax)"
            )
        if not self.layers or not isinstance(self.layers[-1], Dense):
            raise InputError(
                f"{self.path}: the last layer is no Gemm or MatMul+Add; a network ends in one (its logits)"
            )
        name = os.path.splitext(os.path.basename(self.path))[0]
        training = TrainingDefaults(
            Optimizer("sgd", TRAINING_DEFAULTS["learning_rate"], momentum=TRAINING_DEFAULTS["momentum"]),
            TRAINING_DEFAULTS["batch_size"],
            TRAINING_DEFAULTS["epochs"],
        )
        network = Network(
            name=name,
            layers=tuple(self.layers),
            training=training,
            input_shape=input_shape,
            num_classes=self.layers[-1].units,
            description=f"read from {os.path.basename(self.path)}",
            source=os.path.abspath(self.path),
            builtin=False,
        )
        indexes = [index for index, _, _ in network.parametric_layers()]
        weights = [replace(w, layer_index=index) for w, index in zip(self.weights, indexes)]
        return network, from_channels_first(network, weights)

    def _input(self) -> tuple:
        inputs = [value for value in self.graph.input if value.name not in self.constants]
        if len(inputs) != 1:
            raise InputError(
                f"{self.path}: the graph has {len(inputs)} inputs ({', '.join(value.name for value in inputs)}); "
                "a network takes one, the (N, C, H, W) images"
            )
        dims = inputs[0].type.tensor_type.shape.dim
        sizes = [dim.dim_value if dim.HasField("dim_value") else None for dim in dims]
        if len(sizes) != 4 or None in sizes[1:]:
            raise InputError(
                f"{self.path}: the input {inputs[0].name!r} has shape {sizes}; a network takes (N, C, H, W) images "
                "of a fixed size (export it with an example input of that size)"
            )
        channels, height, width = sizes[1:]
        return inputs[0].name, (height, width, channels)

    def _add(self, layer, shape: tuple, weights: Optional[LayerWeights] = None) -> tuple:
        self.layers.append(layer)
        if weights is not None:
            self.weights.append(weights)
        return output_shape(layer, shape)

    def _node(self, position: int, node, shape: tuple) -> tuple:
        kind, options = node.op_type, self.attributes(node)
        if kind == "Identity":
            return shape
        if kind in ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool") and len(shape) != 3:
            self.refuse(position, node, f"its input is a vector of {shape[0]}, not an (N, C, H, W) map")
        if kind == "Conv":
            return self._conv(position, node, options, shape)
        if kind == "BatchNormalization":
            scale, bias, mean, variance = (self.constants[name] for name in node.input[1:5])
            layer = BatchNormalization(decimal(options.get("momentum", 0.9)), decimal(options.get("epsilon", 1e-5)))
            as_f32 = [np.asarray(value, np.float32) for value in (scale, bias, mean, variance)]
            return self._add(layer, shape, LayerWeights(-1, *as_f32))
        if kind == "Relu":
            last = self.layers[-1] if self.layers else None
            if not isinstance(last, (Conv2D, Dense, BatchNormalization)) or last.activation is not None:
                after = type(last).__name__ if last is not None else "the input"
                self.refuse(position, node, f"a ReLU after {after}: the spec puts a ReLU on a Conv, Gemm or batch norm")
            self.layers[-1] = replace(last, activation="relu")
            return shape
        if kind in ("MaxPool", "AveragePool"):
            return self._pool(position, node, options, shape)
        if kind == "GlobalAveragePool":
            return self._add(GlobalAveragePooling2D(), shape)
        if kind == "Flatten":
            if options.get("axis", 1) != 1:
                self.refuse(position, node, f"axis {options['axis']}: the spec flattens to (N, features), axis 1")
            return self._add(Flatten(), shape)
        if kind == "Reshape":
            target = [int(value) for value in self.constants.get(node.input[1], np.array([])).ravel()]
            if len(target) != 2 or target[1] not in (-1, int(np.prod(shape))):
                self.refuse(position, node, f"to {target}: only a flatten to (N, features) is in the vocabulary")
            return self._add(Flatten(), shape)
        if kind in ("Gemm", "MatMul"):
            return self._dense(position, node, options, shape)
        if kind == "Add":
            self.refuse(position, node, "an Add not after a MatMul: only a MatMul's bias is in the vocabulary")
        if kind == "Dropout":
            ratio = options.get("ratio")
            if ratio is None:
                ratio = float(self.constants[node.input[1]]) if len(node.input) > 1 and node.input[1] else 0.5
            return self._add(Dropout(decimal(ratio)), shape)
        if kind == "Softmax":
            last = self.layers[-1] if self.layers else None
            if not isinstance(last, Dense) or last.activation is not None:
                self.refuse(position, node, "a softmax not right after the last Gemm")
            self.layers[-1] = replace(last, activation="softmax")
            return shape
        self.refuse(position, node, f"not in the spec's vocabulary ({VOCABULARY})")

    def _conv(self, position: int, node, options: dict, shape: tuple) -> tuple:
        kernel = self.constants.get(node.input[1])
        if kernel is None or kernel.ndim != 4:
            self.refuse(position, node, "its weight is not a constant (O, I, kH, kW) tensor")
        filters, _, size, width = kernel.shape
        strides = list(options.get("strides", [1, 1]))
        if size != width or len(set(strides)) != 1 or set(options.get("dilations", [1, 1])) != {1}:
            self.refuse(
                position, node, f"kernel {size}x{width}, strides {strides}: square kernels, one stride, no dilation"
            )
        if options.get("group", 1) != 1:
            self.refuse(position, node, f"group {options['group']}: grouped convolutions are not in the vocabulary")
        stride, pads = strides[0], list(options.get("pads", [0, 0, 0, 0]))
        auto = options.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        same = tuple(same_padding(side, size, stride) for side in shape[:2])
        (top, bottom), (left, right) = same
        if auto == "SAME_LOWER":
            self.refuse(
                position,
                node,
                "auto_pad SAME_LOWER puts the odd pixel at the top and left; the spec's same "
                "padding puts it at the bottom and right (SAME_UPPER)",
            )
        if auto == "SAME_UPPER" or (auto == "NOTSET" and pads == [top, left, bottom, right] and any(pads)):
            padding = "same"
        elif auto == "VALID" or not any(pads):
            padding = "valid"
        elif len(set(pads)) == 1:
            shape = self._add(ZeroPad2D(pads[0]), shape)
            padding = "valid"
        else:
            self.refuse(
                position,
                node,
                f"pads {pads} (top, left, bottom, right): neither none, TensorFlow's same "
                f"({[top, left, bottom, right]}) nor the same on every side",
            )
        bias = self.constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros(filters)
        layer = Conv2D(filters, size, padding=padding, activation=None, stride=stride)
        weights = LayerWeights(-1, np.asarray(kernel, np.float32), np.asarray(bias, np.float32))
        return self._add(layer, shape, weights)

    def _pool(self, position: int, node, options: dict, shape: tuple) -> tuple:
        kernel = list(options.get("kernel_shape", []))
        strides = list(options.get("strides", [1] * len(kernel)))
        plain = not any(options.get("pads", [0])) and not options.get("ceil_mode", 0)
        plain = plain and set(options.get("dilations", [1])) == {1}
        if len(set(kernel)) != 1 or strides != kernel or not plain:
            self.refuse(
                position,
                node,
                f"kernel {kernel}, strides {strides}: the spec pools square windows at a stride of the window, "
                "no pads, no ceil_mode",
            )
        layer = MaxPool2D(kernel[0]) if node.op_type == "MaxPool" else AveragePooling2D(kernel[0])
        return self._add(layer, shape)

    def _dense(self, position: int, node, options: dict, shape: tuple) -> tuple:
        if len(shape) != 1:
            self.refuse(position, node, f"its input is a {shape} map: flatten it first (Flatten)")
        matrix = self.constants.get(node.input[1])
        if matrix is None or matrix.ndim != 2:
            self.refuse(position, node, "its weight is not a constant matrix")
        if node.op_type == "Gemm":
            if options.get("transA", 0) or options.get("alpha", 1.0) != 1.0 or options.get("beta", 1.0) != 1.0:
                self.refuse(position, node, "transA, alpha or beta: only y = x W (+ b) is a Dense layer")
            kernel = matrix if options.get("transB", 0) else matrix.T  # (out, in), as channels-first keeps it
            bias = self.constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        else:
            kernel, bias = matrix.T, self._matmul_bias(position, node)
        if bias is None:
            bias = np.zeros(kernel.shape[0])
        if kernel.shape[1] != shape[0]:
            self.refuse(position, node, f"its weight takes {kernel.shape[1]} features, its input has {shape[0]}")
        layer = Dense(int(kernel.shape[0]), activation=None)
        return self._add(layer, shape, LayerWeights(-1, np.asarray(kernel, np.float32), np.asarray(bias, np.float32)))

    def _matmul_bias(self, position: int, node) -> np.ndarray:
        """The bias of the Add right after a MatMul (the Add then skipped)."""
        nodes = list(self.graph.node)
        after = nodes[position + 1] if position + 1 < len(nodes) else None
        if after is None or after.op_type != "Add" or node.output[0] not in after.input:
            self.refuse(position, node, "a MatMul without a bias Add after it: the spec's Dense has a bias")
        bias = [self.constants[name] for name in after.input if name in self.constants]
        if len(bias) != 1:
            self.refuse(position + 1, after, "its bias is not a constant vector")
        self.skipped.add(position + 1)
        self.renamed[position] = after.output[0]  # the chain goes on from the Add's output
        return bias[0]


# --------------------------------------------------------------------------- cache


def _stamp(path: str) -> np.ndarray:
    stat = os.stat(path)
    return np.array([CACHE_FORMAT, stat.st_size, stat.st_mtime_ns], np.int64)


def _write_cache(path: str, network: Network, weights: list) -> None:
    described = asdict(replace(network, given_weights=None))
    described["layers"] = [[type(layer).__name__, asdict(layer)] for layer in network.layers]
    described.pop("given_weights")
    arrays = {"stamp": _stamp(path), "network": np.array(json.dumps(described))}
    for k, w in enumerate(weights):
        for role in ("kernel", "bias", "running_mean", "running_var"):
            if getattr(w, role) is not None:
                arrays[f"{role}_{k}"] = getattr(w, role)
    target = cache_path(path)
    temporary = f"{target}.{os.getpid()}.tmp.npz"
    try:
        np.savez(temporary, **arrays)
        os.replace(temporary, target)
    except OSError as error:
        print(
            f"note: could not write the cache {target} ({error.strerror}); the legacy env cannot read the model",
            file=sys.stderr,
        )
        if os.path.exists(temporary):
            os.remove(temporary)


def _read_cache(path: str) -> Optional[Network]:
    try:
        with np.load(cache_path(path), allow_pickle=False) as cache:
            if not np.array_equal(cache["stamp"], _stamp(path)):
                return None
            described = json.loads(str(cache["network"]))
            arrays = {name: cache[name] for name in cache.files}
    except (OSError, ValueError, KeyError, *DAMAGED_ARCHIVE):  # a damaged cache: the model is read again
        return None
    layers = tuple(LAYER_CLASSES[kind](**fields) for kind, fields in described.pop("layers"))
    training = described.pop("training")
    training = TrainingDefaults(Optimizer(**training.pop("optimizer")), **training)
    described["input_shape"] = tuple(described["input_shape"])
    described["init_scales"] = tuple(tuple(pair) for pair in described["init_scales"])
    network = Network(layers=layers, training=training, **described)
    weights = [
        LayerWeights(
            index,
            arrays[f"kernel_{k}"],
            arrays[f"bias_{k}"],
            arrays.get(f"running_mean_{k}"),
            arrays.get(f"running_var_{k}"),
        )
        for k, (index, _, _) in enumerate(network.parametric_layers())
    ]
    return replace(network, given_weights=tuple(weights))
