"""What a network adds to a framework's measured memory (resources.py's Footprint, measured
with the default net): its weights with their gradients and the optimizer's state, and
its activations per sample, counted from the spec layer by layer. Imports no framework.

    weights   every trained parameter (and a batch norm's running statistics) as float32,
              held WEIGHT_COPIES times (the numpy initial weights, the framework's copy,
              their gradients) and once more per optimizer slot (sgd's momentum: one;
              adam's two moments: two)
    per sample  the float32 outputs of every layer and the input (a batch norm's twice: it
              keeps its normalised values beside its output for the backward pass), what a
              framework keeps for the backward pass grows with; each framework's measured
              bytes per sample of the default net (Footprint.sample_mb) scale by this
              network's count over the default net's

The default net's own weights and activations are inside the measured figures, so a network
costs the difference to the default net's (a smaller one, a little less).
docs/own-network.md#memory-before-it-starts has the figures, measured against real runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from algorithms.network.layers import BatchNormalization, Network, Optimizer, layer_label, weight_shapes
from algorithms.network.networks import CNN2D_3LAYER

FLOAT_BYTES = 4
MB = 2**20
WEIGHT_COPIES = 3  # the numpy initial weights, the framework's weights, their gradients


@dataclass(frozen=True)
class LayerMemory:
    index: int  # in Network.layers
    label: str  # layer_label's: Dense 128, Conv2D 16 3x3 same
    weights: int  # trained parameters, and a batch norm's running mean and variance
    outputs: int  # floats of its output per sample that training keeps (a batch norm's: twice)


@dataclass(frozen=True)
class NetworkMemory:
    """A network's weights and activations, layer by layer, and what they cost beside the
    default net's (the one the frameworks' footprints were measured with)."""

    layers: tuple  # LayerMemory, one per layer
    inputs: int  # floats of one input image
    weight_copies: int  # WEIGHT_COPIES and the optimizer's slots

    @property
    def weights(self) -> int:
        return sum(layer.weights for layer in self.layers)

    @property
    def outputs_per_sample(self) -> int:
        return self.inputs + sum(layer.outputs for layer in self.layers)

    def weights_mb(self, copies: int = 0) -> float:
        """The weights in `copies` copies (0: every copy a training process holds)."""
        return self.weights * (copies or self.weight_copies) * FLOAT_BYTES / MB


def optimizer_slots(optimizer: Optimizer) -> int:
    """The arrays per weight an optimizer keeps: sgd's momentum (none without), adam's two moments."""
    if optimizer.name == "adam":
        return 2
    return 1 if optimizer.momentum else 0


def network_memory(network: Network, optimizer: Optimizer) -> NetworkMemory:
    layers, parametric = [], {index for index, _, _ in network.parametric_layers()}
    for index, (layer, in_shape, out_shape) in enumerate(
        zip(network.layers, network.input_shapes(), network.output_shapes())
    ):
        weights = 0
        if index in parametric:
            kernel, bias = weight_shapes(layer, in_shape)
            weights = prod(kernel) + prod(bias) + (2 * in_shape[-1] if isinstance(layer, BatchNormalization) else 0)
        kept = 2 if isinstance(layer, BatchNormalization) else 1  # its normalised values and its output
        layers.append(LayerMemory(index, layer_label(layer), weights, kept * prod(out_shape)))
    return NetworkMemory(tuple(layers), prod(network.input_shape), WEIGHT_COPIES + optimizer_slots(optimizer))


DEFAULT_NET = network_memory(CNN2D_3LAYER, CNN2D_3LAYER.training.optimizer)


def extra_weights_mb(memory: NetworkMemory) -> float:
    """What a network's weights (all their copies) add to a footprint measured with the default net's."""
    return memory.weights_mb() - DEFAULT_NET.weights_mb()
