"""Prints, as JSON, keras_wrapper's fused model (pads folded into 'same' convolutions,
ReLUs after the pools: keras_wrapper/model.py) against its spec layers one by one
(`build_model(fused=False)`) on the backend KERAS_BACKEND names, in its own process (a Keras
backend is fixed at import; Keras 2 on Theano runs it in .venv-legacy): for each network,
both models' layers, and in training (a BatchNormalization on the batch's statistics) the
loss, each weight's gradient and the outputs at the layers the fused model holds.

    KERAS_BACKEND=torch python -m tests.helpers.keras_fused_probe
"""

import json

import numpy as np

ROWS = 32


def probe_network() -> object:
    """Every rewrite and its limits in one small net: a pad folded as 'same' before a conv
    whose ReLU moves after the pool, a batch normalisation whose ReLU moves after the pool,
    and a pad of 2 before a 3x3 conv (not 'same': kept as its own layer)."""
    from algorithms.network.layers import Optimizer, TrainingDefaults
    from algorithms.network.networks import BatchNormalization, Conv2D, Dense, Flatten, MaxPool2D, Network, ZeroPad2D

    layers = (
        ZeroPad2D(1),
        Conv2D(6, 3),
        MaxPool2D(2),
        Conv2D(8, 3),  # its ReLU keeps its bias's gradient off zero through the batch norm
        BatchNormalization(activation="relu"),
        MaxPool2D(2),
        ZeroPad2D(2),
        Conv2D(4, 3),
        Flatten(),
        Dense(10, activation="softmax"),
    )
    training = TrainingDefaults(Optimizer("sgd", 0.05, momentum=0.9), batch_size=ROWS, epochs=1)
    return Network("fused_probe", layers, training)


def relative(plain: np.ndarray, fused: np.ndarray) -> float:
    """|fused - plain| / |plain| (Frobenius norms); 0 where both are 0."""
    scale = float(np.linalg.norm(plain))
    difference = float(np.linalg.norm(np.asarray(fused, np.float64) - np.asarray(plain, np.float64)))
    return difference / scale if scale else difference


def held_outputs(model, network, images) -> dict:
    """The training-mode outputs of the spec layers `model` holds with the spec's values."""
    import keras

    from keras_wrapper import compat
    from keras_wrapper.model import layer_index

    fused_away = network.outputs_fused_away()
    held = [layer for layer in model.layers if layer_index(layer) >= 0 and layer_index(layer) not in fused_away]
    taps = keras.Model(model.inputs, [layer.output for layer in held])
    return {layer_index(layer): np.asarray(value) for layer, value in zip(held, compat.training_outputs(taps, images))}


def compare(network) -> dict:
    from algorithms.network.weights import initial_weights
    from keras_wrapper.gradients import loss_and_gradients
    from keras_wrapper.model import build_model

    rng = np.random.RandomState(0)
    images = rng.rand(ROWS, *network.input_shape).astype(np.float32)
    labels = rng.randint(0, network.num_classes, ROWS).astype(np.int32)
    weights = initial_weights(network, 0)
    models = {fused: build_model(network, weights, fused=fused) for fused in (False, True)}
    outputs = {fused: held_outputs(model, network, images) for fused, model in models.items()}
    models = {fused: build_model(network, weights, fused=fused) for fused in (False, True)}  # statistics as given
    results = {fused: loss_and_gradients(model, images, labels, training=True) for fused, model in models.items()}
    (plain_loss, plain_gradients), (fused_loss, fused_gradients) = results[False], results[True]
    return {
        "plain_layers": [[layer.name, type(layer).__name__] for layer in models[False].layers],
        "fused_layers": [[layer.name, type(layer).__name__] for layer in models[True].layers],
        "loss": [plain_loss, fused_loss],
        "gradients_equal": [bool(np.array_equal(a, b)) for a, b in zip(plain_gradients, fused_gradients, strict=True)],
        "gradients_relative": [relative(a, b) for a, b in zip(plain_gradients, fused_gradients, strict=True)],
        "outputs_held": sorted(outputs[True]),
        "outputs_equal": {str(i): bool(np.array_equal(outputs[False][i], v)) for i, v in outputs[True].items()},
        "outputs_relative": {str(i): relative(outputs[False][i], v) for i, v in outputs[True].items()},
    }


def main() -> None:
    from keras_wrapper import compat
    from algorithms.network.networks import NETWORKS

    networks = [network.without_dropout() for network in NETWORKS.values()] + [probe_network()]
    print(json.dumps({"backend": compat.BACKEND, **{network.name: compare(network) for network in networks}}))


if __name__ == "__main__":
    main()
