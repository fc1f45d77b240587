"""The benchmark: harness vs native loop, GEMM peak and MFU, 1 thread vs all cores,
compiled paths, peak RSS and the data path, for every framework, in one run
(under 10 minutes on 2 cores). Prints the table and writes it under results/benchmark/.

    python benchmark.py [--only torch,tensorflow] [--steps 20]
"""

import sys

from algorithms.bench.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
