"""Data parallel for Keras 3, one setup per backend; the model is built and
compiled inside `data_parallel(devices)`, then model.fit runs unchanged.

    tensorflow  tf.distribute.MirroredStrategy over N GPUs, else N logical CPU
                devices; Keras cuts each global batch across the replicas and its
                optimizer sums the replicas' gradients (each loss / N replicas)
    jax         keras.distribution.DataParallel over N devices (host devices made
                by XLA_FLAGS, see keras_wrapper.prepare_process); the batch is one
                array sharded along its first axis, so every op sees the global batch
"""

from __future__ import annotations

import contextlib

import keras

BACKEND = keras.backend.backend()


def data_parallel(devices: int):
    """A context to build and compile the model in."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.distribute.MirroredStrategy(_tensorflow_devices(tf, devices)).scope()
    if BACKEND == "jax":
        available = keras.distribution.list_devices()
        if len(available) < devices:
            raise RuntimeError(f"--devices {devices}: jax sees {len(available)} device(s) ({', '.join(available)})")
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=available[:devices]))
        return contextlib.nullcontext()
    raise RuntimeError(f"Keras on {BACKEND} has no data parallel here")


def _tensorflow_devices(tf, count: int) -> list:
    """The first `count` GPUs, else `count` logical CPU devices (made before TF initialises)."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < count:
            raise RuntimeError(f"--devices {count}: this machine has {len(gpus)} GPU(s)")
        return [f"/gpu:{i}" for i in range(count)]
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    return [f"/cpu:{i}" for i in range(count)]
