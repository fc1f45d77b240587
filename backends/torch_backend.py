"""PyTorch helpers shared by torch_wrapper and Keras on torch."""

from __future__ import annotations

import os
import re

from algorithms.machine.devices import cpu_name, driver_version
from algorithms.tables import shape_text


def set_threads(threads: int) -> str:
    """--threads: intra-op threads, and inter-op where torch still allows setting them."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # only settable before the first parallel op of the process
        pass
    return f"torch.set_num_threads({torch.get_num_threads()}), interop {torch.get_num_interop_threads()}"


def enable_determinism() -> tuple:
    """Turns on what torch offers; returns (what was set, what still is not deterministic).
    On a GPU: deterministic cuBLAS needs its workspace fixed before the first cuBLAS
    handle (CUBLAS_WORKSPACE_CONFIG), cuDNN picks deterministic kernels and stops
    benchmarking them, and float32 matmuls and convolutions stay IEEE float32 (TF32 off;
    cuDNN's convolutions take TF32 by default)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's own requirement, read at CUDA init
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    set_tf32(False)
    applied = [
        "torch.use_deterministic_algorithms(True)",
        "cudnn.benchmark=False",
        "cudnn.deterministic=True",
        f"CUBLAS_WORKSPACE_CONFIG={os.environ['CUBLAS_WORKSPACE_CONFIG']}",
        "TF32 off (cuda.matmul and cudnn.conv fp32_precision=ieee)",
    ]
    if torch.cuda.is_available():
        caveats = [
            "GPU kernels: bit-identical only on the same GPU model, driver, CUDA and cuDNN versions; "
            "atomics-based kernels without a deterministic version raise instead of running"
        ]
    else:
        caveats = [
            f"CPU kernels split work over {torch.get_num_threads()} threads: bit-identical only "
            "at the same thread count and CPU"
        ]
    return applied, caveats


def set_tf32(enabled: bool) -> None:
    """float32 matmuls and convolutions on a GPU: IEEE float32, or TF32 tensor cores."""
    import torch

    torch.backends.cuda.matmul.fp32_precision = torch.backends.cudnn.conv.fp32_precision = "tf32" if enabled else "ieee"


def run_device():
    """The device a one-process run trains on: the first GPU torch sees (none under --device
    cpu, which hides them all before torch loads: algorithms/machine/devices.py), else the CPU."""
    import torch

    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def describe_device(device) -> tuple:
    """(kind, name, detail) of a torch device, for contract.Device: the GPU's model, its
    memory and compute capability, the driver's, CUDA runtime's and cuDNN's versions; or
    the CPU's model and torch's threads."""
    import torch

    if device.type != "cuda":
        return "cpu", "cpu", f"{cpu_name()} ({torch.get_num_threads()} torch threads)"
    index = device.index or 0
    properties = torch.cuda.get_device_properties(index)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    detail = (
        f"{properties.name} ({properties.total_memory / 2**30:.0f} GiB, compute capability "
        f"{properties.major}.{properties.minor}); driver {driver_version() or 'unknown'}, "
        f"CUDA runtime {torch.version.cuda}, cuDNN {cudnn or 'none'}"
    )
    return "gpu", f"cuda:{index}", detail


def device_memory_mb():
    """--batch_size auto on a GPU: torch's peak-allocated counter and the GPU's free
    memory (with what this process holds counted free); None when nothing ran on CUDA
    (a run on the CPU: --device cpu, or no GPU)."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.max_memory_allocated() == 0:
        return None
    free, _ = torch.cuda.mem_get_info()
    return {
        "peak_mb": torch.cuda.max_memory_allocated() / 2**20,
        "free_mb": (free + torch.cuda.memory_reserved()) / 2**20,
    }


def profiled_ops(run) -> list:
    """[(aten op and input shapes, self CPU ms)] of everything `run()` does, by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        run()
    return [
        (f"{event.key} {shape_text(event.input_shapes)}", event.self_cpu_time_total / 1000.0)
        for event in profiler.key_averages(group_by_input_shape=True)
        if event.self_cpu_time_total > 0
    ]


def device_name(device) -> str:
    """The GPU's name, or the CPU with the threads torch computes on (the GPU check's rows)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def library_versions() -> dict:
    """The libraries torch computes with on the CPU, from its build configuration: oneDNN
    (convolutions) and MKL (GEMMs), for the settings record's releases (another release of
    either is another kernel: a drift source)."""
    import torch

    config = torch.__config__.show()
    found = {
        "oneDNN": re.search(r"(?:MKL-DNN|oneDNN)[^\n]*? v(\d[\w.]*)", config),
        "MKL": re.search(r"Math Kernel Library Version (\d[\w.]*)", config),
    }
    return {name: match.group(1) for name, match in found.items() if match}
