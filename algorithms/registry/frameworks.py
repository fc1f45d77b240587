"""The framework registry: every framework/backend the commands run, once. Each
entry names its entry script, the environment it adds, the framework and backend
its rows record, its wrapper package and the venv it runs in. suite, capabilities,
benchmark, drift, scaling and the tests read it; nothing else lists frameworks."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from algorithms import paths


@dataclass(frozen=True)
class Framework:
    name: str  # the --only name, e.g. "keras_jax"
    script: str  # entry script at the repo root
    env: dict = field(hash=False)  # added to the environment of its processes
    framework: str  # what its rows record
    backend: str
    package: str  # the wrapper package
    venv: str  # "main" | "legacy" (.venv-legacy: Theano and Keras 2)
    # computes its GEMMs in the system OpenBLAS (algorithms/machine/openblas.py), whose core
    # its wrapper names before it loads and `run_all.py` measures before the runs
    openblas: bool = False

    @property
    def python(self) -> str:
        """The Python that imports its package (its entry script re-executes itself there)."""
        return paths.LEGACY_PYTHON if self.venv == "legacy" else sys.executable


FRAMEWORKS = (
    Framework("tensorflow", "tensorflow_script.py", {}, "tensorflow", "tensorflow", "tensorflow_wrapper", "main"),
    Framework(
        "keras_tensorflow",
        "keras_script.py",
        {"KERAS_BACKEND": "tensorflow"},
        "keras",
        "tensorflow",
        "keras_wrapper",
        "main",
    ),
    Framework("keras_torch", "keras_script.py", {"KERAS_BACKEND": "torch"}, "keras", "torch", "keras_wrapper", "main"),
    Framework("keras_jax", "keras_script.py", {"KERAS_BACKEND": "jax"}, "keras", "jax", "keras_wrapper", "main"),
    Framework("torch", "torch_script.py", {}, "torch", "torch", "torch_wrapper", "main"),
    # the Theano family: their scripts re-execute themselves in .venv-legacy
    Framework("lasagne", "lasagne_script.py", {}, "lasagne", "theano", "lasagne_wrapper", "legacy", openblas=True),
    Framework(
        "keras_theano",
        "keras_theano_backend.py",
        {"KERAS_BACKEND": "theano"},
        "keras",
        "theano",
        "keras_wrapper",
        "legacy",
        openblas=True,
    ),
    # Caffe built from the PyPI sdist by `make caffe`
    Framework("caffe", "caffe_script.py", {}, "caffe", "caffe", "caffe_wrapper", "main", openblas=True),
)
NAMES = tuple(framework.name for framework in FRAMEWORKS)
_BY_NAME = {framework.name: framework for framework in FRAMEWORKS}


def get(name: str) -> Framework:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown framework {name!r}; choose from {', '.join(NAMES)}") from None


def framework_names(parser, text: str, flag: str) -> list:
    """A comma-separated list of registry names (a command's --only), or the parser's one-line error."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in NAMES]
    if unknown or not names:
        parser.error(f"{flag}: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(NAMES)}")
    return names
