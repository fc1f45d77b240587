"""PyTorch training: the trainer for the run's strategy (trainer.py), driven by the
shared loop in algorithms/run/loop.py. Multi-process strategies run one process per
device under torchrun (torch_wrapper/launcher.py starts it); rank 0 records the run."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from algorithms.contract.types import Device, Runtime
from algorithms.run.loop import train_by_hand
from backends.torch_backend import describe_device, library_versions, set_threads
from algorithms.errors import PeerLost
from torch_wrapper.distributed import (
    describe_devices,
    global_rank,
    leave_process_group,
    lost_peer,
    rank_device,
    signal_of_any_rank,
)
from torch_wrapper.trainer import build_trainer


def describe_runtime() -> Runtime:
    device = Device(*describe_device(rank_device()))  # rank 0's records: its own device
    versions = {"torch": torch.__version__, "numpy": np.__version__, **library_versions()}
    return Runtime("torch", "torch", versions, describe_devices(), device)


def records(config) -> bool:
    """Rank 0 records a multi-process run; the other ranks step through it silently."""
    return global_rank() == 0


def train(session):
    if session.config.strategy in ("async", "ps"):  # this process records; its children update
        return train_asynchronously(session)
    trainer = build_trainer(session.config)
    trainer.steps_per_epoch = session.steps_per_epoch  # where --fault momentum_reset and lr_late act
    session.execution_note, session.precision_note = describe_modes(session.config, trainer)
    if dist.is_initialized():  # one process per device: a signal to any stops all after the same step
        session.signal_of_any_process = signal_of_any_rank(trainer.device)
    try:
        summary = train_by_hand(trainer, session)
    except RuntimeError as error:  # a collective failed: name the host that was lost, in one line
        lost = lost_peer(error) if dist.is_initialized() else None
        if lost is None:
            raise
        raise PeerLost(lost) from error
    if session.config.part == "run":  # the epoch check's processes go on to the run in the same group
        leave_process_group()
    return summary


def train_asynchronously(session):
    from algorithms.run.updates import train_by_updates

    config = session.config
    set_threads(config.threads)  # this process scores the model between epochs, while the workers wait
    if config.strategy == "async":
        from torch_wrapper.asynchronous.hogwild import HogwildPool as Pool
    else:
        from torch_wrapper.asynchronous.param_server import ParameterServerPool as Pool
    pool = Pool(config, session.dataset)
    try:
        summary = train_by_updates(pool, session)
    except BaseException:  # a worker lost, a signal: end the others now
        pool.close(graceful=False)
        raise
    pool.close()
    return summary


def describe_modes(config, trainer) -> tuple:
    """(execution, precision) as the trainer runs them (as `config` asks), for results.log."""
    execution = (
        "compiled: torch.compile (Inductor) of the model; the first step compiles"
        if config.compile
        else "eager: every op dispatched from Python (PyTorch's default)"
    )
    precision = {
        "fp32": "fp32: float32 weights and compute",
        "bf16": "bf16: torch.autocast(bfloat16) forward, float32 master weights, float32 loss",
        "fp16": "fp16: torch.autocast(float16) forward, float32 master weights, float32 loss, "
        "torch.amp.GradScaler dynamic loss scale (the CSV's loss_scale column)",
    }[config.precision]
    return execution, precision
