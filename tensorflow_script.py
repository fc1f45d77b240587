"""Train a spec network with raw TensorFlow 2 (GradientTape loop).

python tensorflow_script.py --train data/train.csv --test data/test.csv --num_epochs 10
"""

import sys

from algorithms.run.entry import run_entry_point

if __name__ == "__main__":
    sys.exit(
        run_entry_point(
            "tensorflow_wrapper.train",
            "tensorflow_script.py",
            "Train a spec network with raw TensorFlow 2 (tf.function + GradientTape).",
        )
    )
