"""TensorFlow helpers shared by tensorflow_wrapper and Keras on tensorflow."""

from __future__ import annotations

from algorithms.machine.devices import cpu_name, driver_version


def set_threads(threads: int) -> str:
    """--threads: TensorFlow's intra- and inter-op pools. They can be set only before
    TensorFlow's first op; a process that already ran one (the tests build several
    trainers in one process) keeps the pools it has."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # "cannot be modified after initialization"
        pass
    return (
        f"tf.config.threading intra {tf.config.threading.get_intra_op_parallelism_threads()}, "
        f"inter {tf.config.threading.get_inter_op_parallelism_threads()}"
    )


def local_devices(count: int) -> list:
    """Device names for `count` replicas or stages on this machine: its first `count`
    GPUs, else `count` logical CPU devices, which can only be made before TensorFlow
    initialises its devices (so no op may run before this)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < count:
            raise RuntimeError(f"--devices {count}: this machine has {len(gpus)} GPU(s)")
        return [f"/gpu:{i}" for i in range(count)]
    cpu = tf.config.list_physical_devices("CPU")[0]
    made = tf.config.get_logical_device_configuration(cpu) or []
    if count > 1 and len(made) < count:  # once made (and initialised), more cannot be added; fewer are used as is
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    return [f"/cpu:{i}" for i in range(count)]


def device_memory_mb():
    """--batch_size auto on a GPU: TensorFlow's peak-allocated counter of GPU 0 (its
    free memory is not TensorFlow's to say: it reserves most of the GPU at start, so
    the finder needs --memory_budget_mb there); None on the CPU."""
    import tensorflow as tf

    if not tf.config.list_logical_devices("GPU"):
        return None
    return {"peak_mb": tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20, "free_mb": None}


def enable_determinism() -> tuple:
    """Turns on what TensorFlow offers; returns (what was set, what still is not deterministic).
    Op determinism picks deterministic GPU kernels (cuDNN's too) and refuses the ops that
    have none; TF32 off keeps float32 matmuls and convolutions IEEE float32 on a GPU
    (TensorFlow runs them as TF32 by default on Ampere and later)."""
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    applied = ["tf.config.experimental.enable_op_determinism()", "TF32 off (enable_tensor_float_32_execution(False))"]
    if tf.config.list_physical_devices("GPU"):
        caveats = ["GPU kernels: bit-identical only on the same GPU model, driver, CUDA and cuDNN versions"]
    else:
        caveats = [
            f"Eigen/oneDNN kernels split work over {tf.config.threading.get_intra_op_parallelism_threads() or 'all'} "
            "intra-op threads: bit-identical only at the same thread count and CPU"
        ]
    return applied, caveats


def describe_device() -> tuple:
    """(kind, name, detail) of where TensorFlow places a one-device run, for contract.Device:
    its default device, GPU 0 wherever it sees a GPU (none under --device cpu, which hides
    them before it loads: algorithms/machine/devices.py), with the GPU's model, the
    driver's version and the CUDA and cuDNN TensorFlow was built with; else the CPU. Reads
    physical devices only (logical ones would be fixed too early: local_devices)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "cpu", "cpu", f"{cpu_name()} (TensorFlow's CPU kernels)"
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = ".".join(str(part) for part in details.get("compute_capability", ()))
    build = tf.sysconfig.get_build_info()
    detail = (
        f"{details.get('device_name', gpus[0].name)}"
        + (f" (compute capability {capability})" if capability else "")
        + f"; driver {driver_version() or 'unknown'}, CUDA {build.get('cuda_version', 'unknown')}, "
        f"cuDNN {build.get('cudnn_version', 'unknown')} (TensorFlow's build)"
        + (f"; {len(gpus)} GPUs visible" if len(gpus) > 1 else "")
    )
    return "gpu", "cuda:0", detail


def library_versions() -> dict:
    """TensorFlow's build (its git description): the oneDNN and XLA it bundles come with
    it and are not reported apart, for the settings record's releases."""
    import tensorflow as tf

    return {"tensorflow build": tf.version.GIT_VERSION}
