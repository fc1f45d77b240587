"""Prints, as JSON, the parameters one wrapper's layer_outputs_and_gradients gives no
gradient (None) for on one batch, twice: with dense 9's bias built frozen (--fault
frozen:9, the real build path) and with it cut from the graph by the framework's own
stop-gradient (the bug of a detached tensor: a test-only patch of that layer's forward;
Caffe has none). Run in its own process, by the framework's own Python: a Keras backend
is fixed at import.

    python -m tests.helpers.gradient_probe WRAPPER_PACKAGE
"""

import importlib
import json
import sys

import numpy as np

from algorithms.network.networks import CNN2D_3LAYER
from algorithms.network.variants import apply_fault, parse_fault
from algorithms.network.weights import initial_weights

DETACHED = 9  # dense 9: the first dense layer (no dropout before it, so its index is the spec's)


def detach_dense_bias(package: str) -> None:
    """Dense 9's bias read through the framework's own stop-gradient from here on."""
    if package == "torch_wrapper":
        import torch.nn.functional as F

        import torch_wrapper.probes as probes

        build = probes.layer_modules

        def detached(network, weights, *rest, **options):
            layers = build(network, weights, *rest, **options)
            dense = layers[DETACHED][0]
            dense.forward = lambda x: F.linear(x, dense.weight, dense.bias.detach())
            return layers

        probes.layer_modules = detached
    elif package == "tensorflow_wrapper":
        import tensorflow as tf

        from tensorflow_wrapper.model import SpecModel

        dense = SpecModel._dense
        SpecModel._dense = lambda self, index, x, kernel, bias: dense(
            self, index, x, kernel, tf.stop_gradient(bias) if index == DETACHED else bias
        )
    elif package == "lasagne_wrapper":
        import lasagne
        import theano

        output_for = lasagne.layers.DenseLayer.get_output_for

        def detached(self, input, **options):
            if self.name != f"layer_{DETACHED}":
                return output_for(self, input, **options)
            bias = theano.gradient.disconnected_grad(self.b)
            return self.nonlinearity(theano.tensor.dot(input.flatten(2), self.W) + bias.dimshuffle("x", 0))

        lasagne.layers.DenseLayer.get_output_for = detached
    else:
        import keras

        call, backend = keras.layers.Dense.call, keras.backend
        keras_2 = keras.__version__.startswith("2.")

        def detached(self, inputs, training=None):
            if self.name != f"layer_{DETACHED}":
                return call(self, inputs) if keras_2 else call(self, inputs, training=training)
            if keras_2:  # Keras 2 on Theano
                return self.activation(backend.dot(inputs, self.kernel) + backend.stop_gradient(self.bias))
            return self.activation(keras.ops.matmul(inputs, self.kernel) + keras.ops.stop_gradient(self.bias))

        keras.layers.Dense.call = detached


def main(package: str) -> None:
    probes = importlib.import_module(f"{package}.probes")
    network = CNN2D_3LAYER.without_dropout()
    rng = np.random.default_rng(0)
    images, labels = rng.uniform(0, 1, (4, 28, 28)).astype(np.float32), np.arange(4, dtype=np.int32)
    frozen, weights = apply_fault(parse_fault("frozen:9", CNN2D_3LAYER), network, initial_weights(network, 0))
    found = {"frozen": probes.layer_outputs_and_gradients(frozen, weights, images, labels).gradients}
    if package != "caffe_wrapper":  # Caffe has no graph to cut a blob from: lr_mult 0 is its one way
        detach_dense_bias(package)
        found["detached"] = probes.layer_outputs_and_gradients(network, weights, images, labels).gradients
    print(
        json.dumps(
            {
                case: {
                    "none": sorted([index, role] for (index, role), value in gradients.items() if value is None),
                    "zeros": sorted(
                        [index, role]
                        for (index, role), value in gradients.items()
                        if value is not None and not np.any(value)
                    ),
                    "held": len(gradients),
                }
                for case, gradients in found.items()
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
