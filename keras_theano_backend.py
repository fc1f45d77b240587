"""Keras on the Theano backend, as the original `keras_theano_backend.py` ran.

Theano needs Keras 2 and numpy < 1.24, which cannot share the main environment;
that legacy environment is not built by this project yet, so this script stops
with a clear message instead of pretending.
"""
import sys

if __name__ == "__main__":
    print("error: the Theano backend needs the legacy environment (theano-pymc, Keras 2.3.1, numpy 1.23), "
          "which this checkout does not build yet; use keras_tensorflow_backend.py or "
          "KERAS_BACKEND=torch|jax python keras_script.py", file=sys.stderr)
    sys.exit(2)
