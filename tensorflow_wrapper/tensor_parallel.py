"""Tensor parallelism in TensorFlow: every conv layer's output channels and every
dense layer's units are cut into the plan's shards (`plan.shards`), one per device.
Each device holds its slice of the kernel and bias as its own tf.Variable and
computes its channels from the full input (`tf.device`); the slices are then
concatenated on every device (the all-gather), so each device holds the whole
activation and runs the cheap layers between (padding, pooling, flatten, dropout)
on its own copy, as torch's ranks do. All of it is ops in the step's one
tf.function: TensorFlow inserts the device-to-device copies and differentiates
through them, so each slice's gradient is exactly its part of the one-device
gradient, and the input's gradient is summed over the devices that read it.
Dropout draws the same mask on every copy, from the rows' shared uniforms (model.dropout)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from algorithms.network.networks import Conv2D, Network
from tensorflow_wrapper.model import SpecModel


class TensorParallelModel(SpecModel):
    """SpecModel's forward pass with each parametric layer's weights split across `devices`."""

    def __init__(self, network: Network, weights: list, seed: int, shards: dict, devices: list):
        super().__init__(network, [], seed)  # no whole-layer variables: the shards below instead
        self.shards, self.devices = shards, devices
        self.kernel_shards, self.bias_shards = {}, {}
        for w in weights:
            kernels, biases = [], []
            for rank, (start, stop) in enumerate(shards[w.layer_index]):
                with tf.device(devices[rank]):
                    kernels.append(tf.Variable(w.kernel[..., start:stop], name=f"kernel_{w.layer_index}_shard_{rank}"))
                    biases.append(tf.Variable(w.bias[start:stop], name=f"bias_{w.layer_index}_shard_{rank}"))
            self.kernel_shards[w.layer_index], self.bias_shards[w.layer_index] = kernels, biases

    @property
    def weights_in_order(self) -> list:
        return [v for i in sorted(self.kernel_shards) for v in (*self.kernel_shards[i], *self.bias_shards[i])]

    def gathered_weights(self) -> list:
        """numpy kernel and bias of every layer, the shards joined: the one-device layout."""
        return [
            np.concatenate([v.numpy() for v in shards], axis=-1)
            for i in sorted(self.kernel_shards)
            for shards in (self.kernel_shards[i], self.bias_shards[i])
        ]

    def __call__(self, x: tf.Tensor, training: bool, uniforms=()) -> tf.Tensor:
        copies = [x] * len(self.devices)  # each device reads the input batch
        for index, layer in enumerate(self.network.layers):
            if index in self.shards:
                slices = []
                for rank, device in enumerate(self.devices):
                    with tf.device(device):
                        kernel, bias = self.kernel_shards[index][rank], self.bias_shards[index][rank]
                        if isinstance(layer, Conv2D):
                            slices.append(self._conv(index, layer, copies[rank], kernel, bias))
                        else:
                            slices.append(self._dense(index, copies[rank], kernel, bias))
                copies = []
                for device in self.devices:  # the all-gather: every device joins all the slices
                    with tf.device(device):
                        copies.append(tf.concat(slices, axis=-1))
            else:
                for rank, device in enumerate(self.devices):
                    with tf.device(device):
                        copies[rank] = self._layer(index, layer, copies[rank], training, uniforms)
        return copies[0]
