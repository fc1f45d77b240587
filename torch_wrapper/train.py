"""PyTorch training: the trainer for the run's strategy (trainer.py), driven by the
shared loop in algorithms/loop.py. Multi-process strategies run one process per
device under torchrun (torch_wrapper/launch.py starts it); rank 0 records the run."""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from algorithms.contract import Runtime
from algorithms.init import initial_weights
from algorithms.loop import train_by_hand
from torch_wrapper.distributed import global_rank, is_worker_process, leave_process_group, signal_of_any_rank
from torch_wrapper.model import build_model
from torch_wrapper.trainer import build_trainer


def describe_runtime():
    threads = f"{torch.get_num_threads()} thread{'s' if torch.get_num_threads() != 1 else ''}"
    if is_worker_process():
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        gpus = torch.cuda.is_available() and torch.cuda.device_count() >= local
        devices = (f"{world} processes under torchrun, " +
                   (f"one GPU each ({torch.cuda.get_device_name(0)}), nccl" if gpus else f"cpu, {threads} each, gloo"))
    elif torch.cuda.is_available():
        devices = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    else:
        devices = f"cpu ({threads})"
    return Runtime("torch", "torch", {"torch": torch.__version__, "numpy": np.__version__}, devices)


def records(config) -> bool:
    """Rank 0 records a multi-process run; the other ranks step through it silently."""
    return global_rank() == 0


def train(session):
    trainer = build_trainer(session.config)
    if dist.is_initialized():  # one process per device: a signal to any stops all after the same step
        session.signal_of_any_process = signal_of_any_rank(trainer.device)
    summary = train_by_hand(trainer, session)
    leave_process_group()
    return summary


@torch.no_grad()
def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """PyTorch's own cross-entropy and the logits of the shared initial weights, dropout off."""
    model = build_model(network, initial_weights(network, seed)).eval()
    logits = model(torch.from_numpy(images[:, None]))
    return float(F.cross_entropy(logits, torch.from_numpy(labels.astype(np.int64)))), logits.numpy()
