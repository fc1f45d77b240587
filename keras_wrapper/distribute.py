"""Data and tensor parallel for Keras 3; the models are built and compiled inside
`data_parallel(devices)` or `tensor_parallel(network, plan)`, then model.fit runs
unchanged. Every input of the training model (the images and the rows' dropout
uniforms, model.py) is cut along the batch axis alike, so each replica's rows keep their
uniforms.

    tensorflow  tf.distribute.MirroredStrategy over N GPUs, else N logical CPU
                devices; Keras cuts each global batch across the replicas and its
                optimizer sums the replicas' gradients (each loss / N replicas)
    jax         keras.distribution.DataParallel over N devices (host devices made
                by XLA_FLAGS, see keras_wrapper.prepare_process); the batch is one
                array sharded along its first axis, so every op sees the global batch

Tensor parallel (and hybrid: data x tensor) is Keras's ModelParallel, on jax only
(Keras's distribution API has no other backend): a DeviceMesh of replicas x group
devices, axes ('batch', 'model'), and a LayoutMap sharding every conv kernel on its
output channels and every dense kernel (and their biases) on its units over
'model', the plan's shards. XLA's SPMD partitioner inserts the collectives; the
batch is sharded over 'batch' (one replica: not split). jax shards only evenly,
so every layer's width must divide by the group (keras_wrapper.prepare_process).
"""

from __future__ import annotations

import contextlib
import re

import keras

from algorithms.network.networks import Conv2D
from keras_wrapper.model import layer_name

BACKEND = keras.backend.backend()


def data_parallel(devices: int):
    """A context to build and compile the model in."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        from backends.tensorflow_backend import local_devices

        return tf.distribute.MirroredStrategy(local_devices(devices)).scope()
    if BACKEND == "jax":
        available = keras.distribution.list_devices()
        if len(available) < devices:
            raise RuntimeError(f"--devices {devices}: jax sees {len(available)} device(s) ({', '.join(available)})")
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=available[:devices]))
        return contextlib.nullcontext()
    raise RuntimeError(f"Keras on {BACKEND} has no data parallel here")


def tensor_parallel(network, plan):
    """Sets ModelParallel for the plan (tensor: 1 x N; hybrid: replicas x group) and
    returns a context to build and compile the model in. LayoutMap keys must match
    a variable's whole path (`<network>/layer_3/kernel`), so each key names its layer;
    tests/test_parallel_keras_tensor.py checks the shardings the variables got."""
    if BACKEND != "jax":
        raise RuntimeError(f"Keras on {BACKEND} has no tensor parallel: Keras's distribution API is jax-only")
    devices = keras.distribution.list_devices()
    needed = plan.replicas * plan.group
    if len(devices) < needed:
        raise RuntimeError(f"--devices {needed}: jax sees {len(devices)} device(s) ({', '.join(devices)})")
    mesh = keras.distribution.DeviceMesh((plan.replicas, plan.group), ("batch", "model"), devices[:needed])
    layout_map = keras.distribution.LayoutMap(mesh)
    for index in plan.shards:
        prefix = f"(?:.*/)?{re.escape(layer_name(index))}/"
        kernel = (None, None, None, "model") if isinstance(network.layers[index], Conv2D) else (None, "model")
        layout_map[prefix + "kernel"] = kernel
        layout_map[prefix + "bias"] = ("model",)
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch"))
    return contextlib.nullcontext()
