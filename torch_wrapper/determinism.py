"""Parity mode for PyTorch: deterministic kernels (called before the model is built)."""
from __future__ import annotations

import os


def enable() -> tuple:
    """Turns on what torch offers; returns (what was set, what still is not deterministic)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's own requirement, read at CUDA init
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    applied = ["torch.use_deterministic_algorithms(True)", "cudnn.benchmark=False", "cudnn.deterministic=True"]
    caveats = [f"CPU kernels split work over {torch.get_num_threads()} threads: bit-identical only "
               "at the same thread count and CPU"]
    return applied, caveats
