"""The one-command GPU check (`make gpu-check`; `make gpu-check ARGS=--dry-run` on CPU):
torch eager and compiled in fp32, tf32 and bf16, Keras on torch and jax, the cuDNN
study and each run's MFU, as one table (docs/gpu.md).

    python gpu_check.py --keras_path vendor/keras
"""

import sys

from algorithms.bench.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
