"""jax helpers (Keras on jax): its determinism switches and its device, said before and
after it loads."""

from __future__ import annotations

import importlib.metadata
import os

from algorithms.machine.devices import cpu_name, driver_version


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
        return "cpu", "cpu", f"{cpu_name()} (XLA CPU)"
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


def _cuda_plugin():
    for major in (12, 13):
        try:
            return importlib.metadata.version(f"jax-cuda{major}-plugin")
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
