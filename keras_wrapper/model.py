"""The spec translated to Keras layers (NHWC, the canonical weight layout).

Only layer classes and calls that Keras 2 and Keras 3 share are used, so the same
builder serves every backend; the few differences live in compat.py.

Dropout draws no random number of its own: it applies the uniforms that come with the
rows (algorithms/network/dropout.py), the same in every framework. So the layers serve two
models: `build_model`'s, on the images alone (predict, evaluate: dropout is the identity),
and `training_model`'s, the same layers called on the images and, as extra inputs, the
rows' uniforms, which model.fit cuts with the images into batches, accumulated parts and
data-parallel slices, so a sample keeps its uniforms however the batch is split.

Built with the spec's two exact rewrites, as torch_wrapper and tensorflow_wrapper build
theirs (layers.py says why they are exact): a ZeroPad2D before a 'valid' convolution that
amounts to 'same' padding (stride 1, (kernel - 1) / 2 zeros each side:
`Network.pads_folded_as_same`) has no layer of its own, its convolution pads 'same'; and a
ReLU before a max-pool (`Network.relus_after_pools`) runs after it, inside the pool's layer,
on a quarter of the elements. That padding is symmetric, so every backend's 'same' is the
spec's, Keras 2's Theano too. The layers where the model then holds no spec output are
`Network.outputs_fused_away` (train.py's localiser leaves them out, as torch's does).
A spec `same` convolution is Keras's own 'same' where every backend pads as the spec does
(stride 1, an odd kernel: the same zeros on every side); otherwise its ZeroPadding2D with
the spec's sides (the odd pixel at the bottom and right), then a 'valid' convolution:
Keras 2's Theano pads 'same' symmetrically. BatchNormalization is `SpecBatchNormalization`,
from the backend's primitives (compat.batch_norm), since Keras's own keeps the running
variance biased where the spec keeps it unbiased."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
from keras import layers

from algorithms.network.dropout import dropout_layers, scale as dropout_scale
from algorithms.network.networks import (
    AveragePooling2D,
    BatchNormalization,
    Conv2D,
    Dense,
    Dropout,
    Flatten,
    GlobalAveragePooling2D,
    MaxPool2D,
    Network,
    ZeroPad2D,
)


def layer_name(index: int) -> str:
    """Each Keras layer is named after its spec index, so its variables' paths
    (`<network>/layer_3/kernel`) are known before it is built: tensor parallel's
    LayoutMap (distribute.py) names them."""
    return f"layer_{index}"


# The kernels start at zeros, then take the shared weights: Keras's default random
# initializer costs 2.2 s of every Keras-on-jax run's first model (jax compiles it once per
# kernel shape) for values that are overwritten at once; zeros cost 0.6 s there.
KERNEL_INITIALIZER = "zeros"


class SharedDropout(layers.Layer):
    """Inverted dropout by the shared mask rule (network/dropout.py): called on [x, u] in
    training, x times float32(1 / (1 - rate)) where the rows' uniform u exceeds the rate, 0
    elsewhere; the identity on x alone (the inference model) or outside training."""

    def __init__(self, rate: float, **kwargs):
        super().__init__(**compat.KEEP_INPUT_DTYPES, **kwargs)  # u stays float32 under a mixed policy
        self.rate = rate

    def call(self, inputs, training=None):
        if not isinstance(inputs, (list, tuple)):
            return inputs
        x, uniforms = inputs
        return compat.in_training(
            lambda: compat.mask_rule(x, uniforms, self.rate, dropout_scale(self.rate)), x, training
        )

    def compute_output_shape(self, input_shape):
        both = isinstance(input_shape, list) and isinstance(input_shape[0], (tuple, list))
        return tuple(input_shape[0]) if both else tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate}


def pad_name(index: int) -> str:
    """The explicit padding layer of convolution `index`, where it has one."""
    return f"{layer_name(index)}_pad"


class SpecBatchNormalization(layers.Layer):
    """The spec's BatchNormalization (layers.py): gamma and beta trained, the running mean and
    variance updated in training (Keras's momentum, the unbiased variance), normalising in
    evaluation."""

    def __init__(self, momentum: float, epsilon: float, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.momentum, self.epsilon = momentum, epsilon
        self.activation = keras.activations.get(activation)

    def build(self, input_shape):
        channels = (int(input_shape[-1]),)
        self.gamma = compat.add_weight(self, "gamma", channels, "ones", True)
        self.beta = compat.add_weight(self, "beta", channels, "zeros", True)
        self.moving_mean = compat.add_weight(self, "moving_mean", channels, "zeros", False)
        self.moving_variance = compat.add_weight(self, "moving_variance", channels, "ones", False)
        super().build(input_shape)

    def call(self, inputs, training=None):
        return compat.batch_norm(self, inputs, training, self.activation)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        activation = keras.activations.serialize(self.activation)
        return {**super().get_config(), "momentum": self.momentum, "epsilon": self.epsilon, "activation": activation}


def build_model(network: Network, weights: list, fused: bool = True) -> keras.Model:
    """A Sequential emitting logits (a final softmax is fused into the loss), on the
    images alone: its Dropout layers are the identity. `fused=False`: the spec's layers one
    by one (no rewrite; tests/test_keras_model.py holds the two equal)."""
    model = keras.Sequential(name=network.name)
    model.add(compat.input_layer(network.input_shape))
    folded_pads = network.pads_folded_as_same() if fused else set()
    late_relus = network.relus_after_pools() if fused else set()
    by_index = {}
    for index, (layer, in_shape) in enumerate(zip(network.layers, network.input_shapes())):
        name = layer_name(index)
        # a ReLU moved after the pool: the layer before emits its pre-activation, the pool applies it
        activation = None if index in late_relus else compat.activation(network.activation(index))
        if isinstance(layer, ZeroPad2D):
            if index + 1 in folded_pads:  # the next convolution pads 'same' instead
                continue
            keras_layer = layers.ZeroPadding2D(layer.padding, name=name)
        elif isinstance(layer, Conv2D):
            padding = "same" if index in folded_pads else layer.padding  # folded: stride 1, symmetric
            if padding == "same" and not (layer.stride == 1 and layer.symmetric_padding(in_shape) is not None):
                model.add(layers.ZeroPadding2D(layer.paddings(in_shape), name=pad_name(index)))
                padding = "valid"
            keras_layer = layers.Conv2D(
                layer.filters,
                layer.kernel_size,
                strides=layer.stride,
                padding=padding,
                activation=activation,
                kernel_initializer=KERNEL_INITIALIZER,
                name=name,
            )
        elif isinstance(layer, BatchNormalization):
            if not layer.mean_in_gradient or layer.evaluation != "running":
                raise TypeError(f"keras_wrapper does not build a faulty BatchNormalization (layer {index})")
            keras_layer = SpecBatchNormalization(layer.momentum, layer.epsilon, activation, name=name)
        elif isinstance(layer, MaxPool2D):
            moved = compat.activation("relu") if index - 1 in late_relus else None
            keras_layer = compat.max_pool(layer.pool_size, name, moved)
        elif isinstance(layer, AveragePooling2D):
            keras_layer = layers.AveragePooling2D(layer.pool_size, name=name)
        elif isinstance(layer, GlobalAveragePooling2D):
            keras_layer = layers.GlobalAveragePooling2D(name=name)
        elif isinstance(layer, Flatten):
            keras_layer = layers.Flatten(name=name)
        elif isinstance(layer, Dense):
            keras_layer = layers.Dense(
                layer.units,
                activation=activation,
                kernel_initializer=KERNEL_INITIALIZER,
                name=name,
            )
        elif isinstance(layer, Dropout):
            keras_layer = SharedDropout(layer.rate, name=name)
        else:
            raise TypeError(f"keras_wrapper cannot translate {layer!r}")
        model.add(keras_layer)
        by_index[index] = keras_layer
    for w in weights:
        layer = network.layers[w.layer_index]
        if isinstance(layer, BatchNormalization):
            by_index[w.layer_index].set_weights([w.kernel, w.bias, w.running_mean, w.running_var])
            continue
        kernel = compat.conv_kernel(w.kernel) if isinstance(layer, Conv2D) else w.kernel
        by_index[w.layer_index].set_weights([kernel, w.bias])
        if layer.bias_frozen:  # --fault frozen:...
            compat.freeze(by_index[w.layer_index], by_index[w.layer_index].bias)
    return model


def model_layers(model: keras.Model, network: Network, index: int) -> list:
    """The Keras layers of spec layer `index`, in order: its explicit padding, if any, and itself."""
    present = {layer.name for layer in model.layers}
    return [model.get_layer(name) for name in (pad_name(index), layer_name(index)) if name in present]


def training_model(model: keras.Model, network: Network) -> keras.Model:
    """`model`'s layers (so its variables, and their paths) called on the images and the
    rows' dropout uniforms: inputs [images, *uniforms], one (N, *input shape) float32 input
    per Dropout layer in layer order (network/dropout.py's `uniforms`), logits out."""
    images = layers.Input(shape=network.input_shape, name="images")
    uniforms = {
        index: layers.Input(shape=shape, name=f"uniforms_{index}") for index, _, shape in dropout_layers(network)
    }
    x = images
    for index in range(len(network.layers)):
        for layer in model_layers(model, network, index):
            x = layer([x, uniforms[index]]) if index in uniforms else layer(x)
    return keras.Model([images, *uniforms.values()], x, name=f"{network.name}_training")


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


def compile_model(
    model: keras.Model, optimizer_spec, accumulate: int = 1, execution=None, optimizer=None
) -> keras.Model:
    """The loss, the per-batch metrics and the --execution mode; `optimizer`: one already
    made (the inference model takes the training model's, so both compile alike)."""

    def batch_loss(y_true, y_pred):
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)

    model.compile(
        optimizer=optimizer if optimizer is not None else make_optimizer(optimizer_spec, accumulate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[
            compat.LastBatch(batch_loss, "batch_loss"),
            compat.LastBatch(keras.metrics.sparse_categorical_accuracy, "batch_accuracy"),
        ],
        **EXECUTION_OPTIONS[execution],
    )  # a mixed_float16 model gets a LossScaleOptimizer around its optimizer here (auto_scale_loss)
    return model


def layer_variables(layer) -> list:
    """(variable, role, layout) for each weight of a Keras layer (a conv or dense layer's
    kernel and bias; a batch normalisation's gamma and beta in their places), a frozen one
    (not trainable) too; a batch normalisation's running statistics have no role."""
    kernel_layout = "HWIO" if isinstance(layer, keras.layers.Conv2D) else "IO"
    roles = {
        id(getattr(layer, "kernel", None)): ("kernel", kernel_layout),
        id(getattr(layer, "bias", None)): ("bias", "O"),
        id(getattr(layer, "gamma", None)): ("kernel", "O"),
        id(getattr(layer, "beta", None)): ("bias", "O"),
    }
    if isinstance(layer, SpecBatchNormalization):
        return [(variable, *roles[id(variable)]) for variable in (layer.gamma, layer.beta)]
    return [(variable, *roles.get(id(variable), ("", "?"))) for variable in layer.weights]


def layer_index(layer) -> int:
    """The spec index in a layer's name (model.layer_name); -1 for a layer not named so."""
    prefix, _, number = layer.name.rpartition("_")
    return int(number) if prefix == "layer" and number.isdigit() else -1
