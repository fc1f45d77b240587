"""PyTorch training: the trainer for the run's strategy, driven by the shared loop
in algorithms/loop.py. Multi-process strategies run one process per device under
torchrun (torch_wrapper/launch.py starts it); rank 0 records the run."""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from algorithms.init import initial_weights
from algorithms.loop import train_by_hand
from algorithms.parallel import layer_stages
from torch_wrapper.distributed import (CommClock, global_rank, is_worker_process, join_process_group,
                                       leave_process_group, make_layout, signal_of_any_rank,
                                       timed_sum_hook)
from torch_wrapper.model import Checkpointed, build_blocks, build_model, build_stage, make_optimizer
from torch_wrapper.pipeline import StageSchedule, channels_first
from torch_wrapper.tensor_parallel import build_tensor_parallel
from torch_wrapper.trainer import ModuleTrainer, PipelineTrainer


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
    return "torch", "torch", {"torch": torch.__version__, "numpy": np.__version__}, devices


def is_chief() -> bool:
    return global_rank() == 0


def whole_model_blocks(network, checkpointing: bool) -> tuple:
    """Checkpointing recomputes the conv block and the dense block separately."""
    return layer_stages(network, 2) if checkpointing else ((0, len(network.layers)),)


def apply_threads(threads: int) -> None:
    """--threads: intra-op threads, and inter-op where torch still allows setting them."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # only settable before the first parallel op of the process
        pass


def build_trainer(config):
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) if is_worker_process() else 1
    apply_threads(max(1, config.threads // local_ranks))  # the ranks on this machine share its cores
    trainer = _build_trainer(config)
    # dropout masks: seeded after every module is built (building draws from the
    # RNG, and a shard draws less than the whole layer), so ranks of one replica, a
    # stage and the one-device model all draw the same masks for the same batch
    torch.manual_seed(config.seed + trainer.replica)
    return trainer


def _build_trainer(config):
    network, plan, seed = config.network, config.plan, config.seed
    weights = initial_weights(network, seed)
    blocks = whole_model_blocks(network, config.checkpointing)
    if plan.strategy == "single" or config.dp_impl == "dataparallel":
        device = torch.device("cuda" if plan.strategy != "single" else "cpu")
        model = build_blocks(network, weights, blocks, config.checkpointing).to(device)
        if config.compile:  # --compile: torch.compile (Inductor); the first step compiles
            model = torch.compile(model)
        if plan.strategy != "single":  # one process driving every GPU (launch.py checked they exist)
            model = nn.DataParallel(model, device_ids=list(range(plan.devices)))
        return ModuleTrainer(model, make_optimizer(config.optimizer, model.parameters()), device, CommClock(False))

    device = join_process_group()
    clock = CommClock(measures=device.type == "cpu")  # nccl calls return before the transfer ends
    layout = make_layout(plan.replicas, plan.group)
    inner = plan.inner or plan.strategy
    replica = dict(replica=layout.replica, replicas=layout.replicas, data_group=layout.data_group)
    if inner == "data":
        model = build_blocks(network, weights, blocks, config.checkpointing).to(device)
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                        process_group=layout.data_group)
        if device.type == "cpu":
            model.register_comm_hook((clock, layout.data_group), timed_sum_hook)
        else:  # nccl: sum (not DDP's default mean): the loss is already scaled by 1 / global batch
            model.register_comm_hook(layout.data_group, _nccl_sum_hook)
        optimizer = make_optimizer(config.optimizer, model.parameters())
        return ModuleTrainer(model, optimizer, device, clock, **replica, ddp=True)
    if inner == "tensor":
        model = build_tensor_parallel(network, weights, plan.shards, layout, clock, config.checkpointing).to(device)
        return ModuleTrainer(model, make_optimizer(config.optimizer, model.parameters()), device, clock, **replica)
    start, stop = plan.stages[layout.position]
    stage = build_stage(network, weights, start, stop).to(device)
    stage = Checkpointed(stage) if config.checkpointing else stage
    boundaries = [channels_first(network.input_shapes()[first]) for first, _ in plan.stages]
    schedule = StageSchedule(stage, layout, boundaries, plan.micro_batches, device, clock)
    optimizer = make_optimizer(config.optimizer, stage.parameters())
    return PipelineTrainer(schedule, network.num_classes, optimizer, device, clock, **replica)


def _nccl_sum_hook(group, bucket):
    return dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future().then(lambda f: f.value()[0])


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
