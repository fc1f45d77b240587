"""Lasagne on Theano (legacy environment, .venv-legacy): `model.py` translates the
spec to Lasagne layers (NCHW), `trainer.py` compiles Theano train and eval
functions, `train.py` runs them through the shared loop in algorithms/run/loop.py.
backends/theano_backend.py sets THEANO_FLAGS and bridges theano-pymc to Lasagne 0.1
(and Keras 2.3.1); it is imported before lasagne."""

from algorithms.contract.types import Support
from algorithms.contract.shared_support import graph_only_fp32_advice
from algorithms.machine.resources import Footprint, one_process
from algorithms.machine.tuning import Tuning
from backends import openblas
from backends.tuning import MEASURED, OPENBLAS_AVX512, THEANO_LISTS, THEANO_OPENMP
from algorithms.network.parallel import STRATEGIES, WORKER_STRATEGIES, worker_strategy_advice

# Theano compiles each function for one device, and Lasagne has no way to split a model or a batch
ONE_DEVICE = (
    "lasagne_script.py runs single only: Lasagne on Theano runs on one CPU device (Theano has no "
    "multi-device machinery); use torch_script.py or tensorflow_script.py for parallel strategies"
)

CPU_ONLY = (
    "lasagne_script.py runs on the CPU: theano-pymc in .venv-legacy is built without a GPU backend "
    "(--device auto puts it on the CPU); drop --device gpu"
)

GRAPH_ONLY_FP32 = graph_only_fp32_advice(
    "Lasagne on Theano", "Theano is graph-only (the whole step is built once, then run)"
)


# measured, one process (docs/own-network.md#memory-before-it-starts)
FOOTPRINT = Footprint(process_mb=151, sample_mb=0.69, device_mb=0, started=one_process, name="lasagne")


def supported() -> Support:
    """What this wrapper implements (read before the framework is imported)."""
    return Support(
        strategies=("single",),
        flags=("--checkpoint_every", "--execution graph", "--fault frozen"),
        footprint=FOOTPRINT,
        tuning=Tuning("lasagne", (THEANO_OPENMP, OPENBLAS_AVX512), measured=MEASURED, lists=THEANO_LISTS),
        thread_environment=openblas.environment,  # OpenBLAS's core for this CPU, before Theano loads it
        advice=GRAPH_ONLY_FP32
        | {"--device gpu": CPU_ONLY}
        | {strategy: ONE_DEVICE for strategy in STRATEGIES if strategy not in ("single", *WORKER_STRATEGIES)}
        | worker_strategy_advice(
            "Lasagne runs one compiled Theano train function in one process, with no distributed runtime"
        ),
    )


def prepare_process(config, dataset) -> None:
    """Nothing to set before Theano loads: algorithms/machine/threads.py sets its OpenMP/BLAS threads."""


def launch(config, argv: list) -> None:
    """One process: nothing to start."""
