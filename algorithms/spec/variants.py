"""Known errors, put in on purpose, to prove that they are found: by the localisation
(algorithms/studies/localise.py --fault FRAMEWORK:..., into one framework's model) and by
the parity verdict (an entry script's --fault, into one training run; the confusion table
of algorithms/studies/power.py). Each reaches the framework through its real build path:
a spec variant its build_model translates (`padding`), initial weights its model loads
(`weights`, the spec's Network.init_scales), or the shared batch order its loop draws
(`order`); the reference and every other framework or run keep the spec.

    weights:LAYER:FACTOR    the kernel of conv/dense layer LAYER times FACTOR (1.1: 10% off;
                            1e39: overflows float32 to inf, a non-finite layer)
    padding:LAYER:PIXELS    the ZeroPad2D before convolution LAYER pads PIXELS instead
    order:EPOCH:SEED        training runs only: the batches of epoch EPOCH (1-based) in
                            the order seed SEED draws instead of the run's --seed

LAYER is an index into the spec's layers (dropout included), as `--help` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from algorithms.spec.networks import Conv2D, Dense, Network, ZeroPad2D
from algorithms.spec.weights import LayerWeights

KINDS = ("weights", "padding")  # the layer faults: the localisation takes these
TRAINING_KINDS = KINDS + ("order",)  # an entry script's --fault takes these


@dataclass(frozen=True)
class Fault:
    kind: str  # one of TRAINING_KINDS
    layer: int  # index into the network's layers; for `order`, the 1-based epoch
    value: float

    def describe(self) -> str:
        return f"{self.kind}:{self.layer}:{self.value:g}"


def parse_fault(text: str, network: Network, kinds: tuple = KINDS) -> Fault:
    """KIND:LAYER:VALUE, checked against `network`; ValueError with the reason otherwise."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in kinds:
        raise ValueError(f"{text!r}: expected KIND:LAYER:VALUE with KIND one of {', '.join(kinds)}")
    try:
        fault = Fault(parts[0], int(parts[1]), float(parts[2]))
    except ValueError:
        raise ValueError(f"{text!r}: LAYER is an integer and VALUE a number") from None
    if fault.kind == "order":
        if fault.layer < 1 or fault.value != int(fault.value):
            raise ValueError(f"{text!r}: expected order:EPOCH:SEED, EPOCH from 1, SEED a whole number")
        return fault
    layers = network.layers
    if not 0 <= fault.layer < len(layers):
        raise ValueError(f"{text!r}: layer {fault.layer} is not one of {network.name}'s 0-{len(layers) - 1}")
    layer = layers[fault.layer]
    if fault.kind == "weights" and not isinstance(layer, (Conv2D, Dense)):
        raise ValueError(f"{text!r}: layer {fault.layer} ({type(layer).__name__}) has no weights")
    if fault.kind == "padding" and not (
        isinstance(layer, Conv2D) and fault.layer > 0 and isinstance(layers[fault.layer - 1], ZeroPad2D)
    ):
        raise ValueError(f"{text!r}: layer {fault.layer} is not a convolution after a ZeroPad2D")
    if fault.kind == "padding" and (fault.value != int(fault.value) or fault.value < 0):
        raise ValueError(f"{text!r}: padding is a whole number of pixels")
    return fault


def apply_fault(fault: Fault, network: Network, weights: list) -> tuple:
    """(the network, the weights) the faulty framework gets in place of the spec's."""
    if fault.kind == "weights":
        with np.errstate(over="ignore"):  # a factor past float32's range is meant: inf weights
            weights = [
                LayerWeights(w.layer_index, np.float32(w.kernel * fault.value), w.bias)
                if w.layer_index == fault.layer
                else w
                for w in weights
            ]
        return network, weights
    layers = list(network.layers)
    layers[fault.layer - 1] = ZeroPad2D(int(fault.value))
    return replace(network, layers=tuple(layers)), weights


def faulted_network(fault: Fault, network: Network) -> Network:
    """The spec network a training run with this fault builds (its full layer list,
    dropout included, before --parity drops dropout): `weights` scales the layer's initial
    kernel through Network.init_scales, `padding` replaces the ZeroPad2D, `order` leaves
    the network as it is (the run's batch order carries it: RunConfig.order_seed)."""
    if fault.kind == "weights":
        weighted = [index for index, _, _ in network.parametric_layers()]
        return replace(network, init_scales=((weighted.index(fault.layer), fault.value),))
    if fault.kind == "padding":
        return apply_fault(fault, network, [])[0]
    return network
