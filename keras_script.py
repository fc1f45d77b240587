"""Train a spec network with Keras 3 on the backend KERAS_BACKEND names
(tensorflow, torch or jax; Keras's own default otherwise).

    KERAS_BACKEND=jax python keras_script.py --num_epochs 3
"""
import os
import sys

from algorithms.run import run_entry_point

if __name__ == "__main__":
    if os.environ.get("KERAS_BACKEND", "").lower() == "theano":
        print("error: KERAS_BACKEND=theano needs Keras 2 in its own environment; run "
              "'python keras_theano_backend.py' (same flags)", file=sys.stderr)
        sys.exit(2)
    sys.exit(run_entry_point("keras_wrapper.train", "keras_script.py",
                             "Train a spec network with Keras 3 on the backend named by KERAS_BACKEND."))
