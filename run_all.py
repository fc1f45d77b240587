"""Train the same network with every framework and print a comparison table.

python run_all.py                       # default network, default data, preset settings
python run_all.py --num_epochs 3 --batch_size 128 --only torch,keras_jax
"""

import sys

from algorithms.studies.suite import main

if __name__ == "__main__":
    sys.exit(main())
