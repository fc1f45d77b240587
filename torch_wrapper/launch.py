"""How a parallel PyTorch run becomes processes, decided before torch is imported
in the process the user started:

- not under torchrun, strategy other than single: this process re-executes itself
  as `python -m torch.distributed.run --standalone --nproc_per_node N <script> <flags>`
  (torchrun then starts N ranks of the same script, each one a worker);
- under torchrun (WORLD_SIZE set, e.g. a multi-node launch typed by the user):
  this process is a rank; the world size must be the plan's device count;
- --dp_impl dataparallel: one process driving N GPUs with nn.DataParallel."""

from __future__ import annotations

import os
import sys

from algorithms.errors import InputError


def launch(config, argv: list) -> None:
    plan = config.plan
    if "WORLD_SIZE" in os.environ:
        world = int(os.environ["WORLD_SIZE"])
        if world != plan.devices:
            raise InputError(
                f"--strategy {plan.strategy} --devices {plan.devices} needs {plan.devices} processes; "
                f"torchrun started {world} (set --nnodes x --nproc_per_node = {plan.devices})"
            )
        return
    if config.dp_impl == "dataparallel":
        import torch  # only now: the check needs CUDA's device count

        gpus = torch.cuda.device_count()
        if gpus < plan.devices:
            raise InputError(
                f"--dp_impl dataparallel needs {plan.devices} CUDA devices and this machine has {gpus}; "
                f"drop the flag to run DistributedDataParallel over {plan.devices} processes (gloo on CPU)"
            )
        return
    if plan.strategy == "ps":  # TensorPipe logs every peer's disconnect; the run names the one that died
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if plan.strategy in ("single", "async", "ps"):  # async, ps: this process starts its own (workers.py)
        return
    script = os.path.abspath(sys.argv[0])
    threads = max(1, (os.cpu_count() or 1) // plan.devices)  # the ranks share this machine's cores
    env = {"OMP_NUM_THREADS": str(threads), **os.environ}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={plan.devices}",
        script,
        *argv,
    ]
    if not config.quiet:
        print(
            f"launching {plan.devices} processes: torchrun --standalone --nproc_per_node={plan.devices} "
            f"{os.path.basename(script)} ...",
            flush=True,
        )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, command, env)
