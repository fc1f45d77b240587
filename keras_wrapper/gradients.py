"""One forward and backward pass of a Keras model outside model.fit, for the
localisation: Keras has no backend-neutral gradient call, so each backend's own (what
Keras's own train step on that backend calls), with Keras's own loss object in all."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np


def loss_and_gradients(model, images: np.ndarray, labels: np.ndarray, training: bool = False) -> tuple:
    """(mean cross-entropy, [numpy gradient of each of model.trainable_weights]), dropout off,
    `training`: the model in training (a BatchNormalization on the batch's statistics);
    None for a weight the backend gives no gradient (disconnected from the loss: Theano's
    disconnected input, a tape's None, torch's grad None). jax differentiates every input it
    is given, so a disconnected one reads zeros there."""
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_weights
    if compat.BACKEND == "theano":
        import theano
        from keras import backend

        targets = backend.placeholder(ndim=1)
        loss = loss_object(targets, model.output)
        symbolic = theano.grad(loss, variables, disconnected_inputs="ignore", return_disconnected="None")
        connected = [gradient for gradient in symbolic if gradient is not None]
        run = backend.function([model.input, targets, backend.learning_phase()], [loss] + connected)
        loss_value, *values = run([images, labels.astype(np.float32), int(training)])
        values = iter(values)
        return float(loss_value), [None if gradient is None else np.asarray(next(values)) for gradient in symbolic]
    if compat.BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_object(labels, model(images, training=training))
        gradients = tape.gradient(loss, variables)
        return float(loss), [None if gradient is None else gradient.numpy() for gradient in gradients]
    if compat.BACKEND == "torch":
        logits = model(keras.ops.convert_to_tensor(images), training=training)
        loss = loss_object(keras.ops.convert_to_tensor(labels), logits)
        loss.backward()
        gradients = [variable.value.grad for variable in variables]
        return loss.item(), [None if gradient is None else gradient.numpy() for gradient in gradients]
    if compat.BACKEND == "jax":
        import jax

        fixed = [variable.value for variable in model.non_trainable_variables]

        def loss_of(values):
            logits, _ = model.stateless_call(values, fixed, images, training=training)
            return loss_object(labels, logits)

        loss, gradients = jax.value_and_grad(loss_of)([variable.value for variable in variables])
        return float(loss), [np.asarray(gradient) for gradient in gradients]
    raise ValueError(f"no gradient call for Keras backend {compat.BACKEND!r}")
