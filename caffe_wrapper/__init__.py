"""Caffe: the spec as prototxt (a NetParameter for training, one for deployment,
a SolverParameter), trained by Caffe's own solver over the shared batch order.
`build_caffe.sh` builds real pycaffe from the PyPI sdist (`make caffe`);
`model.py` translates the spec; `trainer.py` drives the solver; `train.py` runs it
through algorithms/run/loop.py."""

import os

# glog's INFO records (every layer's setup, the solver definition) off before pycaffe loads; its warnings stay
os.environ.setdefault("GLOG_minloglevel", "1")

from algorithms.contract.types import Support
from algorithms.contract.shared_support import graph_only_fp32_advice
from algorithms.machine.resources import Footprint, one_process
from algorithms.machine.tuning import Setting, Tuning
from backends import openblas
from backends.tuning import MEASURED, OPENBLAS_AVX512
from algorithms.network.parallel import STRATEGIES, WORKER_STRATEGIES, worker_strategy_advice

# Caffe 1.0's only parallelism is multi-GPU data parallel (P2PSync), and this build is CPU_ONLY
ONE_DEVICE = (
    "caffe_script.py runs single only: this Caffe is a CPU_ONLY build, one device (Caffe's only parallelism "
    "is multi-GPU data parallel); use torch_script.py or tensorflow_script.py for parallel strategies"
)

CPU_ONLY = (
    "caffe_script.py runs on the CPU: this Caffe is a CPU_ONLY build (caffe_wrapper/build_caffe.sh; "
    "--device auto puts it on the CPU); drop --device gpu"
)

GRAPH_ONLY_FP32 = graph_only_fp32_advice("Caffe", "Caffe is graph-only (the whole step is built once, then run)")

BLAS_ONE_THREAD = Setting(
    "blas_1_thread",
    {"OPENBLAS_NUM_THREADS": "1"},
    why="OpenBLAS on one thread: the convolution's batch loop already runs on the OpenMP threads "
    "(caffe_wrapper/patches/conv-openmp-batch-loop.patch), so only the inner products' GEMMs lose it",
)


# measured, one process (docs/own-network.md#memory-before-it-starts)
FOOTPRINT = Footprint(process_mb=97, sample_mb=0.95, device_mb=0, started=one_process, name="caffe")


def supported() -> Support:
    """What this wrapper implements (read before the framework is imported)."""
    return Support(
        strategies=("single",),
        flags=("--checkpoint_every", "--execution graph", "--fault frozen"),
        footprint=FOOTPRINT,
        tuning=Tuning("caffe", (BLAS_ONE_THREAD, OPENBLAS_AVX512), measured=MEASURED),
        thread_environment=openblas.environment,  # OpenBLAS's core for this CPU, before Caffe loads it
        advice=GRAPH_ONLY_FP32
        | {"--device gpu": CPU_ONLY}
        | {strategy: ONE_DEVICE for strategy in STRATEGIES if strategy not in ("single", *WORKER_STRATEGIES)}
        | worker_strategy_advice(
            "Caffe 1.0's solver steps one process (its multi-GPU sync is synchronous), "
            "with no parameter server or model averaging"
        ),
    )


def prepare_process(config, dataset) -> None:
    """Nothing to set before Caffe loads: algorithms/machine/threads.py sets its OpenBLAS threads."""


def launch(config, argv: list) -> None:
    """One process: nothing to start."""
