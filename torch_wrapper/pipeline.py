"""Model and pipeline parallelism: the layer ranges of `plan.stages`, one per
rank of a replica, joined by explicit point-to-point transfers (send/recv of
activations forward, of their gradients backward).

The schedule is GPipe's: every micro-batch forward through all stages, then
every micro-batch backward, gradients summed over the micro-batches before the
one optimizer step. Model parallelism is the same with one micro-batch (the
conv block on one device, the dense block on the next, each idle while the
other works). The loss is scaled by 1 / (samples in the optimizer step), so the
summed gradients are the whole batch's mean, as on one device."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from algorithms.network.parallel import split_sizes
from algorithms.session.clock import CommClock
from torch_wrapper.distributed import Layout


def channels_first(shape: tuple) -> tuple:
    return (shape[2], shape[0], shape[1]) if len(shape) == 3 else tuple(shape)


class StageSchedule:
    """This rank's stage and its neighbours. `boundary_shapes[k]` is the shape of
    one sample entering stage k (channels first)."""

    def __init__(
        self,
        stage: torch.nn.Module,
        layout: Layout,
        boundary_shapes: list,
        micro_batches: int,
        device: torch.device,
        clock: CommClock,
    ):
        self.stage, self.layout, self.device, self.clock = stage, layout, device, clock
        self.position, self.count = layout.position, layout.group_size
        self.in_shape = boundary_shapes[self.position]
        self.micro_batches = micro_batches
        self.first, self.last = self.position == 0, self.position == self.count - 1
        self.previous = layout.inner_ranks[self.position - 1] if not self.first else None
        self.next = layout.inner_ranks[self.position + 1] if not self.last else None
        self.last_rank = layout.inner_ranks[-1]

    # ------------------------------------------------------------------ transfers
    def _send(self, tensor: torch.Tensor, rank: int) -> None:
        with self.clock.timing():
            dist.send(tensor.contiguous(), rank, group=self.layout.inner_group)

    def _recv(self, shape: tuple, rank: int) -> torch.Tensor:
        buffer = torch.empty(shape, device=self.device)
        with self.clock.timing():
            dist.recv(buffer, rank, group=self.layout.inner_group)
        return buffer

    def _input(self, images: torch.Tensor, rows: int) -> torch.Tensor:
        if self.first:
            return images
        return self._recv((rows, *self.in_shape), self.previous).requires_grad_(True)

    # ------------------------------------------------------------------ training
    def forward_backward(self, images: torch.Tensor, labels: torch.Tensor, uniforms: tuple, total: int) -> torch.Tensor:
        """One batch through the pipeline, gradients accumulated into the stage's
        parameters (each micro-batch's dropout from its rows' uniforms); returns (loss sum,
        correct) of the batch on every rank of the replica."""
        sizes = split_sizes(len(labels), min(self.micro_batches, len(labels)))
        starts = [sum(sizes[:m]) for m in range(len(sizes))]
        kept, sums = [], torch.zeros(2, device=self.device)
        for start, size in zip(starts, sizes):
            inputs = self._input(images[start : start + size], size)
            outputs = self.stage(inputs, tuple(u[start : start + size] for u in uniforms))
            if self.last:
                target = labels[start : start + size]
                loss_sum = F.cross_entropy(outputs, target, reduction="sum")
                sums += torch.stack([loss_sum.detach(), (outputs.argmax(1) == target).sum().float()])
                kept.append((inputs, loss_sum / total))
            else:
                self._send(outputs.detach(), self.next)
                kept.append((inputs, outputs))
        for inputs, outputs in reversed(kept):
            if self.last:
                outputs.backward()
            else:
                outputs.backward(self._recv(tuple(outputs.shape), self.next))
            if not self.first:
                self._send(inputs.grad, self.previous)
        with self.clock.timing():
            dist.broadcast(sums, self.last_rank, group=self.layout.inner_group)
        return sums

    @torch.no_grad()
    def logits(self, images: torch.Tensor, classes: int) -> torch.Tensor:
        """The whole batch forward (no micro-batches), logits shared with every stage."""
        rows = len(images)
        outputs = self.stage(self._input(images, rows))
        if not self.last:
            self._send(outputs, self.next)
            outputs = torch.empty((rows, classes), device=self.device)
        with self.clock.timing():
            dist.broadcast(outputs, self.last_rank, group=self.layout.inner_group)
        return outputs
