"""Keras 2 vs Keras 3, in one place, so model.py and train.py read the same for
both: Keras 3 (main env; tensorflow, torch, jax) and multi-backend Keras 2.3.1 on
Theano (legacy env, `keras_theano_backend.py`).

Import this before keras: with KERAS_BACKEND=theano it first sets THEANO_FLAGS and
bridges theano-pymc to Keras 2.3.1 (backends/theano_backend.py).
"""

from __future__ import annotations

import inspect
import os
import random

if os.environ.get("KERAS_BACKEND", "").lower() == "theano":
    from backends import theano_backend  # noqa: F401

import keras
import numpy as np

from backends import keras_optimizer

KERAS_2 = keras.__version__.startswith("2.")
BACKEND = keras.backend.backend()


def input_layer(shape: tuple):
    """The first layer of a Sequential (Keras 2 takes no Input tensor there)."""
    return keras.layers.InputLayer(input_shape=shape) if KERAS_2 else keras.Input(shape=shape)


def conv_kernel(kernel: np.ndarray) -> np.ndarray:
    """An HWIO cross-correlation kernel as this backend's Conv2D wants it: Keras 2's
    Theano backend convolves for real (T.nnet.conv2d flips the kernel), so its
    kernel is the spatial flip of everyone else's."""
    return np.ascontiguousarray(kernel[::-1, ::-1]) if BACKEND == "theano" else kernel


def activation(name):
    """A spec activation as this backend's layer takes it: on Theano, a ReLU whose gradient at
    0 is 0 (backends/theano_backend.relu: Theano's own has 1/2, every other framework 0)."""
    return theano_backend.relu if BACKEND == "theano" and name == "relu" else name


def max_pool(pool_size: int, name: str, activation=None):
    """The spec's max-pool layer, then `activation` (None: none; a ReLU model.py moves after
    the pool): Keras's own; on jax, FirstMaxPool2D (the same values and gradient without XLA
    CPU's select-and-scatter: backends/jax_backend.max_pool); on Theano (whose pool gradient
    goes to every tied maximum) a Lambda over backends/theano_backend.max_pool, which sends it
    to each window's first maximum as every other framework does; NHWC in and out."""
    if BACKEND == "jax":
        return FirstMaxPool2D(pool_size, activation, name=name)
    if BACKEND != "theano":
        return ActivatedMaxPooling2D(pool_size, activation, name=name)

    def pool(x):
        pooled = theano_backend.max_pool(x.dimshuffle(0, 3, 1, 2), pool_size).dimshuffle(0, 2, 3, 1)
        return pooled if activation is None else keras.activations.get(activation)(pooled)

    def shape(input_shape):
        batch, height, width, channels = input_shape
        return batch, height // pool_size, width // pool_size, channels

    return keras.layers.Lambda(pool, output_shape=shape, name=name)


class ActivatedMaxPooling2D(keras.layers.MaxPooling2D):
    """keras.layers.MaxPooling2D(pool_size), then `activation` (None: the pool alone)."""

    def __init__(self, pool_size: int, activation=None, **kwargs):
        super().__init__(pool_size, **kwargs)
        self.activation = keras.activations.get(activation)

    def call(self, inputs):
        return self.activation(super().call(inputs))

    def get_config(self):
        return {**super().get_config(), "activation": keras.activations.serialize(self.activation)}


class FirstMaxPool2D(keras.layers.Layer):
    """keras.layers.MaxPooling2D(pool_size) (valid, stride = pool size) on jax, as
    backends/jax_backend.max_pool computes it, then `activation`."""

    def __init__(self, pool_size: int, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.pool_size = pool_size
        self.activation = keras.activations.get(activation)

    def call(self, inputs):
        from backends.jax_backend import max_pool as jax_max_pool

        return self.activation(jax_max_pool(inputs, self.pool_size))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        return batch, height // self.pool_size, width // self.pool_size, channels

    def get_config(self):
        activation = keras.activations.serialize(self.activation)
        return {**super().get_config(), "pool_size": self.pool_size, "activation": activation}


def add_weight(layer, name: str, shape: tuple, initializer: str, trainable: bool):
    """A layer's weight, float32 (Keras 2 and 3 take the same keywords)."""
    return layer.add_weight(name=name, shape=shape, initializer=initializer, trainable=trainable)


def freeze(layer, variable) -> None:
    """One weight of a built layer left out of its trainable weights (--fault frozen:...)."""
    if KERAS_2:
        layer._trainable_weights = [weight for weight in layer._trainable_weights if weight is not variable]
        layer._non_trainable_weights.append(variable)
    else:
        variable.trainable = False


if KERAS_2:
    KEEP_INPUT_DTYPES: dict = {}  # Keras 2 casts no layer input

    def batch_norm(layer, x, training, activation):
        """The spec's BatchNormalization (layers.py) in Keras 2's backend ops, then
        `activation`: the batch's statistics (biased variance) in the training phase, whose
        updates move the running ones (the unbiased variance) by the layer's momentum; the
        running ones otherwise (the activation inside each branch, so the output keeps
        in_train_phase's mark that it depends on the learning phase)."""
        backend = keras.backend
        axes = list(range(backend.ndim(x) - 1))
        mean, variance = backend.mean(x, axis=axes), backend.var(x, axis=axes)
        count = backend.cast(backend.prod(backend.shape(x)[:-1]), backend.floatx())
        unbiased = variance * count / backend.maximum(count - 1.0, 1.0)
        layer.add_update(
            [
                backend.moving_average_update(layer.moving_mean, mean, layer.momentum),
                backend.moving_average_update(layer.moving_variance, unbiased, layer.momentum),
            ],
            x,
        )
        epsilon = np.float32(layer.epsilon)  # not K.batch_normalization: Theano's refuses an epsilon of 1e-5 or less

        def normalised(mean, variance):
            return (x - mean) / backend.sqrt(variance + epsilon) * layer.gamma + layer.beta

        batch, running = normalised(mean, variance), normalised(layer.moving_mean, layer.moving_variance)
        return backend.in_train_phase(activation(batch), activation(running), training=training)

    def mask_rule(x, uniforms, rate: float, scale):
        """x * where(u > rate, scale, 0): network/dropout.py's rule, one float32 multiply."""
        backend = keras.backend
        return x * backend.switch(backend.greater(uniforms, np.float32(rate)), scale, np.float32(0.0))

    def in_training(training_value, x, training):
        """training_value() in training (fit feeds the learning phase), x otherwise."""
        return keras.backend.in_train_phase(training_value, x, training=training)

else:
    # a mixed policy would cast every floating input to bfloat16 / float16, the uniforms too
    KEEP_INPUT_DTYPES = {"autocast": False}

    def batch_norm(layer, x, training, activation):
        """The spec's BatchNormalization (layers.py) in keras.ops, then `activation`, in float32 (as Keras's own
        layer computes under a mixed policy): in training the batch's statistics (biased
        variance), the running ones (the unbiased variance) assigned by the layer's momentum;
        otherwise the running ones."""
        ops = keras.ops
        dtype = x.dtype
        x = ops.cast(x, "float32")
        if training:
            axes = list(range(len(x.shape) - 1))
            mean, variance = ops.mean(x, axis=axes), ops.var(x, axis=axes)
            count = ops.cast(ops.shape(x)[0], "float32") * float(np.prod(x.shape[1:-1]))
            unbiased = variance * count / ops.maximum(count - 1.0, 1.0)
            momentum = layer.momentum
            layer.moving_mean.assign(momentum * layer.moving_mean + (1.0 - momentum) * mean)
            layer.moving_variance.assign(momentum * layer.moving_variance + (1.0 - momentum) * unbiased)
        else:
            mean, variance = layer.moving_mean, layer.moving_variance
        normalised = ops.batch_normalization(
            x, mean, variance, axis=-1, offset=layer.beta, scale=layer.gamma, epsilon=layer.epsilon
        )
        return activation(ops.cast(normalised, dtype))

    def mask_rule(x, uniforms, rate: float, scale):
        """x * where(u > rate, scale, 0): network/dropout.py's rule, one multiply in x's dtype
        (float32, or a mixed policy's compute dtype, as tensorflow_wrapper does)."""
        ops = keras.ops
        mask = ops.where(ops.greater(uniforms, np.float32(rate)), scale, np.float32(0.0))
        return ops.multiply(x, ops.cast(mask, x.dtype))

    def in_training(training_value, x, training):
        """training_value() in training (Keras 3 passes training=True down from fit), x otherwise."""
        return training_value() if training else x


def shape_of(variable) -> tuple:
    """A weight variable's shape (Keras 2 on Theano: a shared variable's value's)."""
    return tuple(keras.backend.int_shape(variable)) if KERAS_2 else tuple(variable.shape)


def set_random_seed(seed: int) -> None:
    """Seeds Python's, numpy's and Keras's generators, though the model draws from none of
    them (dropout's uniforms come with the rows: model.py), so nothing else random can
    creep in unseeded. Keras 3's set_random_seed also seeds TensorFlow wherever it is installed, loading it for that
    alone on the jax and torch backends (4-5 s and 730 MB, the import alone, in a run that
    never uses it, and its start-up notices mid-build): there it is told TensorFlow is
    absent while it seeds Python, numpy, its own seed generator and torch."""
    if KERAS_2:
        random.seed(seed)
        np.random.seed(seed)
        return
    from keras.src.utils import module_utils

    lazy_tensorflow = module_utils.tensorflow
    if BACKEND == "tensorflow" or lazy_tensorflow.module is not None:
        keras.utils.set_random_seed(seed)
        return
    lazy_tensorflow._available = False  # read by set_random_seed; reset after, so a later use still loads it
    try:
        keras.utils.set_random_seed(seed)
    finally:
        lazy_tensorflow._available = None


if KERAS_2:

    class LastBatch(keras.metrics.Metric):
        """The value of `fn` on the latest batch alone (Keras's own metric logs are
        running means over the epoch; the CSV wants each step's value). Keras 2 on
        Theano reads `result()` in a second function after the step's updates, so
        the batch value goes through a variable, as in Keras 3."""

        def __init__(self, fn, name):
            super().__init__(name=name)
            self.fn = fn
            self.value = self.add_weight(name="value", shape=(), initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            return [keras.backend.update(self.value, keras.backend.mean(self.fn(y_true, y_pred)))]

        def result(self):
            return self.value
else:

    class LastBatch(keras.metrics.Metric):
        """The value of `fn` on the latest batch alone (Keras's own metric logs are
        running means over the epoch; the CSV wants each step's value)."""

        def __init__(self, fn, name):
            super().__init__(name=name)
            self.fn = fn
            # under MirroredStrategy each replica holds its slice's value; read, they average.
            # Keras 3.0 and 3.1 take no `aggregation` (3.2 added it): their window is one device's (docs/releases.md)
            mean = {"aggregation": "mean"} if "aggregation" in inspect.signature(self.add_variable).parameters else {}
            self.value = self.add_variable(name="value", shape=(), initializer="zeros", **mean)

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.value.assign(keras.ops.mean(self.fn(y_true, y_pred)))

        def result(self):
            return keras.ops.convert_to_tensor(self.value)

        def reset_state(self):
            self.value.assign(0.0)


def training_outputs(model, images) -> list:
    """`model`'s outputs in training (fit's mode: a BatchNormalization on the batch's statistics)."""
    if KERAS_2:
        run = keras.backend.function(model.inputs + [keras.backend.learning_phase()], model.outputs)
        return run([images, 1])
    return [np.asarray(keras.ops.convert_to_numpy(value)) for value in model([images], training=True)]


def evaluate_loss(model, images, labels, batch_size: int) -> float:
    """model.evaluate's loss (Keras 2 returns a list, loss first)."""
    if KERAS_2:
        return float(model.evaluate(images, labels, batch_size=batch_size, verbose=0)[0])
    return float(model.evaluate(images, labels, batch_size=batch_size, verbose=0, return_dict=True)["loss"])


def save_model_state(model, folder: str) -> None:
    """Weights and optimizer state: Keras 3's .keras file; for Keras 2, the arrays of
    its get_weights() (model, then optimizer) in .npz files, because Keras 2.3.1's
    HDF5 reader fails under h5py 3 ('str' object has no attribute 'decode') and its
    load_weights leaves the optimizer alone."""
    if not KERAS_2:
        if hasattr(model, "jax_state_sync"):
            model.jax_state_sync()  # jax's fit keeps the newest state outside the variables
        model.save(os.path.join(folder, "model.keras"))
        return
    np.savez(os.path.join(folder, "weights.npz"), *model.get_weights())
    np.savez(os.path.join(folder, "optimizer.npz"), *model.optimizer.get_weights())


def load_model_state(model, folder: str) -> None:
    if not KERAS_2:
        model.optimizer.build(model.trainable_variables)  # its slots must exist to be filled
        model.load_weights(os.path.join(folder, "model.keras"))
        return
    with np.load(os.path.join(folder, "weights.npz")) as saved:
        model.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])
    model._make_train_function()  # creates the optimizer's slots (Keras 2 does this at the first fit)
    with np.load(os.path.join(folder, "optimizer.npz")) as saved:
        model.optimizer.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])


def to_numpy(variable) -> np.ndarray:
    """A variable's value as a float32 numpy array (a copy)."""
    if KERAS_2:
        return np.array(keras.backend.get_value(variable), np.float32)
    return np.array(keras.ops.convert_to_numpy(variable.value), np.float32)


def set_learning_rate(optimizer, learning_rate: float) -> None:
    """The optimizer's learning rate from now on. Keras 2 compiles its train function around
    the optimizer's lr variable: its value is set (an attribute replaced by a float would
    leave the compiled function on the old rate, and the variable gone); Keras 3 assigns it."""
    if KERAS_2:
        keras.backend.set_value(optimizer.learning_rate, learning_rate)
    else:
        optimizer.learning_rate = learning_rate


def sync_state(model) -> None:
    """jax's fit keeps the newest state outside the variables between steps: put it back."""
    if hasattr(model, "jax_state_sync"):
        model.jax_state_sync()


def optimizer_slots(model, variable, spec, learning_rate: float) -> dict:
    """`variable`'s optimizer slots in reference/train_state.py's convention: Keras keeps SGD's
    velocity with the learning rate inside it (m = momentum * m - lr * g), so it is
    -m / lr in gradient units; Adam's two moments as they are. {} for a variable the
    optimizer does not train (frozen) or an SGD without momentum."""
    from algorithms.reference.train_state import from_update_units

    optimizer = model.optimizer
    if KERAS_2:  # its weights: the step counter, then one slot list per kind, in trainable_weights' order
        trainable = [id(weight) for weight in model.trainable_weights]
        if id(variable) not in trainable or not optimizer.weights:
            return {}
        position, count = trainable.index(id(variable)), len(trainable)
        slots = optimizer.weights[1:]
        if spec.name == "sgd":
            return {"velocity": from_update_units(to_numpy(slots[position]), learning_rate)} if spec.momentum else {}
        return {"first": to_numpy(slots[position]), "second": to_numpy(slots[count + position])}
    return keras_optimizer.slots(optimizer, variable, spec, learning_rate, to_numpy)


def adam_state(model, spec) -> dict:
    """TrainState's Adam fields (keras_optimizer.adam_state; Keras 2's Adam is the same form)."""
    return keras_optimizer.adam_state(model.optimizer, spec, to_numpy)


def describe_backend() -> tuple:
    """(backend version, devices text) for results.log."""
    if BACKEND == "theano":
        import theano
        from backends import theano_backend

        return theano.__version__, theano_backend.describe_theano()
    import importlib

    module = importlib.import_module(BACKEND)
    if BACKEND == "tensorflow":  # physical: listing logical devices would fix them before data parallel splits the CPU
        return module.__version__, ", ".join(device.name for device in module.config.list_physical_devices())
    try:
        devices = ", ".join(keras.distribution.list_devices())
    except Exception:  # not every backend lists devices through keras.distribution
        devices = "cpu"
    return module.__version__, devices


def library_versions() -> dict:
    """The backend's libraries (oneDNN and MKL under torch, jaxlib's XLA under jax, TensorFlow's
    build), for the settings record's releases; Keras 2 on Theano: none apart from Theano."""
    if BACKEND == "tensorflow":
        from backends.tensorflow_backend import library_versions as backend_libraries
    elif BACKEND == "jax":
        from backends.jax_backend import library_versions as backend_libraries
    elif BACKEND == "torch":
        from backends.torch_backend import library_versions as backend_libraries
    else:
        return {}
    return backend_libraries()


def describe_device() -> tuple:
    """(kind, name, detail) of where Keras's backend places the model and its batches, for
    contract.Device: tensorflow's and jax's default device, torch's as Keras picks it (the
    GPU where torch sees one); Keras 2 on Theano, the CPU."""
    if BACKEND == "tensorflow":
        from backends.tensorflow_backend import describe_device as describe
    elif BACKEND == "jax":
        from backends.jax_backend import describe_device as describe
    elif BACKEND == "torch":
        import torch
        from keras.src.backend.torch.core import get_device

        from backends.torch_backend import describe_device as describe_torch

        return describe_torch(torch.device(get_device()))
    else:
        from backends.theano_backend import device_detail

        return "cpu", "cpu", device_detail()
    return describe()


def set_threads(threads: int) -> str:
    """--threads on the backend's own switches, as tensorflow_wrapper and torch_wrapper
    set them (jax, Theano: the environment that algorithms/machine/threads.py set before import)."""
    if BACKEND == "tensorflow":
        from backends.tensorflow_backend import set_threads as set_backend_threads
    elif BACKEND == "torch":
        from backends.torch_backend import set_threads as set_backend_threads
    else:
        return f"keras backend {BACKEND}: threads {threads} from the environment (algorithms/machine/threads.py)"
    return f"keras backend {BACKEND}: " + set_backend_threads(threads)
