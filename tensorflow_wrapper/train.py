"""Raw TensorFlow 2 training: a tf.function step with GradientTape, driven by the
shared loop, so TensorFlow sees the same batches in the same order as every
other framework."""
from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "tensorflow"  # tf.keras optimizers must run on TensorFlow here
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from algorithms.init import initial_weights
from algorithms.loop import train_by_hand
from tensorflow_wrapper.model import SpecModel, make_optimizer

IMAGE_SPEC = tf.TensorSpec([None, 28, 28, 1], tf.float32)
LABEL_SPEC = tf.TensorSpec([None], tf.int32)


def describe_runtime():
    devices = ", ".join(device.name for device in tf.config.list_logical_devices())
    return "tensorflow", "tensorflow", {"tensorflow": tf.__version__, "numpy": np.__version__}, devices


class TensorFlowTrainer:
    def __init__(self, network, optimizer_spec, seed: int):
        tf.random.set_seed(seed)
        self.model = SpecModel(network, initial_weights(network, seed), seed)
        self.variables = self.model.weights_in_order
        self.optimizer = make_optimizer(optimizer_spec)
        self.optimizer.build(self.variables)
        self._step = tf.function(self._train_step, input_signature=[IMAGE_SPEC, LABEL_SPEC])
        self._forward = tf.function(lambda x: self.model(x, training=False), input_signature=[IMAGE_SPEC])

    @staticmethod
    def loss_fn(logits, labels):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))

    def _train_step(self, images, labels):
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss = self.loss_fn(logits, labels)
        gradients = tape.gradient(loss, self.variables)
        self.optimizer.apply_gradients(zip(gradients, self.variables))
        correct = tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels)
        return loss, tf.reduce_mean(tf.cast(correct, tf.float32))

    def to_batch(self, images, labels):
        return tf.convert_to_tensor(images[..., None]), tf.convert_to_tensor(labels)

    def train_step(self, batch):
        loss, accuracy = self._step(*batch)
        return float(loss), float(accuracy)

    def logits(self, images):
        return self._forward(tf.convert_to_tensor(images[..., None])).numpy()


def train(session):
    config = session.config
    return train_by_hand(TensorFlowTrainer(config.network, config.optimizer, config.seed), session)


def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """TensorFlow's own cross-entropy and the logits of the shared initial weights, dropout off."""
    model = SpecModel(network, initial_weights(network, seed), seed)
    logits = model(tf.convert_to_tensor(images[..., None]), training=False)
    return float(TensorFlowTrainer.loss_fn(logits, tf.convert_to_tensor(labels))), logits.numpy()
