"""Keras on jax's max pool (backends/jax_backend.max_pool, FirstMaxPool2D in keras_wrapper/compat.py):
the values and the gradient of jax's own pool (lax.reduce_window, whose gradient XLA CPU expands
into a select-and-scatter), bit for bit, ties at the first maximum included."""

from __future__ import annotations

import numpy as np

from backends.jax_backend import max_pool


def test_the_strided_pool_equals_jax_reduce_window_in_values_and_gradient():
    import jax
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.integers(-2, 3, size=(3, 7, 6, 4)).astype(np.float32))  # many tied windows; a cut row
    weights = jnp.asarray(rng.standard_normal((3, 3, 3, 4)).astype(np.float32))

    def reference(values):
        cropped = values[:, :6, :6]
        return lax.reduce_window(cropped, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    assert np.array_equal(max_pool(x, 2), reference(x))
    ours = jax.grad(lambda values: (max_pool(values, 2) * weights).sum())(x)
    theirs = jax.grad(lambda values: (reference(values) * weights).sum())(x)
    assert np.array_equal(ours, theirs)
    assert np.count_nonzero(ours) == weights.size  # one position of each window: its first maximum
