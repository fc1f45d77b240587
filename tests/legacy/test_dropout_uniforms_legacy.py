"""The shared dropout uniforms in the legacy env's numpy 1.23: the same numbers the main
env's numpy 2 draws (tests/test_dropout_uniforms.py holds both to KNOWN), so Lasagne and
Keras on Theano drop the units every other framework drops."""

import numpy as np

from algorithms.network.dropout import uniforms
from algorithms.network.networks import CNN2D_3LAYER

KNOWN = np.array([[6209504, 5259773, 2000034], [6099602, 4297037, 16412116]]) / np.float32(2**24)  # exact: k / 2**24


def test_numpy_1_draws_the_same_uniforms_as_numpy_2():
    assert np.__version__.startswith("1.")
    np.testing.assert_array_equal(uniforms(CNN2D_3LAYER, 0, 0, np.arange(2))[0][:, :3], KNOWN)
    whole = uniforms(CNN2D_3LAYER, 3, 2, np.arange(100))[1]
    assert np.array_equal(uniforms(CNN2D_3LAYER, 3, 2, np.array([42, 7]))[1], whole[[42, 7]])
