"""How a parallel PyTorch run becomes processes, decided before torch is imported
in the process the user started:

- not under torchrun, strategy other than single: this process re-executes itself
  as `python -m torch_wrapper.agent --nnodes 1 --nproc_per_node N <script> <flags>`
  (torchrun then starts N ranks of the same script, each one a worker), every
  server of it on 127.0.0.1 (`LOOPBACK_TORCHRUN`);
- under torchrun (WORLD_SIZE set, e.g. a multi-node launch typed by the user):
  this process is a rank; the world size must be the plan's device count; a rank
  of a launch made here dies with torchrun's agent (`die_with_parent`), so none is
  left behind however the agent ends (agent.py: the agent itself, with its failure
  report cut to one line);
- --dp_impl dataparallel: one process driving N GPUs with nn.DataParallel;
- async, ps: this process starts its own workers (asynchronous/workers.py), not torchrun.

Nothing of a run it starts on one machine listens beyond loopback. `--standalone`
would have torchrun's agent host its rendezvous TCPStore on every interface for the
whole run (torch's TCPStore binds the wildcard address), and none of torch's servers
authenticates. So: the rendezvous is a FileStore (c10d backend, store_type=file), the
agent hosts no store for the ranks (TORCH_DISABLE_SHARE_RDZV_TCP_STORE), rank 0
hosts it on a socket bound to 127.0.0.1 (distributed.join_process_group), and gloo
(and nccl's bootstrap, on GPUs) binds the loopback interface."""

from __future__ import annotations

import os
import sys
import tempfile

from algorithms.errors import InputError
from algorithms.paths import REPO_ROOT
from algorithms.machine.resources import die_with_parent


LOOPBACK_ENVIRONMENT = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "GLOO_SOCKET_IFNAME": "lo"}
AGENT_PID_VARIABLE = "CNN_PARALLEL_TORCHRUN_AGENT"  # set for the ranks of a launch made here


def loopback_torchrun(rendezvous_file: str, processes: int) -> list:
    """torchrun's flags for one machine with nothing listening beyond 127.0.0.1."""
    return [
        "--nnodes=1",
        f"--nproc_per_node={processes}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={rendezvous_file}",
        "--rdzv_conf=store_type=file",
        "--local_addr=127.0.0.1",
    ]


def launch(config, argv: list) -> None:
    if "WORLD_SIZE" in os.environ:
        if AGENT_PID_VARIABLE in os.environ:
            die_with_parent(int(os.environ.pop(AGENT_PID_VARIABLE)))
        world = int(os.environ["WORLD_SIZE"])
        if world != config.devices:
            raise InputError(
                f"--strategy {config.strategy} --devices {config.devices} needs {config.devices} processes; "
                f"torchrun started {world} (set --nnodes x --nproc_per_node = {config.devices})"
            )
        return
    if config.dp_impl == "dataparallel":
        import torch  # only now: the check needs CUDA's device count

        gpus = torch.cuda.device_count()
        if gpus < config.devices:
            raise InputError(
                f"--dp_impl dataparallel needs {config.devices} CUDA devices and this machine has {gpus}; "
                f"drop the flag to run DistributedDataParallel over {config.devices} processes (gloo on CPU)"
            )
        return
    if config.strategy == "ps":  # TensorPipe logs every peer's disconnect; the run names the one that died
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    if config.strategy in ("single", "async", "ps"):  # async, ps: this process starts its own (asynchronous/)
        return
    script = os.path.abspath(sys.argv[0])
    threads = max(1, (os.cpu_count() or 1) // config.devices)  # the ranks share this machine's cores
    # nccl's bootstrap sockets on GPUs: loopback too, unless the user named an interface
    env = {"OMP_NUM_THREADS": str(threads), "NCCL_SOCKET_IFNAME": "lo", **os.environ, **LOOPBACK_ENVIRONMENT}
    env[AGENT_PID_VARIABLE] = str(os.getpid())  # execve keeps the pid: this process becomes the agent
    # `-m torch_wrapper.agent` from the user's folder (the ranks' relative paths are read from there)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (REPO_ROOT, os.environ.get("PYTHONPATH"))))
    # a fresh file per run (a stale one would hold an old rendezvous), left in the temporary folder
    rendezvous = os.path.join(tempfile.mkdtemp(prefix="cnn-parallel-rendezvous-"), "store")
    command = [
        sys.executable,
        "-m",
        "torch_wrapper.agent",
        *loopback_torchrun(rendezvous, config.devices),
        script,
        *argv,
    ]
    if not config.quiet:
        print(
            f"launching {config.devices} processes: torchrun --nnodes=1 --nproc_per_node={config.devices} "
            f"(on 127.0.0.1) {os.path.basename(script)} ...",
            flush=True,
        )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, command, env)
