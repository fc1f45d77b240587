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
            "--precision bf16",
            "--precision fp16",
            "--execution eager",
        ),
        advice={
            "--execution graph": "PyTorch runs eager (its default) or compiled (torch.compile); "
            "pass --execution eager or compiled",
        },
    )


def prepare_process(config, dataset) -> None:
    """--compile is the single-process model's torch.compile."""
    if config.compile and config.plan.strategy != "single":
        raise InputError(
            f"--compile with --strategy {config.strategy}: torch_script.py compiles the "
            "single-process model only; drop --compile"
        )

    if config.precision != "fp32" and config.plan.strategy not in ("single", "data"):
        raise InputError(
            f"--precision {config.precision} with --strategy {config.strategy}: torch_script.py runs "
            "mixed precision with --strategy single or data; drop --precision"
        )


def launch(config, argv: list) -> None:
    """Starts torchrun for a multi-process strategy (see launch.py); returns in a worker."""
    from torch_wrapper.launch import launch as start

    start(config, argv)
