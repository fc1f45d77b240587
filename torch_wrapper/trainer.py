"""The objects algorithms/loop.py drives (to_batch, train_step, accumulate_step,
set_learning_rate, logits), one shape for every strategy.

Every strategy scales the loss the same way: the sum of its samples' losses
divided by the samples in the whole optimizer step (all replicas, all
accumulated batches). Gradients then only need summing, whether over
accumulated batches, micro-batches or replicas, and equal the gradient of the
global batch's mean loss, as on one device."""
from __future__ import annotations

import os
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from algorithms.parallel import split_ranges
from torch_wrapper.distributed import CommClock, global_rank, sum_gradients, sum_over
from torch_wrapper.pipeline import StageSchedule


class Trainer:
    """A subclass supplies `_forward_backward(images, labels, total, last)` ->
    tensor([loss sum, correct]) of its samples, and `logits(images)`."""

    def __init__(self, optimizer, device: torch.device, clock: CommClock, replica: int = 0, replicas: int = 1,
                 data_group=None, gradients_summed_in_backward: bool = False):
        self.optimizer, self.device, self.clock = optimizer, device, clock
        self.replica, self.replicas = replica, replicas
        self.metrics_group = data_group  # the replicas whose loss and accuracy make the step's, or None
        self.gradient_group = None if gradients_summed_in_backward else data_group

    def to_batch(self, images: np.ndarray, labels: np.ndarray):
        """This replica's rows of the shared global batch, and the global batch size."""
        start, stop = split_ranges(len(labels), self.replicas)[self.replica]
        return (torch.from_numpy(images[start:stop, None]).to(self.device),
                torch.from_numpy(labels[start:stop].astype(np.int64)).to(self.device), len(labels))

    def set_learning_rate(self, learning_rate: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    def train_step(self, batch):
        return self.accumulate_step([batch])

    def accumulate_step(self, batches: list):
        """One optimizer step over K batches: the gradient of the mean loss over
        all their samples, exactly one K x batch step."""
        total = sum(size for _, _, size in batches)
        self.optimizer.zero_grad(set_to_none=True)
        sums = torch.zeros(2, device=self.device)
        for index, (images, labels, _) in enumerate(batches):
            sums += self._forward_backward(images, labels, total, index == len(batches) - 1)
        self._exchange_gradients()
        self.optimizer.step()
        loss_sum, correct = sum_over(sums, self.metrics_group, self.clock).tolist()
        return loss_sum / total, correct / total, self.clock.take()

    def save_checkpoint(self, directory: str) -> None:
        """This process's weights, optimizer state and RNG, in torch's format; returns
        once every process of the run has written its file."""
        torch.save({"model": self._state_module().state_dict(), "optimizer": self.optimizer.state_dict(),
                    "rng": torch.get_rng_state()}, os.path.join(directory, f"torch-rank{global_rank()}.pt"))
        if dist.is_initialized():
            dist.barrier()

    def load_checkpoint(self, directory: str) -> None:
        path = os.path.join(directory, f"torch-rank{global_rank()}.pt")
        state = torch.load(path, map_location=self.device, weights_only=True)
        self._state_module().load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"].cpu())

    def _exchange_gradients(self) -> None:
        if self.gradient_group is not None:
            sum_gradients(self._parameters(), self.gradient_group, self.clock)

    def _parameters(self):
        return [p for group in self.optimizer.param_groups for p in group["params"]]


class ModuleTrainer(Trainer):
    """A model whose forward gives logits on this rank: one device, a DDP replica
    (`ddp`: DDP sums the gradients itself, during backward), an nn.DataParallel
    model, or a tensor-parallel model (gathers inside its forward)."""

    def __init__(self, model, optimizer, device, clock, replica=0, replicas=1, data_group=None, ddp=False):
        super().__init__(optimizer, device, clock, replica, replicas, data_group, gradients_summed_in_backward=ddp)
        self.model, self.ddp = model, ddp

    def _forward_backward(self, images, labels, total, last):
        self.model.train()
        # DDP: exchange gradients once, after the last accumulated batch
        with self.model.no_sync() if self.ddp and not last else nullcontext():
            logits = self.model(images)
            loss_sum = F.cross_entropy(logits, labels, reduction="sum")
            (loss_sum / total).backward()
        return torch.stack([loss_sum.detach(), (logits.argmax(1) == labels).sum().float()])

    def _state_module(self):
        return self.model.module if self.ddp or isinstance(self.model, torch.nn.DataParallel) else self.model

    @torch.no_grad()
    def logits(self, images: np.ndarray) -> np.ndarray:
        model = self.model.module if self.ddp else self.model
        model.eval()
        logits = model(torch.from_numpy(images[:, None]).to(self.device)).float().cpu().numpy()
        self.clock.take()  # evaluation traffic (tensor parallel's gathers) is not part of any training step
        return logits


class PipelineTrainer(Trainer):
    """One stage of a model- or pipeline-parallel replica (torch_wrapper/pipeline.py)."""

    def __init__(self, schedule: StageSchedule, classes: int, optimizer, device, clock, replica=0, replicas=1,
                 data_group=None):
        super().__init__(optimizer, device, clock, replica, replicas, data_group)
        self.schedule, self.classes = schedule, classes

    def _state_module(self):
        return self.schedule.stage

    def _forward_backward(self, images, labels, total, last):
        self.schedule.stage.train()
        return self.schedule.forward_backward(images, labels, total)

    @torch.no_grad()
    def logits(self, images: np.ndarray) -> np.ndarray:
        self.schedule.stage.eval()
        logits = self.schedule.logits(torch.from_numpy(images[:, None]).to(self.device), self.classes)
        self.clock.take()  # evaluation traffic is not part of any training step
        return logits.cpu().numpy()
