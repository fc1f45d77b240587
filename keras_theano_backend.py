"""Train a spec network with Keras on the Theano backend, as the original
`keras_theano_backend.py` did: multi-backend Keras 2.3.1 on theano-pymc, with the
same model builder and trainer as Keras 3 (keras_wrapper/).

Keras 2 and Theano need the legacy environment (.venv-legacy); started from any
other Python, this script re-executes itself there, building it first when needed.
`KERAS_BACKEND=theano python keras_script.py` comes here too.

    python keras_theano_backend.py --num_epochs 10
"""

import os
import sys

from algorithms.registry.legacy_env import reexec_in_legacy_env
from algorithms.run.entry import run_entry_point

if __name__ == "__main__":
    reexec_in_legacy_env(__file__)
    if os.environ.get("KERAS_BACKEND", "theano").lower() != "theano":
        print(
            f"warning: KERAS_BACKEND={os.environ['KERAS_BACKEND']} names another backend, but "
            "keras_theano_backend.py runs Keras on theano",
            file=sys.stderr,
        )
    # Keras 2 reads KERAS_BACKEND before keras.json when it loads, which run_entry_point does
    # only after the flags are read: --help and a refused flag answer without Theano
    os.environ["KERAS_BACKEND"] = "theano"
    sys.exit(
        run_entry_point(
            "keras_wrapper.train", "keras_theano_backend.py", "Train a spec network with Keras 2 on the Theano backend."
        )
    )
