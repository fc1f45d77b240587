"""Train a spec network with Lasagne on Theano (compiled Theano train function).

Lasagne needs the legacy environment (.venv-legacy); started from any other Python,
this script re-executes itself there, building it first when needed.

    python lasagne_script.py --num_epochs 3 --batch_size 128
"""

import sys

from algorithms.registry.legacy_env import reexec_in_legacy_env
from algorithms.run.entry import run_entry_point

if __name__ == "__main__":
    reexec_in_legacy_env(__file__)
    sys.exit(
        run_entry_point("lasagne_wrapper.train", "lasagne_script.py", "Train a spec network with Lasagne on Theano.")
    )
