"""PyTorch: the spec as nn modules (NCHW), trained by a plain loop.
`model.py` translates the spec; `trainer.py` builds the trainer for the strategy;
`train.py` runs it through the shared loop in algorithms/loop.py. Parallel
strategies: `launch.py` (torchrun), `distributed.py` (process groups, collectives),
`tensor_parallel.py`, `pipeline.py` (model and pipeline)."""

from algorithms.contract import Support
from algorithms.errors import InputError


def supported() -> Support:
    """What this wrapper implements (read before the framework is imported)."""
    return Support(
        strategies=("single", "data", "model", "tensor", "pipeline", "hybrid"),
        flags=(
            "--lr_scaling linear",
            "--warmup_steps",
            "--reduce_lr_on_plateau",
            "--accumulate",
            "--checkpointing",
            "--dp_impl dataparallel",
            "--checkpoint_every",
            "--compile",
            "--noise_scale",
        ),
    )


def prepare_process(config, dataset) -> None:
    """--compile is the single-process model's torch.compile."""
    if config.compile and config.plan.strategy != "single":
        raise InputError(
            f"--compile with --strategy {config.strategy}: torch_script.py compiles the "
            "single-process model only; drop --compile"
        )
    if config.noise_scale and config.dp_impl == "dataparallel":
        raise InputError(
            "--noise_scale with --dp_impl dataparallel: torch_script.py measures it in "
            "DistributedDataParallel runs (one process per device); drop --dp_impl dataparallel"
        )


def launch(config, argv: list) -> None:
    """Starts torchrun for a multi-process strategy (see launch.py); returns in a worker."""
    from torch_wrapper.launch import launch as start

    start(config, argv)
