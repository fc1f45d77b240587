"""The spec translated to Keras layers (NHWC, the canonical weight layout).

Only layer classes and calls that Keras 2 and Keras 3 share are used, so the same
builder serves every backend; the few differences live in compat.py."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
from keras import layers

from algorithms.spec.networks import Conv2D, Dense, Dropout, Flatten, MaxPool2D, Network, ZeroPad2D


def layer_name(index: int) -> str:
    """Each Keras layer is named after its spec index, so its variables' paths
    (`<network>/layer_3/kernel`) are known before it is built: tensor parallel's
    LayoutMap (distribute.py) names them."""
    return f"layer_{index}"


# The kernels start at zeros, then take the shared weights: Keras's default random
# initializer costs 2.2 s of every Keras-on-jax run's first model (jax compiles it once per
# kernel shape) for values that are overwritten at once; zeros cost 0.6 s there.
KERNEL_INITIALIZER = "zeros"


def build_model(network: Network, weights: list) -> keras.Model:
    """A Sequential emitting logits (a final softmax is fused into the loss)."""
    model = keras.Sequential(name=network.name)
    model.add(compat.input_layer(network.input_shape))
    by_index = {}
    for index, layer in enumerate(network.layers):
        name = layer_name(index)
        if isinstance(layer, ZeroPad2D):
            keras_layer = layers.ZeroPadding2D(layer.padding, name=name)
        elif isinstance(layer, Conv2D):
            keras_layer = layers.Conv2D(
                layer.filters,
                layer.kernel_size,
                padding=layer.padding,
                activation=network.activation(index),
                kernel_initializer=KERNEL_INITIALIZER,
                name=name,
            )
        elif isinstance(layer, MaxPool2D):
            keras_layer = layers.MaxPooling2D(layer.pool_size, name=name)
        elif isinstance(layer, Flatten):
            keras_layer = layers.Flatten(name=name)
        elif isinstance(layer, Dense):
            keras_layer = layers.Dense(
                layer.units, activation=network.activation(index), kernel_initializer=KERNEL_INITIALIZER, name=name
            )
        elif isinstance(layer, Dropout):
            keras_layer = layers.Dropout(layer.rate, name=name)
        else:
            raise TypeError(f"keras_wrapper cannot translate {layer!r}")
        model.add(keras_layer)
        by_index[index] = keras_layer
    for w in weights:
        kernel = compat.conv_kernel(w.kernel) if isinstance(network.layers[w.layer_index], Conv2D) else w.kernel
        by_index[w.layer_index].set_weights([kernel, w.bias])
        if network.layers[w.layer_index].bias_frozen:  # --fault frozen:...
            compat.freeze(by_index[w.layer_index], by_index[w.layer_index].bias)
    return model


def make_optimizer(spec, accumulate: int = 1):
    """accumulate K > 1: Keras 3 averages the gradients of K batches, then steps once
    (equal to one K x batch step when the K batches are equally large)."""
    extra = {"gradient_accumulation_steps": accumulate} if accumulate > 1 else {}
    if spec.name == "sgd":
        return keras.optimizers.SGD(spec.learning_rate, momentum=spec.momentum, nesterov=spec.nesterov, **extra)
    if spec.name == "adam":
        return keras.optimizers.Adam(
            spec.learning_rate, beta_1=spec.beta_1, beta_2=spec.beta_2, epsilon=spec.epsilon, **extra
        )
    raise ValueError(f"unknown optimizer {spec.name!r}")


# --execution: model.compile's switches (None: Keras's own default, jit_compile="auto")
EXECUTION_OPTIONS = {
    None: {},
    "eager": {"run_eagerly": True},
    "graph": {"jit_compile": False},
    "compiled": {"jit_compile": True},
}


def compile_model(model: keras.Model, optimizer_spec, accumulate: int = 1, execution=None) -> keras.Model:
    def batch_loss(y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)

    model.compile(
        optimizer=make_optimizer(optimizer_spec, accumulate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[
            compat.LastBatch(batch_loss, "batch_loss"),
            compat.LastBatch(keras.metrics.sparse_categorical_accuracy, "batch_accuracy"),
        ],
        **EXECUTION_OPTIONS[execution],
    )  # a mixed_float16 model gets a LossScaleOptimizer around its optimizer here (auto_scale_loss)
    return model
