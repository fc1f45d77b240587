"""PyTorch: the spec as nn modules (NCHW), trained by a plain loop.
`model.py` translates the spec; `train.py` builds the trainer for the strategy
(`trainer.py`) and runs it through the shared loop in algorithms/loop.py.
Parallel strategies: `launch.py` (torchrun), `distributed.py` (process groups,
collectives), `tensor_parallel.py`, `pipeline.py` (model and pipeline)."""


def supported() -> dict:
    """What this wrapper implements (read before the framework is imported)."""
    return {"strategies": ("single", "data", "model", "tensor", "pipeline", "hybrid"),
            "flags": ("--lr_scaling linear", "--warmup_steps", "--reduce_lr_on_plateau", "--accumulate",
                      "--checkpointing", "--dp_impl dataparallel", "--checkpoint_every", "--compile")}


def launch(config, argv: list) -> None:
    """Starts torchrun for a multi-process strategy (see launch.py); returns in a worker."""
    if config.compile and config.plan.strategy != "single":
        from algorithms.errors import InputError

        raise InputError(f"--compile with --strategy {config.strategy}: torch_script.py compiles the "
                         "single-process model only; drop --compile")
    from torch_wrapper.launch import launch as start
    start(config, argv)
