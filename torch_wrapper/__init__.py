"""PyTorch: the spec as nn modules (NCHW), trained by a plain loop.
`model.py` translates the spec; `trainer.py` builds the trainer for the strategy;
`train.py` runs it through the shared loop in algorithms/run/loop.py. Parallel
strategies: `launch.py` (torchrun), `distributed.py` (process groups, collectives),
`tensor_parallel.py`, `pipeline.py` (model and pipeline); the asynchronous ones
(this process records, its children update) in `asynchronous/`: `hogwild.py` (async),
`param_server.py` (ps, over torch.distributed.rpc), both started by `workers.py`;
localsgd is a torchrun strategy in `trainer.py`; `gpu_check.py` is the GPU
check's torch side (`make gpu-check`)."""

# what the strategies whose workers step alone cannot combine with, and why
_NOT_WITH_WORKER_STRATEGIES = {
    "--accumulate": "each worker applies its own batch share as it is done",
    "--checkpointing": "it is not wired into the workers' models",
    "--checkpoint_every": "the workers' optimizer states are not saved",
    "--dp_impl dataparallel": "it is a data-parallel implementation",
    "--fault loss": "each worker's update takes its mean loss",
}

# network/variants.py: the known errors torch's one-device trainer puts in (trainer.py; the last four
# act past the drift envelope's horizon), so no other strategy takes them
TRAINER_FAULTS = (
    "eval_dropout",
    "momentum_reset",
    "lr_late",
    "accuracy_labels",
    "late_lr",
    "late_momentum",
    "skip",
    "maxnorm",
)

import os

from algorithms.config.run_config import TORCH_ONLY_FAULTS
from algorithms.contract.types import Support
from algorithms.contract.shared_support import LR_SCHEDULE_FLAGS, PRECISION_FLAGS
from algorithms.machine.resources import Footprint, Started
from algorithms.machine.tuning import Setting, Tuning
from backends.gpu_builds import torch_build
from backends.tuning import MEASURED, OMP_SPIN
from algorithms.errors import InputError
from algorithms.machine.devices import hide_gpus

TUNING_CANDIDATES = (
    OMP_SPIN,
    Setting("compile", options={"torch.compile": "default"}, why="torch.compile (Inductor), default mode"),
    Setting(
        "compile_max_autotune",
        options={"torch.compile": "max-autotune-no-cudagraphs"},
        why="torch.compile, Inductor benchmarking its kernel choices",
    ),
)


def started(config) -> Started:
    """What a run of `config` starts on this machine (launch.py, asynchronous/workers.py); nothing in
    a rank, whose launcher checked."""
    devices = config.devices
    if config.strategy == "single" or "WORLD_SIZE" in os.environ:
        return Started()
    if config.dp_impl == "dataparallel":
        return Started(processes=1, what=f"one process driving {devices} GPUs")
    if config.strategy == "async":
        return Started(processes=devices + 1, what=f"{devices} Hogwild workers and the process that records")
    if config.strategy == "ps":
        here = devices - config.remote_workers  # --remote_workers start on other hosts
        return Started(processes=here + 2, what=f"{here} workers, a parameter server and their coordinator")
    return Started(processes=devices + 1, data_copies=devices, what=f"{devices} torchrun ranks and their agent")


# measured (docs/parallel.md#memory-before-anything-starts); torch's devices are processes, none in-process
FOOTPRINT = Footprint(process_mb=355, sample_mb=0.70, device_mb=0, started=started, name="torch")


def supported() -> Support:
    """What this wrapper implements (read before the framework is imported)."""
    return Support(
        strategies=("single", "data", "model", "tensor", "pipeline", "hybrid", "ps", "async", "localsgd"),
        flags=LR_SCHEDULE_FLAGS
        + PRECISION_FLAGS
        + (
            "--accumulate",
            "--checkpointing",
            "--dp_impl dataparallel",
            "--ps_endpoint",
            "--checkpoint_every",
            "--compile",
            "--execution eager",
            "--noise_scale",
            *TORCH_ONLY_FAULTS,
            "--fault frozen",
            "--fault shape",
            "--fault bn_mean",
            "--fault bn_eval",
            "--fault same_side",
            "--device gpu",
        ),
        tuning=Tuning("torch", TUNING_CANDIDATES, measured=MEASURED),
        advice={
            "--execution graph": "PyTorch runs eager (its default) or compiled (torch.compile); "
            "pass --execution eager or compiled",
        },
        footprint=FOOTPRINT,
        gpu_build=torch_build,
    )


def prepare_process(config, dataset) -> None:
    """--compile is the single-process model's torch.compile; ps, async and localsgd
    refuse what their workers do not do."""
    if config.strategy in ("ps", "async", "localsgd"):
        used = {**config.uses(), "--checkpoint_every": bool(config.checkpoint_every or config.resume)}
        for flag, why in _NOT_WITH_WORKER_STRATEGIES.items():
            if used.get(flag):
                raise InputError(f"{flag} with --strategy {config.strategy}: not available ({why}); drop {flag}")
    if config.strategy in ("ps", "async"):  # CPU processes: shared memory (async), RPC tensors (ps)
        if config.device == "gpu":
            raise InputError(
                f"--device gpu with --strategy {config.strategy}: torch_script.py runs its workers as CPU "
                "processes; drop --device gpu (or use --strategy data or localsgd on GPUs)"
            )
        hide_gpus()  # the workers and the recording process train and record on the CPU
    if config.dp_impl == "dataparallel" and config.device == "cpu":
        raise InputError("--dp_impl dataparallel with --device cpu: nn.DataParallel drives GPUs; drop one of them")
    if config.ps_endpoint:  # the coordinator hosts the meeting's store: the endpoint must be here
        from torch_wrapper.nodes import check_endpoint_is_here

        check_endpoint_is_here(config.ps_endpoint)
    if config.fault and config.fault.kind in TRAINER_FAULTS and config.strategy != "single":
        raise InputError(
            f"--fault {config.fault.describe()} with --strategy {config.strategy}: torch puts this known error "
            "into its one-device trainer only; drop --strategy"
        )
    if config.compile and config.strategy != "single":
        raise InputError(
            f"--compile with --strategy {config.strategy}: torch_script.py compiles the "
            "single-process model only; drop --compile"
        )
    if config.noise_scale and config.dp_impl == "dataparallel":
        raise InputError(
            "--noise_scale with --dp_impl dataparallel: torch_script.py measures it in "
            "DistributedDataParallel runs (one process per device); drop --dp_impl dataparallel"
        )

    if config.precision != "fp32" and config.strategy not in ("single", "data"):
        raise InputError(
            f"--precision {config.precision} with --strategy {config.strategy}: torch_script.py runs "
            "mixed precision with --strategy single or data; drop --precision"
        )


def launch(config, argv: list) -> None:
    """Starts torchrun for a multi-process strategy (see launch.py); returns in a worker."""
    from torch_wrapper.launcher import launch as start

    start(config, argv)
