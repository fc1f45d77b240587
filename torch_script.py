"""Train a spec network with PyTorch (nn.Sequential, plain loop).

python torch_script.py --train data/train.csv --test data/test.csv --num_epochs 10
"""

import sys

from algorithms.run.entry import run_entry_point

if __name__ == "__main__":
    sys.exit(
        run_entry_point(
            "torch_wrapper.train", "torch_script.py", "Train a spec network with PyTorch (nn.Sequential, plain loop)."
        )
    )
