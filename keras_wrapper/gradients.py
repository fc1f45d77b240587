"""One forward and backward pass of a Keras model outside model.fit, for the
localisation: Keras has no backend-neutral gradient call, so each backend's own (what
Keras's own train step on that backend calls), with Keras's own loss object in all."""

from __future__ import annotations

from keras_wrapper import compat  # first: with KERAS_BACKEND=theano it prepares Theano

import keras
import numpy as np


def loss_and_gradients(model, images: np.ndarray, labels: np.ndarray) -> tuple:
    """(mean cross-entropy, [numpy gradient of each of model.trainable_weights]), dropout off."""
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_weights
    if compat.BACKEND == "theano":
        from keras import backend

        targets = backend.placeholder(ndim=1)
        loss = loss_object(targets, model.output)
        run = backend.function([model.input, targets], [loss] + backend.gradients(loss, variables))
        loss_value, *gradients = run([images, labels.astype(np.float32)])
        return float(loss_value), [np.asarray(gradient) for gradient in gradients]
    if compat.BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_object(labels, model(images, training=False))
        return float(loss), [gradient.numpy() for gradient in tape.gradient(loss, variables)]
    if compat.BACKEND == "torch":
        logits = model(keras.ops.convert_to_tensor(images), training=False)
        loss = loss_object(keras.ops.convert_to_tensor(labels), logits)
        loss.backward()
        return loss.item(), [variable.value.grad.numpy() for variable in variables]
    if compat.BACKEND == "jax":
        import jax

        fixed = [variable.value for variable in model.non_trainable_variables]

        def loss_of(values):
            logits, _ = model.stateless_call(values, fixed, images, training=False)
            return loss_object(labels, logits)

        loss, gradients = jax.value_and_grad(loss_of)([variable.value for variable in variables])
        return float(loss), [np.asarray(gradient) for gradient in gradients]
    raise ValueError(f"no gradient call for Keras backend {compat.BACKEND!r}")
