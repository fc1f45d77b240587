"""Known errors, put in on purpose, to prove that they are found: by the localisation
(algorithms/localisation/localise.py --fault FRAMEWORK:..., into one framework's model) and by
the parity verdict (an entry script's --fault, into one training run; the confusion table
of algorithms/studies/power.py). Each reaches the framework through its real build path:
a spec variant its build_model translates (`padding`, `dropout`, `bias`), initial weights
its model loads (`weights`, the spec's Network.init_scales), the shared batch order its
loop draws (`order`) or the spec's loss its trainer takes (`loss`); the reference and every
other framework or run keep the spec.

    weights:LAYER:FACTOR    the kernel of conv/dense layer LAYER times FACTOR (1.1: 10% off;
                            1e39: overflows float32 to inf, a non-finite layer; nan: NaN)
    padding:LAYER:PIXELS    the ZeroPad2D before convolution LAYER pads PIXELS instead
    bias:LAYER              conv/dense layer LAYER built without its bias (torch builds
                            it; the other wrappers refuse it in one line)
    bn_mean:LAYER           the BatchNormalization LAYER with its batch mean cut from the
                            gradient (a constant to the backward pass; torch builds it)
    bn_eval:LAYER           the BatchNormalization LAYER normalising with the batch's
                            statistics in evaluation too, not the running ones (torch)
    same_side:LAYER         the `same` convolution LAYER with its odd padding pixel on the
                            top and left, not the bottom and right (torch builds it)
    frozen:LAYER            localisation only: conv/dense layer LAYER's bias built frozen, so
                            the framework computes no gradient for it (torch requires_grad
                            False, TensorFlow and Keras 3 a variable not trainable; the
                            legacy wrappers and Caffe refuse it)
    shape:LAYER             localisation only: the MaxPool2D LAYER pads one pixel each side,
                            a map of another height and width (torch builds it)
    die:LAYER               localisation only: the framework's process ends (os._exit) after
                            layer LAYER's output, the first it holds from LAYER on, as a
                            crashing framework would (every framework)
    dropout:LAYER:RATE      training runs only: the Dropout layer LAYER at RATE, and kept
                            in a --parity run (whose spec has no dropout: a rate of 0)
    loss:sum                training runs only: the gradient of the batch's summed loss, not
                            its mean (torch's trainer; ps, async and localsgd refuse it;
                            the step's logged loss stays the mean, as a framework with this
                            bug would log it)
    order:EPOCH:SEED        training runs only: the batches of epoch EPOCH (1-based) in
                            the order seed SEED draws instead of the run's --seed
    same_order              training runs only: every epoch's batches in epoch 1's order
                            (the shared batch order, not reshuffled: a data loader whose
                            shuffle draws once)
    eval_dropout            training runs only: torch evaluates with its dropout on (the
                            model left in training mode: forgetting model.eval())
    momentum_reset          training runs only: torch's optimizer state (momentum, Adam's
                            moments) cleared at every epoch's first step (an optimizer made
                            anew each epoch)
    lr_late                 training runs only: torch applies each change of the learning
                            rate one epoch late (a scheduler stepped at the wrong place)
    accuracy_labels         training runs only: torch's training accuracy counted against
                            the batch's labels shifted by one row (a metric on the wrong
                            labels); its loss is right
    late_lr:EPOCH:FACTOR    training runs only: from epoch EPOCH (1-based) on, torch's
                            optimizer steps at FACTOR x the learning rate (a schedule nobody
                            asked for)
    late_momentum:EPOCH:VALUE  training runs only: from epoch EPOCH on, torch's optimizer's
                            momentum is VALUE
    skip:START:EVERY        training runs only: torch computes the gradient of steps START,
                            START + EVERY, ... and applies no update (a step lost now and then)
    maxnorm:LAYER:VALUE     training runs only: after each update, torch scales every unit's
                            incoming kernel of conv/dense layer LAYER down to an L2 norm of
                            VALUE where it is larger (a max-norm constraint left on): it acts
                            only once weights grow that large
These last four act where the drift envelope cannot see (past its horizon): the step check's
known answers (docs/comparing.md#the-step-check).

LAYER is an index into the spec's layers (dropout included), as `--help` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from algorithms.network.networks import BatchNormalization, Conv2D, Dense, Dropout, MaxPool2D, Network, ZeroPad2D
from algorithms.network.weights import LayerWeights

# faults both the localisation and a training run take
LAYER_KINDS = ("weights", "padding", "bias", "bn_mean", "bn_eval", "same_side")
KINDS = LAYER_KINDS + ("frozen", "shape", "die")  # the localisation takes these
# faults named by their kind alone: they act on a run's data order, evaluation, optimizer
# state, schedule or metric, not on a layer
BARE_KINDS = ("same_order", "eval_dropout", "momentum_reset", "lr_late", "accuracy_labels")
# faults that act in the trainer from an epoch or step on (EPOCH or START in the LAYER place)
LATE_KINDS = ("late_lr", "late_momentum", "skip")
# an entry script's --fault takes these
TRAINING_KINDS = LAYER_KINDS + ("dropout", "loss", "order") + BARE_KINDS + LATE_KINDS + ("maxnorm",)
# KIND:LAYER (bias, frozen, shape, die) and loss:sum carry no value
WITHOUT_VALUE = {
    "bias": 0.0,
    "frozen": 0.0,
    "shape": 0.0,
    "die": 0.0,
    "loss": 0.0,
    "bn_mean": 0.0,
    "bn_eval": 0.0,
    "same_side": 0.0,
}
# a --fault die:LAYER child's exit status: not Python's for an error (1), nor a bad flag's (2)
DIE_EXIT_STATUS = 70
# each training kind as --help says it
KIND_HELP = {
    "weights": "weights:LAYER:FACTOR (that layer's initial kernel times FACTOR)",
    "padding": "padding:LAYER:PIXELS (the padding before that convolution)",
    "bias": "bias:LAYER (that conv or dense layer without its bias)",
    "bn_mean": "bn_mean:LAYER (that batch norm's mean cut from the gradient)",
    "bn_eval": "bn_eval:LAYER (that batch norm on the batch's statistics in evaluation too)",
    "same_side": "same_side:LAYER (that same convolution's odd padding pixel on the top and left)",
    "dropout": "dropout:LAYER:RATE (that Dropout layer at RATE, kept in a --parity run)",
    "loss": "loss:sum (the gradient of the batch's summed loss, not its mean)",
    "order": "order:EPOCH:SEED (that epoch's batches in another order)",
    "same_order": "same_order (every epoch's batches in epoch 1's order)",
    "eval_dropout": "eval_dropout (evaluated with dropout on)",
    "momentum_reset": "momentum_reset (the optimizer's state cleared every epoch)",
    "lr_late": "lr_late (each change of the learning rate applied an epoch late)",
    "accuracy_labels": "accuracy_labels (the training accuracy counted on shifted labels)",
    "late_lr": "late_lr:EPOCH:FACTOR (from that epoch on, FACTOR x the learning rate)",
    "late_momentum": "late_momentum:EPOCH:VALUE (from that epoch on, momentum VALUE)",
    "skip": "skip:START:EVERY (no update at steps START, START + EVERY, ...)",
    "maxnorm": "maxnorm:LAYER:VALUE (that layer's units' kernels held to an L2 norm of VALUE)",
}


@dataclass(frozen=True)
class Fault:
    kind: str  # one of TRAINING_KINDS
    layer: int  # index into the network's layers; for `order`, the 1-based epoch
    value: float

    def describe(self) -> str:
        if self.kind in BARE_KINDS:
            return self.kind
        if self.kind == "loss":
            return "loss:sum"
        if self.kind in WITHOUT_VALUE:
            return f"{self.kind}:{self.layer}"
        return f"{self.kind}:{self.layer}:{self.value:g}"


def parse_fault(text: str, network: Network, kinds: tuple = KINDS) -> Fault:
    """KIND:LAYER:VALUE (bias:LAYER, loss:sum), checked against `network`; ValueError with
    the reason otherwise."""
    parts = text.split(":")
    if text in BARE_KINDS and text in kinds:
        return Fault(text, 0, 0.0)
    short = "/".join(kind for kind in kinds if kind in WITHOUT_VALUE and kind != "loss")
    expected = f"KIND:LAYER:VALUE ({short}:LAYER" + (", loss:sum)" if "loss" in kinds else ")")
    if parts[0] not in kinds or len(parts) != (2 if parts[0] in WITHOUT_VALUE else 3):
        raise ValueError(f"{text!r}: expected {expected} with KIND one of {', '.join(kinds)}")
    if parts[0] == "loss":
        if parts[1] != "sum":
            raise ValueError(f"{text!r}: the loss fault is loss:sum (the summed loss, not the mean)")
        return Fault("loss", 0, WITHOUT_VALUE["loss"])
    try:
        fault = Fault(parts[0], int(parts[1]), float(parts[2]) if len(parts) == 3 else WITHOUT_VALUE[parts[0]])
    except ValueError:
        raise ValueError(f"{text!r}: LAYER is an integer and VALUE a number") from None
    if fault.kind == "order":
        if fault.layer < 1 or fault.value != int(fault.value):
            raise ValueError(f"{text!r}: expected order:EPOCH:SEED, EPOCH from 1, SEED a whole number")
        return fault
    if fault.kind in LATE_KINDS:
        return _late(text, fault)
    layers = network.layers
    if not 0 <= fault.layer < len(layers):
        raise ValueError(f"{text!r}: layer {fault.layer} is not one of {network.name}'s 0-{len(layers) - 1}")
    layer = layers[fault.layer]
    if fault.kind == "maxnorm" and not fault.value > 0:
        raise ValueError(f"{text!r}: a max norm is a positive number")
    if fault.kind in ("weights", "bias", "frozen", "maxnorm") and not isinstance(layer, (Conv2D, Dense)):
        raise ValueError(f"{text!r}: layer {fault.layer} ({type(layer).__name__}) has no weights")
    if fault.kind in ("bn_mean", "bn_eval") and not isinstance(layer, BatchNormalization):
        raise ValueError(f"{text!r}: layer {fault.layer} ({type(layer).__name__}) is not a BatchNormalization")
    if fault.kind == "same_side":
        in_shape = network.input_shapes()[fault.layer] if network.input_shape else None
        if not isinstance(layer, Conv2D) or layer.padding != "same":
            raise ValueError(f"{text!r}: layer {fault.layer} ({type(layer).__name__}) is not a 'same' Conv2D")
        if in_shape is not None and all(before == after for before, after in layer.paddings(in_shape)):
            raise ValueError(
                f"{text!r}: layer {fault.layer}'s padding is the same on both sides of its {in_shape[0]}x"
                f"{in_shape[1]} input: there is no odd pixel to move (a stride of 2, or an even kernel, makes one)"
            )
    if fault.kind == "shape" and not isinstance(layer, MaxPool2D):
        raise ValueError(f"{text!r}: layer {fault.layer} ({type(layer).__name__}) is not a MaxPool2D")
    if fault.kind == "die" and isinstance(layer, Dropout):
        raise ValueError(f"{text!r}: layer {fault.layer} (Dropout) does not run here (dropout is off)")
    if fault.kind == "dropout" and not isinstance(layer, Dropout):
        raise ValueError(f"{text!r}: layer {fault.layer} ({type(layer).__name__}) is not a Dropout")
    if fault.kind == "dropout" and not 0 <= fault.value < 1:
        raise ValueError(f"{text!r}: a dropout rate is from 0 up to (not including) 1")
    if fault.kind == "padding" and not (
        isinstance(layer, Conv2D) and fault.layer > 0 and isinstance(layers[fault.layer - 1], ZeroPad2D)
    ):
        raise ValueError(f"{text!r}: layer {fault.layer} is not a convolution after a ZeroPad2D")
    if fault.kind == "padding" and (fault.value != int(fault.value) or fault.value < 0):
        raise ValueError(f"{text!r}: padding is a whole number of pixels")
    return fault


def _late(text: str, fault: Fault) -> Fault:
    """late_lr:EPOCH:FACTOR, late_momentum:EPOCH:VALUE, skip:START:EVERY checked."""
    if fault.layer < 1:
        raise ValueError(f"{text!r}: {'START' if fault.kind == 'skip' else 'EPOCH'} counts from 1")
    if fault.kind == "late_lr" and not fault.value > 0:
        raise ValueError(f"{text!r}: the learning rate's FACTOR is a positive number")
    if fault.kind == "late_momentum" and not 0 <= fault.value < 1:
        raise ValueError(f"{text!r}: a momentum is from 0 up to (not including) 1")
    if fault.kind == "skip" and (fault.value < 1 or fault.value != int(fault.value)):
        raise ValueError(f"{text!r}: EVERY is a whole number of steps, 1 or more")
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
    if fault.kind == "loss":
        return replace(network, loss_reduction="sum"), weights
    if fault.kind == "die":  # the localisation's child carries it out (localise_child.py)
        return network, weights
    layers = list(network.layers)
    if fault.kind == "bias":
        layers[fault.layer] = replace(layers[fault.layer], bias=False)
    elif fault.kind == "frozen":
        layers[fault.layer] = replace(layers[fault.layer], bias_frozen=True)
    elif fault.kind == "shape":
        layers[fault.layer] = replace(layers[fault.layer], padding=1)
    elif fault.kind == "dropout":
        layers[fault.layer] = Dropout(fault.value, in_parity=True)
    elif fault.kind == "bn_mean":
        layers[fault.layer] = replace(layers[fault.layer], mean_in_gradient=False)
    elif fault.kind == "bn_eval":
        layers[fault.layer] = replace(layers[fault.layer], evaluation="batch")
    elif fault.kind == "same_side":
        layers[fault.layer] = replace(layers[fault.layer], extra_padding_at="start")
    else:
        layers[fault.layer - 1] = ZeroPad2D(int(fault.value))
    return replace(network, layers=tuple(layers)), weights


def faulted_network(fault: Fault, network: Network) -> Network:
    """The spec network a training run with this fault builds (its full layer list,
    dropout included, before --parity drops dropout): `weights` scales the layer's initial
    kernel through Network.init_scales, `padding`, `bias`, `dropout` and `loss` are the
    spec variants of apply_fault, `order` leaves the network as it is (the run's batch
    order carries it: RunConfig.order_seed)."""
    if fault.kind == "weights":
        weighted = [index for index, _, _ in network.parametric_layers()]
        return replace(network, init_scales=((weighted.index(fault.layer), fault.value),))
    if fault.kind in ("order", "maxnorm") or fault.kind in BARE_KINDS + LATE_KINDS:
        return network
    return apply_fault(fault, network, [])[0]
