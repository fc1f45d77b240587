"""Whether each framework's installed build can use an NVIDIA GPU, read from its own
files without loading it (`--device gpu` is refused in one line before a framework's
start-up when it cannot): each returns why not, or None. The wrappers name them in their
Support (`gpu_build`); once loaded, the framework itself says where it placed the run.
Loads no framework."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from typing import Optional

SETUP = "`make gpu-setup` installs the CUDA builds in .venv-gpu (docs/gpu.md)"


def _package_file(package: str, *parts: str) -> Optional[str]:
    """The text of a file inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def torch_build() -> Optional[str]:
    """torch/version.py says `cuda = None` in a CPU-only build (the +cpu wheel)."""
    text = _package_file("torch", "version.py")
    if text is None:
        return "torch is not installed in this environment"
    cuda = re.search(r"^cuda\b[^=\n]*=\s*(?:'([^']*)'|None)", text, re.MULTILINE)
    if cuda and cuda.group(1):
        return None
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.MULTILINE)
    return f"torch {version.group(1) if version else ''} here is a CPU-only build (no CUDA); {SETUP}"


def tensorflow_build() -> Optional[str]:
    """tensorflow/python/platform/build_info.py holds `('is_cuda_build', False)` in a CPU build
    (tensorflow-cpu)."""
    text = _package_file("tensorflow", "python", "platform", "build_info.py")
    if text is None:
        return "tensorflow is not installed in this environment"
    if re.search(r"'is_cuda_build',\s*True", text):
        return None
    return f"TensorFlow {_version('tensorflow-cpu') or _version('tensorflow')} here is a CPU-only build; {SETUP}"


def jax_build() -> Optional[str]:
    """jax finds a GPU through its CUDA plugin (jax[cuda12] installs jax-cuda12-plugin)."""
    if importlib.util.find_spec("jax") is None:
        return "jax is not installed in this environment"
    if any(_version(f"jax-cuda{major}-plugin") for major in (12, 13)):
        return None
    return f"jax {_version('jax')} here has no CUDA plugin (jax-cuda12-plugin: the CPU build); {SETUP}"


def _version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
