"""Train a spec network with Keras 3 on the backend KERAS_BACKEND names
(tensorflow, torch or jax; Keras's own default otherwise). KERAS_BACKEND=theano
runs keras_theano_backend.py instead (Keras 2 in the legacy environment).

    KERAS_BACKEND=jax python keras_script.py --num_epochs 3
"""

import os
import sys

from algorithms.run.entry import run_entry_point

if __name__ == "__main__":
    if os.environ.get("KERAS_BACKEND", "").lower() == "theano":
        # the same flags, in the legacy env that keras_theano_backend.py re-executes into
        theano_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keras_theano_backend.py")
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, theano_script, *sys.argv[1:]])
    sys.exit(
        run_entry_point(
            "keras_wrapper.train",
            "keras_script.py",
            "Train a spec network with Keras 3 on the backend named by KERAS_BACKEND.",
        )
    )
