"""Train the same network with every framework and print a comparison table.

python run_all.py                       # default network, default data, preset settings
python run_all.py --num_epochs 3 --batch_size 128 --only torch,keras_jax
python run_all.py --versions 'keras==3.14.0' 'keras==3.15.1' --only keras_torch   # a framework upgrade
"""

import sys

from algorithms.studies.releases import main as compare_releases, wants_releases
from algorithms.studies.suite import main

if __name__ == "__main__":
    sys.exit(compare_releases() if wants_releases(sys.argv[1:]) else main())
