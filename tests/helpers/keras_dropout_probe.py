"""Prints, as JSON, what Keras's dropout (keras_wrapper/model.py's SharedDropout) makes of
the shared uniforms on the backend KERAS_BACKEND names, in its own process (a Keras
backend is fixed at import; Keras 2 on Theano runs it in .venv-legacy): each Dropout
layer of the training model against network/dropout.py's numpy rule, in float32 and, on
Keras 3, under the bf16 policy; and whether anything in the models draws from Keras's
own random generators.

    KERAS_BACKEND=jax python -m tests.helpers.keras_dropout_probe
"""

import json

import numpy as np

NETWORK = "cnn2d_3layer_fullconnected_3layer"  # two Dropout(0.25) layers on 128 units
ROWS = 256  # 32,768 uniforms a layer: a bfloat16 cast of them would move about 30 across the rate


def run_layer(layer, inputs: list, training: bool, dtype: str) -> np.ndarray:
    """The layer on `inputs` ([x, u] or [x]; x in `dtype`, as the layer before hands it
    over), called with `training`: eagerly on Keras 3, through a backend function on Keras 2."""
    import keras

    from keras_wrapper import compat

    if compat.KERAS_2:
        backend = keras.backend
        placeholders = [backend.placeholder(shape=(None, *array.shape[1:])) for array in inputs]
        output = layer(placeholders if len(inputs) > 1 else placeholders[0], training=training)
        return np.asarray(backend.function(placeholders, [output])(inputs)[0], np.float32)
    tensors = [keras.ops.cast(inputs[0], dtype), *inputs[1:]]
    output = layer(tensors if len(tensors) > 1 else tensors[0], training=training)
    return keras.ops.convert_to_numpy(keras.ops.cast(output, "float32"))


def layer_report(models, network, seed: int, precision: str) -> dict:
    from algorithms.network.dropout import apply, dropout_layers, scale, uniforms
    from keras_wrapper.model import layer_name

    rows = np.arange(1000, 1000 + ROWS)
    drawn = uniforms(network, seed, 1, rows)
    report = {}
    for (index, layer, shape), u in zip(dropout_layers(network), drawn):
        keras_layer = models.training.get_layer(layer_name(index))
        x = np.random.RandomState(index).randn(ROWS, *shape).astype(np.float32)  # signs both ways
        if precision == "bf16":
            import ml_dtypes  # jax's dependency: the bfloat16 numpy type

            bf16 = ml_dtypes.bfloat16
            x = x.astype(bf16).astype(np.float32)
            mask = np.where(u > np.float32(layer.rate), scale(layer.rate), np.float32(0.0))
            expected = (x.astype(bf16) * mask.astype(bf16)).astype(np.float32)
        else:
            expected = apply(x, u, layer.rate)
        dtype = "bfloat16" if precision == "bf16" else "float32"
        training = run_layer(keras_layer, [x, u], True, dtype)
        training_alone = run_layer(keras_layer, [x], True, dtype)
        inference = run_layer(keras_layer, [x, u], False, dtype)
        report[str(index)] = {
            "equal": bool(np.array_equal(training, expected)),
            "differing": int(np.sum(training != expected)),
            "dropped": float(np.mean(training == 0)),
            "identity_alone": bool(np.array_equal(training_alone, x)),
            "identity_outside_training": bool(np.array_equal(inference, x)),
        }
    return report


def own_randomness(models) -> list:
    """Keras's own Dropout layers and random-generator state in either model (none expected)."""
    import keras

    found = []
    for model in (models.training, models.inference):
        found += [layer.name for layer in model.layers if isinstance(layer, keras.layers.Dropout)]
        found += [getattr(v, "path", v.name) for v in model.weights if "seed" in getattr(v, "path", v.name)]
    return found


def main() -> None:
    from keras_wrapper import compat
    from algorithms.network.networks import get_network
    from keras_wrapper.trainer import make_model

    network, seed = get_network(NETWORK), 3
    out = {"backend": compat.BACKEND}
    for precision in ("fp32",) if compat.KERAS_2 else ("fp32", "bf16"):
        models = make_model(network, network.training.optimizer, seed, precision=precision)
        out[precision] = layer_report(models, network, seed, precision)
        out["own_randomness"] = own_randomness(models)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
