"""A network file: the spec's vocabulary (layers.py) written as TOML, read with the
standard library's tomllib. docs/own-network.md has the whole format; in short:

    name = "digits_8x8"          # optional: the file's stem
    input_shape = [8, 8, 1]      # optional: the data's (H, W, C)
    [training]                   # optional: sgd, lr 0.01, momentum 0.9, batch 32, 10 epochs
    optimizer = "sgd"
    learning_rate = 0.05
    [[layers]]
    type = "Conv2D"
    filters = 16
    kernel_size = 3
    ...
    [[layers]]
    type = "Dense"               # the last layer: a Dense whose units are the classes
    activation = "softmax"       # (units optional: the data's class count)

A bad file is an InputError of one line naming the file, the line, the key and the fix.
Whatever the data decides (input_shape, the last layer's units, when the file leaves
them out) is filled in by `complete`, which also checks every layer fits its input.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import replace
from typing import Optional

from algorithms.errors import InputError
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
)

LAYER_TYPES = {
    "ZeroPad2D": (ZeroPad2D, ("padding",)),
    "Conv2D": (Conv2D, ("filters", "kernel_size", "stride", "padding", "activation")),
    "BatchNormalization": (BatchNormalization, ("momentum", "epsilon", "activation")),
    "MaxPool2D": (MaxPool2D, ("pool_size",)),
    "AveragePooling2D": (AveragePooling2D, ("pool_size",)),
    "GlobalAveragePooling2D": (GlobalAveragePooling2D, ()),
    "Flatten": (Flatten, ()),
    "Dense": (Dense, ("units", "activation")),
    "Dropout": (Dropout, ("rate",)),
}
REQUIRED = {"ZeroPad2D": ("padding",), "Conv2D": ("filters", "kernel_size"), "MaxPool2D": ("pool_size",)}
REQUIRED.update({"AveragePooling2D": ("pool_size",), "Dropout": ("rate",)})
TOP_KEYS = ("name", "description", "input_shape", "main_command_batch", "training", "layers")
TRAINING_KEYS = (
    "optimizer",
    "learning_rate",
    "momentum",
    "nesterov",
    "beta_1",
    "beta_2",
    "epsilon",
    "batch_size",
    "epochs",
    "validation_split",
)
# a network file without a [training] table trains so (docs/own-network.md)
TRAINING_DEFAULTS = {"optimizer": "sgd", "learning_rate": 0.01, "momentum": 0.9, "batch_size": 32, "epochs": 10}
ACTIVATION_NAMES = {"relu": "relu", "none": None, "linear": None, "softmax": "softmax"}


class _Lines:
    """Where a key sits in the file's text: tomllib gives values, not lines."""

    def __init__(self, text: str):
        self.lines = text.splitlines()

    def of(self, table: str, number: int = 0, key: Optional[str] = None) -> int:
        """The 1-based line of `key` in the `number`-th `[table]` / `[[table]]` ("" for the
        top), or of the table's header when the key is not written there; 1 when neither is."""
        current, seen, header = ("", 0), {}, None
        for line_number, line in enumerate(self.lines, start=1):
            stripped = line.strip()
            heading = re.match(r"^\[\[?\s*([^\]\s]+)\s*\]", stripped)
            if heading:
                seen[heading.group(1)] = seen.get(heading.group(1), -1) + 1
                current = (heading.group(1), seen[heading.group(1)])
                header = line_number if current == (table, number) else header
                continue
            if key and current == (table, number) and re.match(rf"^{re.escape(key)}\s*=", stripped):
                return line_number
        return header or 1


def read_network_file(path: str) -> Network:
    """The network of a TOML file; its input_shape and its last Dense's units may be None
    (the data fills them in: `complete`)."""
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; --network takes a .toml network file, an .onnx model or a name")
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise InputError(f"{path}: cannot be read ({error.strerror or error}); pass an existing .toml file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: is not UTF-8 text (byte at offset {error.start}); save it as UTF-8 TOML") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = getattr(error, "lineno", None) or _line_in_message(str(error))
        message = getattr(error, "msg", None) or str(error).split(" (at ")[0]
        raise InputError(
            f"{path}:{line}: not valid TOML ({message}); fix the syntax (docs/own-network.md shows the format)"
        ) from None
    return _network(path, document, _Lines(text))


def _line_in_message(message: str) -> int:
    found = re.search(r"line (\d+)", message)
    return int(found.group(1)) if found else 1


def _network(path: str, document: dict, lines: _Lines) -> Network:
    def fail(line: int, text: str):
        raise InputError(f"{path}:{line}: {text}")

    for key in document:
        if key not in TOP_KEYS:
            fail(lines.of("", key=key), f"unknown key {key!r}; the top-level keys are {', '.join(TOP_KEYS)}")
    name = document.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        fail(lines.of("", key="name"), f"name = {name!r}: letters, digits, '_', '.' and '-', like name = \"my_net\"")
    input_shape = document.get("input_shape")
    if input_shape is not None:
        if not (isinstance(input_shape, list) and len(input_shape) == 3 and all(_whole(v, 1) for v in input_shape)):
            fail(
                lines.of("", key="input_shape"),
                f"input_shape = {input_shape!r}: expected [height, width, channels] of whole numbers, like [32, 32, 3]",
            )
        input_shape = tuple(input_shape)
    main_batch = document.get("main_command_batch")
    if main_batch is not None and not _whole(main_batch, 1):
        fail(lines.of("", key="main_command_batch"), "main_command_batch: a whole number of 1 or more")
    layers_table = document.get("layers")
    if not isinstance(layers_table, list) or not layers_table or not all(isinstance(t, dict) for t in layers_table):
        fail(
            lines.of("", key="layers"),
            'no layers: write each as a [[layers]] table with its type, like [[layers]] type = "Conv2D"',
        )
    layers = tuple(_layer(index, table, lines, fail) for index, table in enumerate(layers_table))
    last = layers_table[-1]
    if not isinstance(layers[-1], Dense):
        fail(
            lines.of("layers", len(layers) - 1, "type"),
            f"the last layer is a {last['type']}; a network ends in a Dense layer with one unit per class",
        )
    for index, layer in enumerate(layers[:-1]):
        if getattr(layer, "activation", None) == "softmax":
            fail(lines.of("layers", index, "activation"), "softmax: only the last layer's activation may be softmax")
    return Network(
        name=name,
        layers=layers,
        training=_training(document.get("training", {}), lines, fail),
        input_shape=input_shape,
        num_classes=layers[-1].units,
        description=str(document.get("description", "")),
        main_command_batch=main_batch,
        source=os.path.abspath(path),
        builtin=False,
    )


def _whole(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _layer(index: int, table: dict, lines: _Lines, fail):
    where = f"layers[{index}]"
    kind = table.get("type")
    if kind not in LAYER_TYPES:
        line = lines.of("layers", index, "type")
        if kind is None:
            fail(line, f'{where} has no type; add one, like type = "Conv2D" ({", ".join(LAYER_TYPES)})')
        fail(line, f"{where}.type = {kind!r}: not in the spec's vocabulary; use one of {', '.join(LAYER_TYPES)}")
    cls, keys = LAYER_TYPES[kind]
    for key in table:
        if key != "type" and key not in keys:
            fail(
                lines.of("layers", index, key),
                f"{where} ({kind}): unknown key {key!r}; "
                + (f"its keys are {', '.join(keys)}" if keys else "it takes no keys but type"),
            )
    for key in REQUIRED.get(kind, ()):
        if key not in table:
            fail(lines.of("layers", index), f"{where} ({kind}) has no {key}; add {key} = ...")
    values = {}
    for key in keys:
        if key not in table:
            continue
        value, line = table[key], lines.of("layers", index, key)
        if key in ("filters", "kernel_size", "stride", "pool_size", "units") and not _whole(value, 1):
            fail(line, f"{where}.{key} = {value!r}: expected a whole number of 1 or more, like {key} = 3")
        if key == "padding" and kind == "ZeroPad2D" and not _whole(value, 0):
            fail(line, f"{where}.padding = {value!r}: expected a whole number of pixels, like padding = 1")
        if key == "padding" and kind == "Conv2D" and value not in ("valid", "same"):
            fail(line, f'{where}.padding = {value!r}: expected "valid" or "same"')
        if key == "activation":
            if value not in ACTIVATION_NAMES:
                fail(line, f'{where}.activation = {value!r}: expected "relu", "none" or (last layer) "softmax"')
            value = ACTIVATION_NAMES[value]
        if key == "rate" and not (_number(value) and 0 <= value < 1):
            fail(line, f"{where}.rate = {value!r}: a dropout rate from 0 up to (not including) 1, like rate = 0.5")
        if key == "momentum" and not (_number(value) and 0 <= value < 1):
            fail(line, f"{where}.momentum = {value!r}: from 0 up to (not including) 1, like momentum = 0.99")
        if key == "epsilon" and not (_number(value) and value > 0):
            fail(line, f"{where}.epsilon = {value!r}: a number above 0, like epsilon = 0.001")
        values[key] = float(value) if key in ("rate", "momentum", "epsilon") else value
    if kind == "Dense" and "units" not in values:
        values["units"] = None  # the last layer's: the data's classes (complete)
    return cls(**values)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _training(table, lines: _Lines, fail) -> TrainingDefaults:
    if not isinstance(table, dict):
        fail(lines.of("", key="training"), "training: write it as a [training] table")
    for key in table:
        if key not in TRAINING_KEYS:
            known = ", ".join(TRAINING_KEYS)
            fail(lines.of("training", 0, key), f"[training]: unknown key {key!r}; the keys are {known}")
    given = {**TRAINING_DEFAULTS, **table}
    if "optimizer" in table and table["optimizer"] == "adam" and "momentum" not in table:
        given.pop("momentum")
    name = given["optimizer"]
    if name not in ("sgd", "adam"):
        fail(lines.of("training", 0, "optimizer"), f'optimizer = {name!r}: expected "sgd" or "adam"')
    for key in ("learning_rate", "beta_1", "beta_2", "epsilon"):
        if key in given and not (_number(given[key]) and given[key] > 0):
            fail(lines.of("training", 0, key), f"{key} = {given[key]!r}: a number above 0")
    for key, other in (("momentum", "adam"), ("nesterov", "adam"), ("beta_1", "sgd"), ("beta_2", "sgd")):
        if key in table and name == other:
            fail(lines.of("training", 0, key), f"{key}: {name} has no {key}; drop it or use the other optimizer")
    if "momentum" in given and not (_number(given["momentum"]) and 0 <= given["momentum"] < 1):
        fail(lines.of("training", 0, "momentum"), f"momentum = {given['momentum']!r}: from 0 up to 1")
    if "nesterov" in given and not isinstance(given["nesterov"], bool):
        fail(lines.of("training", 0, "nesterov"), f"nesterov = {given['nesterov']!r}: true or false")
    for key in ("batch_size", "epochs"):
        if not _whole(given[key], 1):
            fail(lines.of("training", 0, key), f"{key} = {given[key]!r}: a whole number of 1 or more")
    split = given.get("validation_split", 0.2)
    if not (_number(split) and 0 < split < 1):
        fail(lines.of("training", 0, "validation_split"), f"validation_split = {split!r}: a fraction above 0, below 1")
    hyper = {key: given[key] for key in ("momentum", "nesterov", "beta_1", "beta_2", "epsilon") if key in given}
    optimizer = Optimizer(name, float(given["learning_rate"]), **hyper)
    return TrainingDefaults(optimizer, given["batch_size"], given["epochs"], float(split))


def complete(network: Network, input_shape: tuple, num_classes: int, what: str) -> Network:
    """`network` with what its file left to the data filled in (`what` names the data, for
    the errors), every layer checked against its input; InputError, one line, otherwise."""
    where = network.source or network.name
    lines = _Lines(_text(network.source)) if network.source and not network.builtin else None

    def line_of(index: Optional[int] = None, key: Optional[str] = None) -> str:
        if lines is None:
            return where
        return f"{where}:{lines.of('layers', index, key) if index is not None else lines.of('', key=key)}"

    if network.input_shape is not None and tuple(network.input_shape) != tuple(input_shape):
        raise InputError(
            f"{line_of(key='input_shape')}: input_shape {_shape(network.input_shape)} but {what} holds "
            f"{_shape(input_shape)} images; give data of that shape, or set input_shape = {list(input_shape)}"
        )
    last = network.layers[-1]
    units = last.units if last.units is not None else num_classes
    if units < num_classes:
        raise InputError(
            f"{line_of(len(network.layers) - 1, 'units')}: the last layer has {units} units but {what} has "
            f"{num_classes} classes (labels 0-{num_classes - 1}); set units = {num_classes} (or leave it out)"
        )
    layers = network.layers[:-1] + (replace(last, units=units),)
    completed = replace(network, layers=layers, input_shape=tuple(input_shape), num_classes=units)
    check_shapes(completed, line_of)
    return completed


def check_shapes(network: Network, line_of=None) -> None:
    """Every layer gets an input it can take and gives a non-empty output; InputError otherwise."""

    def where(index):
        return line_of(index, "type") if line_of else f"{network.source or network.name} layer {index}"

    shape = network.input_shape
    for index, layer in enumerate(network.layers):
        kind = type(layer).__name__
        if isinstance(layer, Dense) and len(shape) != 1:
            raise InputError(
                f"{where(index)}: layers[{index}] Dense takes a vector, its input is a {_shape(shape)} map; "
                "put a Flatten or a GlobalAveragePooling2D before it"
            )
        if not isinstance(layer, (Dense, Dropout, BatchNormalization)) and len(shape) != 3:
            raise InputError(
                f"{where(index)}: layers[{index}] {kind} takes an (H, W, C) map, its input is a vector of "
                f"{shape[0]}; move it before the Flatten"
            )
        checked = replace(network, layers=network.layers[: index + 1])  # the layers after it are not checked yet
        if isinstance(layer, BatchNormalization) and checked.flattened_map_shape(index) is not None:
            raise InputError(
                f"{where(index)}: layers[{index}] BatchNormalization of a flattened map normalises each "
                "pixel apart; put it before the Flatten (one per channel) or after a Dense"
            )
        after = output_shape(layer, shape)
        if min(after) < 1:
            raise InputError(
                f"{where(index)}: layers[{index}] {kind} on a {_shape(shape)} input leaves {_shape(after)}; "
                'use a smaller kernel or pool, padding "same", or fewer downsampling layers'
            )
        shape = after


def _shape(shape: tuple) -> str:
    return "x".join(str(side) for side in shape)


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return ""
