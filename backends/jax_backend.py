"""jax helpers (Keras on jax): its determinism switches and its device, said before and
after it loads."""

from __future__ import annotations

import importlib.metadata
import os
import re

from algorithms.machine.devices import cpu_name, driver_version
from backends.tuning import YNN_OFF
from backends.xla import thread_flags

# the jaxlib versions the CPU default below was measured with: an XLA that does not know a flag
# in XLA_FLAGS stops at start, so another version keeps XLA's own defaults
MEASURED_JAXLIB = ("0.10.",)


def cpu_environment(threads: int) -> None:
    """Support.thread_environment on jax, before it loads: XLA's thread flags (backends/xla.py)
    and this wrapper's CPU default, XLA CPU's YNNPACK fusions off (its own emitters and Eigen's
    convolutions instead). With them on, the default net's step at batch 128 took 446.6 ms, with
    them off 124.5 (with FirstMaxPool2D, keras_wrapper/compat.py), TensorFlow's 71.2: most of it
    the YNNPACK fusion of the second convolution's weight gradient
    (results/benchmark/2026-12-04-defaults.md). Where the user's XLA_FLAGS names the fusion
    types, theirs stand."""
    thread_flags(threads)
    if _ynn_fusion_types() is None and _jaxlib().startswith(MEASURED_JAXLIB):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {YNN_OFF}".strip()


DEVICE_COUNT = "--xla_force_host_platform_device_count"


def host_devices(devices: int):
    """jax's CPU split into `devices` logical devices, read from XLA_FLAGS when it starts;
    returns the count the user's XLA_FLAGS already names (theirs stands) or None."""
    flags = os.environ.get("XLA_FLAGS", "")
    found = re.search(re.escape(DEVICE_COUNT) + r"=(\d+)", flags)
    if found:
        return int(found.group(1))
    os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_COUNT}={devices}".strip()
    return None


def _ynn_fusion_types():
    """The YNNPACK fusion types XLA_FLAGS names ("": none, off), or None where it names none."""
    found = re.search(re.escape(YNN_OFF) + r"(\S*)", os.environ.get("XLA_FLAGS", ""))
    return None if found is None else found.group(1)


def _jaxlib() -> str:
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return ""


def xla_cpu_kernels() -> str:
    """How XLA_FLAGS set XLA CPU's kernels, for the device's detail (a drift source in the
    settings record: another kernel sums in another order)."""
    types = _ynn_fusion_types()
    return "XLA CPU" if types is None else f"XLA CPU, YNNPACK fusions {types or 'off'}"


def enable_determinism() -> tuple:
    """XLA's deterministic GPU ops and float32 matmuls and convolutions at full precision
    (jax runs them as TF32 on a GPU by default), both read when jax starts: set before it is
    imported. On the CPU neither changes a kernel (XLA's CPU reductions have a fixed order,
    and its float32 dots are float32)."""
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
    os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
    applied = ["XLA_FLAGS=--xla_gpu_deterministic_ops=true", "TF32 off (JAX_DEFAULT_MATMUL_PRECISION=highest)"]
    caveats = (
        ["GPU kernels: bit-identical only on the same GPU model, driver, CUDA and cuDNN versions"]
        if os.environ.get("JAX_PLATFORMS") != "cpu"
        and os.environ.get("CUDA_VISIBLE_DEVICES") != "-1"
        and _cuda_plugin()
        else ["XLA CPU has no determinism switch; its thread-pool split depends on the CPU and thread count"]
    )
    return applied, caveats


def max_pool(x, size: int):
    """Max-pooling of NHWC `x` over size x size windows, stride `size`, a partial last window
    dropped, as backends/theano_backend.max_pool: the window's strided views in row-major
    order, each taken only where it is greater than the maximum so far, so the gradient goes
    to the first maximum. The same values and gradient as jax's own pool (lax.reduce_window,
    whose gradient also goes to the first maximum), but XLA CPU expands that gradient
    (select-and-scatter) into a reduce-window over int32 index tensors of the input's size
    and a scatter: with it, most of Keras on jax's step once the YNNPACK fusions are off
    (202.6 -> 124.5 ms at batch 128, results/benchmark/2026-12-04-defaults.md)."""
    import jax.numpy as jnp

    rows, columns = x.shape[1] // size, x.shape[2] // size
    best = None
    for i in range(size):
        for j in range(size):
            value = x[:, i : rows * size : size, j : columns * size : size]
            best = value if best is None else jnp.where(value > best, value, best)
    return best


def device_environment(device: str) -> None:
    """Support.device_environment: --device cpu keeps jax off its CUDA plugin (CUDA_VISIBLE_DEVICES
    alone leaves jax to try it and warn); auto and gpu leave jax its default, the GPU where it finds one."""
    if device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"


def describe_device() -> tuple:
    """(kind, name, detail) of jax's default device, for contract.Device: the GPU's model, the
    driver's version and the CUDA and cuDNN jax's plugin loaded; or the CPU."""
    import jax

    device = jax.devices()[0]
    if device.platform != "gpu":
        return "cpu", "cpu", f"{cpu_name()} ({xla_cpu_kernels()})"
    try:  # jax's own record of the CUDA libraries it loaded (not public API: said where it answers)
        from jax._src.lib import cuda_versions

        libraries = (
            f"CUDA runtime {cuda_versions.cuda_runtime_get_version()}, cuDNN {cuda_versions.cudnn_get_version()}"
        )
    except Exception:  # noqa: BLE001
        libraries = "CUDA and cuDNN versions not reported"
    plugin = _cuda_plugin() or "unknown"
    detail = f"{device.device_kind}; driver {driver_version() or 'unknown'}, {libraries} (jax CUDA plugin {plugin})"
    return "gpu", f"cuda:{device.id}", detail


def library_versions() -> dict:
    """jaxlib, which holds XLA (the compiler that makes every kernel), for the settings
    record's releases."""
    return {"jaxlib": _jaxlib()}


def _cuda_plugin():
    for major in (12, 13):
        try:
            return importlib.metadata.version(f"jax-cuda{major}-plugin")
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
