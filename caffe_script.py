"""Train a spec network with Caffe: the spec becomes prototxt (train, deploy,
solver) and Caffe's own solver steps over the shared batch order.

    python caffe_script.py --num_epochs 3 --batch_size 128

Caffe is built from the PyPI sdist by `make caffe` (caffe_wrapper/build_caffe.sh).
"""

import importlib.util
import sys

from algorithms.errors import EXIT_INPUT_ERROR
from algorithms.run.entry import run_entry_point

if __name__ == "__main__":
    # checked before any work (the build is a separate step), but found, not loaded: the flags
    # are read first, and --help or a refused flag answers without Caffe
    if importlib.util.find_spec("caffe") is None:
        print(
            "error: pycaffe is not installed in this environment; build it with 'make caffe' "
            "(about 11 minutes the first time, then cached)",
            file=sys.stderr,
        )
        sys.exit(EXIT_INPUT_ERROR)
    sys.exit(
        run_entry_point(
            "caffe_wrapper.train", "caffe_script.py", "Train a spec network with Caffe (prototxt + Caffe's own solver)."
        )
    )
