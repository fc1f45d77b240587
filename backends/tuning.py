"""The --tuned switches that several wrappers share about one framework (the table
mechanism is algorithms/machine/tuning.py; each wrapper's `supported()` names its
candidates and its best). Environment variables only: importing this loads no framework."""

from __future__ import annotations

import os

from algorithms.machine.tuning import Setting

MEASURED = "results/benchmark/2026-12-01-tuned.md"  # where the current choices of `best` were measured
YNN_OFF = "--xla_cpu_experimental_ynn_fusion_type="  # XLA CPU's YNNPACK fusions off (an empty list)

# TensorFlow: raw tensorflow_wrapper and Keras on tensorflow
TENSORFLOW = (
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

# torch's OpenMP: torch_wrapper and Keras on torch
OMP_SPIN = Setting(
    "omp_active",
    {"OMP_WAIT_POLICY": "ACTIVE", "OMP_PROC_BIND": "true"},
    why="OpenMP threads spin and stay on their core between ops (PyTorch's CPU tuning guide)",
)

# Theano: Lasagne and Keras 2 on Theano
THEANO_OPENMP = Setting(
    "openmp",
    {"THEANORC": os.path.join(os.path.dirname(os.path.abspath(__file__)), "theano_openmp.rc")},
    why="Theano's openmp=True: CorrMM's per-image loop and large elementwise ops on OMP_NUM_THREADS threads "
    "(theano-pymc 1.1's Elemwise C code does not compile with it: a measured failure, kept to show it)",
)

# OpenBLAS (Debian 12's 0.3.21, which Theano links and Caffe is built with): its AVX-512
# kernels by name. The defaults already name the best core it has where its own pick is older
# (backends/openblas.py); this is applied after that. Only on a CPU with avx512f: elsewhere
# they stop the process.
OPENBLAS_AVX512 = Setting(
    "openblas_avx512",
    {"OPENBLAS_CORETYPE": "SkylakeX"},
    why="OpenBLAS's SkylakeX (AVX-512) kernels, where its CPU table takes the CPU for an AVX2 one",
    cpu_flag="avx512f",
)

# the variables above that hold a list (Tuning.lists, name -> separator): a setting's value is
# appended to what the thread flags or the user put there, never put in its place
TENSORFLOW_LISTS = {"XLA_FLAGS": " ", "TF_XLA_FLAGS": " "}
XLA_LISTS = {"XLA_FLAGS": " "}
THEANO_LISTS = {"THEANORC": os.pathsep}
