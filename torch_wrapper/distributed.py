"""torch.distributed plumbing every multi-process strategy shares: joining the
process group (gloo on CPU, nccl when each local rank has its own GPU), the
replica x position layout of the ranks with their subgroups, and the collectives the
strategies are built from, each timed by the step's CommClock (algorithms/session/clock.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from algorithms.session.clock import CommClock
from backends.torch_backend import run_device
from torch_wrapper.nodes import bound_store

# A peer that died leaves the others blocked in a collective: gloo gives up after
# this, so a killed worker ends the run with an error instead of a hang (torchrun
# usually notices the dead process sooner and stops the rest itself).
COLLECTIVE_TIMEOUT_S = 30


# gloo's transport names the peer whose socket failed: "Read error [10.77.0.2]:3234: Connection
# reset by peer", "Connection closed by peer [10.77.0.2]:3234"; a peer whose link went down
# leaves "Timed out waiting 30000ms for recv operation to complete" instead.
_GLOO_PEER = re.compile(r"(?:(Read error|Write error) )?\[([^\]]+)\]:(\d+)(?:: ([^.]+))?")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d+)ms for (\w+) operation")


def lost_peer(error: BaseException) -> Optional[str]:
    """One line naming the host this rank lost, when a collective failed because a
    peer died or went silent (gloo's error), else None."""
    text = str(error)
    if "gloo" not in text.lower():
        return None
    rank = global_rank()
    timeout = _GLOO_TIMEOUT.search(text)
    if timeout:
        waited_s = int(timeout.group(1)) / 1000
        return (
            f"rank {rank} lost a peer: no {timeout.group(2)} from it for {waited_s:.0f} s (its host or link is down; "
            f"gloo: {timeout.group(0)})"
        )
    peer = _GLOO_PEER.search(text)
    if peer is None:
        return None
    closed = "Connection closed by peer" if "Connection closed by peer" in text else None
    how = "; ".join(part for part in (peer.group(1), peer.group(4), closed) if part)
    return f"rank {rank} lost its peer at host {peer.group(2)} (port {peer.group(3)}; gloo: {how})"


def is_worker_process() -> bool:
    """True under torchrun (or any launcher that sets the torch.distributed env)."""
    return "WORLD_SIZE" in os.environ


def global_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def rank_device() -> torch.device:
    """This process's device: under torchrun, its own GPU where every local rank has one
    (none under --device cpu, which hides them: algorithms/machine/devices.py), else the
    CPU; one process alone, the first GPU torch sees, else the CPU."""
    if not is_worker_process():
        return run_device()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def join_process_group() -> torch.device:
    """Joins the default group from torchrun's environment; returns this rank's device."""
    device = rank_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        timeout = timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        store = _loopback_store(timeout)
        if store is None:  # torchrun's agent store, or a store on another machine's address
            dist.init_process_group(backend, timeout=timeout)
        else:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    return device


def _loopback_store(timeout: timedelta):
    """The ranks' TCPStore when torchrun leaves it to them on 127.0.0.1 (launch.py's
    one-machine launch): rank 0 hosts it on a socket bound to loopback (TCPStore
    itself would bind every interface), the others connect. None otherwise."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or os.environ.get("MASTER_ADDR") != "127.0.0.1":
        return None
    port, world = int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"])
    if int(os.environ["RANK"]) != 0:
        return dist.TCPStore("127.0.0.1", port, world, False, timeout=timeout)
    return bound_store("127.0.0.1", port, timeout)


def signal_of_any_rank(device: torch.device):
    """For `session.signal_of_any_process`: every rank passes the signal it received
    (0: none) and gets the highest any rank received, so all stop after the same
    step. One 1-element all-reduce a step, after the step's timing ends."""

    def agree(signum: int) -> int:
        vote = torch.tensor([signum], dtype=torch.int32, device=device)
        dist.all_reduce(vote, op=dist.ReduceOp.MAX)
        return int(vote.item())

    return agree


def leave_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


@dataclass
class Layout:
    """Where this rank sits: replica `replica` of `replicas` (data parallel), and
    `position` of `group_size` inside it (model / tensor / pipeline). Global rank
    = replica x group_size + position."""

    replica: int
    replicas: int
    position: int
    group_size: int
    inner_ranks: list  # global ranks of this replica, by position
    inner_group: Optional[object]  # process group of this replica's ranks (None: one rank)
    data_group: Optional[object]  # process group of this position across replicas (None: one replica)


def make_layout(replicas: int, group_size: int) -> Layout:
    """Creates every subgroup (each rank must create all of them, in the same order)."""
    world = dist.get_world_size()
    if world != replicas * group_size:
        raise RuntimeError(f"{world} processes for {replicas} replicas x {group_size} devices")
    rank = dist.get_rank()
    replica, position = divmod(rank, group_size)
    inner_group = data_group = None
    # new_group's own default is 30 minutes (gloo), not the default group's: a peer whose link
    # went down (no reset reaches us) would block a subgroup's collective that long
    timeout = timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    for r in range(replicas):
        ranks = [r * group_size + p for p in range(group_size)]
        group = dist.new_group(ranks, timeout=timeout) if group_size > 1 else None
        if r == replica:
            inner_group, inner_ranks = group, ranks
    for p in range(group_size):
        group = dist.new_group([r * group_size + p for r in range(replicas)], timeout=timeout) if replicas > 1 else None
        if p == position:
            data_group = group
    return Layout(replica, replicas, position, group_size, inner_ranks, inner_group, data_group)


class _GatherShards(torch.autograd.Function):
    """All-gather of per-rank slices along `dim` (sizes may differ by one). The
    code after the gather runs identically on every rank, so each rank already
    holds the whole gradient of the gathered tensor: backward keeps its own slice."""

    @staticmethod
    def forward(ctx, shard, dim, sizes, group, clock):
        index = dist.get_rank(group)
        ctx.dim, ctx.start, ctx.size = dim, sum(sizes[:index]), sizes[index]
        widest = max(sizes)
        if shard.shape[dim] < widest:  # all_gather needs equal shapes: pad, then cut
            pad_shape = list(shard.shape)
            pad_shape[dim] = widest - shard.shape[dim]
            shard = torch.cat([shard, shard.new_zeros(pad_shape)], dim)
        pieces = [torch.empty_like(shard) for _ in sizes]
        with clock.timing():
            dist.all_gather(pieces, shard.contiguous(), group=group)
        return torch.cat([piece.narrow(dim, 0, size) for piece, size in zip(pieces, sizes)], dim)

    @staticmethod
    def backward(ctx, grad):
        return grad.narrow(ctx.dim, ctx.start, ctx.size).contiguous(), None, None, None, None


class _SumGradientsOfReplicatedInput(torch.autograd.Function):
    """Identity forward. The input of a sharded layer is the same on every rank,
    but each rank's slice of the layer sends back only its own channels' part of
    the input's gradient: backward sums the parts (Megatron's `f`)."""

    @staticmethod
    def forward(ctx, inputs, group, clock):
        ctx.group, ctx.clock = group, clock
        return inputs.view_as(inputs)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        with ctx.clock.timing():
            dist.all_reduce(grad, group=ctx.group)
        return grad, None, None


def replicated_input(inputs: torch.Tensor, group, clock: CommClock) -> torch.Tensor:
    if not inputs.requires_grad:  # the images: no gradient to sum
        return inputs
    return _SumGradientsOfReplicatedInput.apply(inputs, group, clock)


def gather_shards(shard: torch.Tensor, dim: int, sizes: list, group, clock: CommClock) -> torch.Tensor:
    return _GatherShards.apply(shard, dim, sizes, group, clock)


def sum_gradients(parameters, group, clock: CommClock) -> None:
    """Sums every parameter's gradient over `group` in one flat all-reduce."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    with clock.timing():
        dist.all_reduce(flat, group=group)
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def sum_over(values: torch.Tensor, group, clock: CommClock) -> torch.Tensor:
    if group is not None:
        with clock.timing():
            dist.all_reduce(values, group=group)
    return values


def timed_sum_hook(state, bucket):
    """DDP communication hook: sums a gradient bucket over the replicas (the loss
    is already scaled by 1 / global batch, so the sum is the global mean's
    gradient), blocking, so the clock sees the whole transfer."""
    clock, group = state
    buffer = bucket.buffer()
    with clock.timing():
        dist.all_reduce(buffer, group=group)
    future = torch.futures.Future()
    future.set_result(buffer)
    return future


class GradientNormTotals:
    """--noise_scale: the squared norm of this replica's gradient before DDP's
    all-reduce and of the summed gradient after it, added up over the step's buckets
    (float64 tensors on the device, read once a step)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.before, self.after = self._zeros(), self._zeros()

    def _zeros(self) -> torch.Tensor:
        return torch.zeros(1, dtype=torch.float64, device=self.device)

    def add_after(self, value):
        tensor = value[0] if isinstance(value, list) else value
        self.after += tensor.double().square().sum()
        return tensor

    def take(self) -> tuple:
        taken = self.before, self.after
        self.before, self.after = self._zeros(), self._zeros()
        return taken


def with_gradient_norms(hook):
    """A DDP communication hook that runs `hook` (state, bucket) and adds the bucket's
    squared norm to the GradientNormTotals before the all-reduce and after it."""

    def norms_hook(state, bucket):
        inner_state, totals = state
        totals.before += bucket.buffer().double().square().sum()
        return hook(inner_state, bucket).then(lambda future: totals.add_after(future.value()))

    return norms_hook


def describe_devices() -> str:
    """The devices line of results.log: torchrun's processes and their devices, or this process's."""
    threads = f"{torch.get_num_threads()} thread{'s' if torch.get_num_threads() != 1 else ''}"
    if is_worker_process():
        world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        gpus = torch.cuda.is_available() and torch.cuda.device_count() >= local
        return f"{world} processes under torchrun, " + (
            f"one GPU each ({torch.cuda.get_device_name(0)}), nccl" if gpus else f"cpu, {threads} each, gloo"
        )
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"cpu ({threads})"
