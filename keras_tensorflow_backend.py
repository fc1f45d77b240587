"""Train a spec network with Keras on the TensorFlow backend, as the original
`keras_tensorflow_backend.py` did, whatever KERAS_BACKEND or ~/.keras/keras.json say
(it warns when they name another backend).

    python keras_tensorflow_backend.py --num_epochs 10
"""

import json
import os
import sys

from algorithms.run.entry import run_entry_point


def requested_backends() -> list:
    """(where, backend) for every place that names a Keras backend."""
    found = []
    if os.environ.get("KERAS_BACKEND"):
        found.append(("KERAS_BACKEND=" + os.environ["KERAS_BACKEND"], os.environ["KERAS_BACKEND"]))
    config = os.path.join(os.environ.get("KERAS_HOME", os.path.expanduser("~/.keras")), "keras.json")
    try:
        with open(config) as handle:
            backend = json.load(handle).get("backend")
        if backend:
            found.append((f"{config} (backend: {backend})", backend))
    except (OSError, ValueError):
        pass
    return found


if __name__ == "__main__":
    for where, backend in requested_backends():
        if backend != "tensorflow":
            print(
                f"warning: {where} names another backend, but keras_tensorflow_backend.py runs Keras on "
                f"tensorflow; for {backend} run: KERAS_BACKEND={backend} python keras_script.py",
                file=sys.stderr,
            )
    # Keras reads KERAS_BACKEND before keras.json when it loads, which run_entry_point does
    # only after the flags are read: --help and a refused flag answer without TensorFlow
    os.environ["KERAS_BACKEND"] = "tensorflow"
    sys.exit(
        run_entry_point(
            "keras_wrapper.train",
            "keras_tensorflow_backend.py",
            "Train a spec network with Keras on the TensorFlow backend.",
        )
    )
