"""Each framework's tuned CPU setting (`--tuned`), beside its defaults: one table.

For every framework of algorithms/registry/frameworks.py, the documented CPU switches worth
measuring (CANDIDATES) and the one `--tuned` applies (TUNED): the best of them as
`benchmark.py --candidates` measured it (results/benchmark/, dated), or "default"
where none beat the framework's defaults. Defaults stay the default: nothing here
runs without `--tuned`.

A setting is environment variables, set before the framework is imported (XLA and
TensorFlow read their flags when they load), and in-process options its wrapper
applies (torch.compile's mode). A variable that holds a flag list (XLA_FLAGS,
TF_XLA_FLAGS) is appended to, so the thread flags and the user's own stay.
Imports no framework."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from algorithms.errors import InputError
from algorithms.registry.frameworks import FRAMEWORKS, Framework
from algorithms.paths import REPO_ROOT
from algorithms.run.threads import environment_text

DEFAULT = "default"
BEST = "best"  # what a bare --tuned asks for: TUNED's entry
# variables holding a list, appended to (with their separator), never replaced
FLAG_LISTS = {"XLA_FLAGS": " ", "TF_XLA_FLAGS": " ", "THEANORC": os.pathsep}

YNN_OFF = "--xla_cpu_experimental_ynn_fusion_type="  # XLA CPU's YNNPACK fusions off (empty list)


@dataclass(frozen=True)
class Setting:
    name: str
    env: dict = field(default_factory=dict, hash=False)  # set before the framework loads
    options: dict = field(default_factory=dict, hash=False)  # applied by the wrapper, e.g. {"torch.compile": mode}
    why: str = ""  # what the switch does, from the framework's documentation

    def describe(self) -> str:
        parts = [f"{name}={value}" for name, value in self.env.items()]
        parts += [f"{name}(mode={value!r})" for name, value in self.options.items()]
        return f"{self.name}: " + (" ".join(parts) or "the framework's defaults")


_TF_SETTINGS = (
    Setting("onednn_off", {"TF_ENABLE_ONEDNN_OPTS": "0"}, why="TensorFlow's oneDNN kernels off: Eigen's own"),
    Setting(
        "xla_autojit",
        {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"},
        why="XLA auto-clustering of the graph on CPU",
    ),
    Setting(
        "xla_autojit_ynn_off",
        {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit", "XLA_FLAGS": YNN_OFF},
        why="auto-clustering, with XLA CPU's YNNPACK fusions off",
    ),
)
_OMP_SPIN = Setting(
    "omp_active",
    {"OMP_WAIT_POLICY": "ACTIVE", "OMP_PROC_BIND": "true"},
    why="OpenMP threads spin and stay on their core between ops (PyTorch's CPU tuning guide)",
)
_THEANO_OPENMP = Setting(
    "openmp",
    {"THEANORC": os.path.join(REPO_ROOT, "backends", "theano_openmp.rc")},
    why="Theano's openmp=True: CorrMM's per-image loop and large elementwise ops on OMP_NUM_THREADS threads "
    "(theano-pymc 1.1's Elemwise C code does not compile with it: a measured failure, kept to show it)",
)
_BLAS_ONE_THREAD = Setting(
    "blas_1_thread",
    {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
    why="OpenBLAS on one thread: its GEMMs are small per image (Caffe's im2col per sample)",
)

# the documented switches measured, per framework (benchmark.py --candidates runs each)
CANDIDATES = {
    "tensorflow": _TF_SETTINGS,
    "keras_tensorflow": _TF_SETTINGS,
    "keras_torch": (_OMP_SPIN,),
    "keras_jax": (
        Setting("ynn_off", {"XLA_FLAGS": YNN_OFF}, why="XLA CPU's YNNPACK fusions off: its own emitters"),
        Setting("onednn", {"XLA_FLAGS": "--xla_cpu_use_onednn=true"}, why="XLA CPU's oneDNN rewrites on"),
        Setting(
            "ynn_xnn_off",
            {"XLA_FLAGS": YNN_OFF + " --xla_cpu_experimental_xnn_fusion_type="},
            why="both XNNPACK and YNNPACK fusions off",
        ),
    ),
    "torch": (
        _OMP_SPIN,
        Setting("compile", options={"torch.compile": "default"}, why="torch.compile (Inductor), default mode"),
        Setting(
            "compile_max_autotune",
            options={"torch.compile": "max-autotune-no-cudagraphs"},
            why="torch.compile, Inductor benchmarking its kernel choices",
        ),
    ),
    "lasagne": (_THEANO_OPENMP,),
    "keras_theano": (_THEANO_OPENMP,),
    "caffe": (_BLAS_ONE_THREAD,),
}

# --tuned: the best measured setting of each framework ("default": none beat the defaults), as
# results/benchmark/2026-12-01-tuned.md measured them (a candidate faster in every round, or none)
TUNED = {
    "tensorflow": DEFAULT,
    "keras_tensorflow": DEFAULT,
    "keras_torch": DEFAULT,
    "keras_jax": "ynn_off",
    "torch": DEFAULT,
    "lasagne": DEFAULT,
    "keras_theano": DEFAULT,
    "caffe": DEFAULT,
}


def settings(framework: str) -> dict:
    """name -> Setting of this framework, its defaults first."""
    return {DEFAULT: Setting(DEFAULT), **{setting.name: setting for setting in CANDIDATES[framework]}}


def resolve(framework: str, requested: str) -> Setting:
    """The Setting `--tuned [NAME]` names for this framework (BEST: TUNED's)."""
    name = TUNED[framework] if requested == BEST else requested
    known = settings(framework)
    if name not in known:
        raise InputError(
            f"--tuned {requested}: {framework} has the settings {', '.join(known)}; "
            f"drop the name for its best measured one ({TUNED[framework]})"
        )
    return known[name]


def registry_entry(package: str, environ=os.environ) -> Framework:
    """The registry entry this process runs: the wrapper package, and for Keras the
    backend KERAS_BACKEND names (Keras's own default, tensorflow, when unset)."""
    entries = [framework for framework in FRAMEWORKS if framework.package == package]
    for framework in entries:
        if all(environ.get(name, "").lower() == value for name, value in framework.env.items()):
            return framework
    return entries[0]


def apply(setting: Setting, environ=os.environ) -> str:
    """Sets the setting's environment (before the framework is imported); returns
    the results.log line."""
    for name, value in setting.env.items():
        if name in FLAG_LISTS and environ.get(name):
            environ[name] = f"{environ[name]}{FLAG_LISTS[name]}{value}"
        else:
            environ[name] = value
    return setting.describe()


def resolve_tuned(config, package: str):
    """The config with --tuned resolved to a setting name of this process's framework
    (an unknown name: InputError, before anything loads); unchanged without --tuned."""
    if not config.tuned:
        return config
    return replace(config, tuned=resolve(registry_entry(package).name, config.tuned).name)


def apply_tuned(config, package: str) -> str:
    """--tuned's environment, set before the framework is imported; "" without --tuned."""
    return apply(settings(registry_entry(package).name)[config.tuned]) if config.tuned else ""


def tuned_options(config, framework: str) -> dict:
    """The in-process options of the run's --tuned setting ({} without --tuned)."""
    return settings(framework)[config.tuned].options if config.tuned else {}


def log_line(config, framework: str, backend: str) -> str:
    """results.log's `tuned` line: the setting applied, or the defaults."""
    if not config.tuned:
        return "off: the framework's defaults (--tuned applies its best measured setting)"
    entry = next(f for f in FRAMEWORKS if (f.framework, f.backend) == (framework, backend))
    setting = settings(entry.name)[config.tuned]
    chosen = "its best measured setting" if config.tuned == TUNED[entry.name] else "a named candidate"
    actual = f"; as set: {environment_text(setting.env)}" if setting.env else ""
    return f"{setting.describe()} ({chosen}; the table: algorithms/run/tuning.py){actual}"
