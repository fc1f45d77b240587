"""The benchmark's PyTorch side (algorithms/run/probe.py): a minimal native training
loop on the same model, weights, batches and dropout seed as torch_script.py, the
wrapper's own step as the harness, torch.mm for the GEMM peak and torch.compile."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from algorithms.network.dropout import uniforms
from algorithms.network.weights import initial_weights
from algorithms.run.timing import NativeLoop, compiled_pair_ms, hand_step_harness
from algorithms.session.run_session import RunSession
from algorithms.machine.tuning import tuned_options
from backends.torch_backend import device_memory_mb  # noqa: F401  (contract.NativeModule, shared with Keras)
from backends.torch_backend import profiled_ops, set_threads
from torch_wrapper.model import build_model, images_to_torch, make_optimizer, uniforms_to_torch
from torch_wrapper.train import describe_runtime
from torch_wrapper.trainer import COMPUTE_DTYPES, build_trainer

STEPS_PER_CALL = 1


def apply_threads(config) -> str:
    return set_threads(config.threads)


class Native(NativeLoop):
    """zero_grad, forward, mean cross-entropy, backward, step: nothing else per step. With
    --precision bf16 / fp16 the forward runs under torch.autocast, the loss in float32, and
    fp16 scales it (GradScaler), as the trainer does."""

    def __init__(self, config, dataset, schedule, compile_model: bool = False):
        self.model = build_model(config.network, initial_weights(config.network, config.seed)).train()
        self.optimizer = make_optimizer(config.optimizer, self.model.parameters())
        dtype = COMPUTE_DTYPES.get(config.precision)
        self.autocast = torch.autocast("cpu", dtype=dtype) if dtype else nullcontext()
        self.scaler = torch.amp.GradScaler("cpu") if config.precision == "fp16" else None
        mode = tuned_options(config).get("torch.compile")  # as the trainer compiles under --tuned
        self.forward = (
            torch.compile(self.model, mode=None if mode in (None, "default") else mode)
            if compile_model or mode
            else self.model
        )
        self.batches = {
            id(parts): (
                images_to_torch(config.network, dataset.train_x[parts[0]]),
                torch.from_numpy(dataset.train_y[parts[0]].astype(np.int64)),
                uniforms_to_torch(config.network, uniforms(config.network, config.seed, epoch, parts[0])),
            )
            for epoch, parts in schedule
        }
        self.losses: list = []  # loss tensors, read only after the timed steps

    def native_step(self, batch):
        images, labels, dropout_uniforms = batch
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast:
            logits = self.forward(images, dropout_uniforms)
        loss = F.cross_entropy(logits.float(), labels)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return loss.detach()


Harness = hand_step_harness(build_trainer)


def gemm(n: int, precision: str = "fp32"):
    """One n x n matmul through torch.mm, its operands in `precision`, as a call."""
    dtype = COMPUTE_DTYPES.get(precision, torch.float32)
    a, b = torch.rand(n, n, dtype=dtype), torch.rand(n, n, dtype=dtype)
    return lambda: torch.mm(a, b)


def compiled_ms(config, dataset, schedule, block: int) -> dict:
    """torch.compile beside eager: the native loop and torch_script.py --compile."""
    native = Native(config, dataset, schedule, compile_model=True)
    harness = Harness(replace(config, compile=True), RunSession(config, dataset, describe_runtime()))
    return compiled_pair_ms(native, harness, schedule, block, "torch.compile")


def profile_ops(config, dataset, schedule, warmup: int) -> tuple:
    """torch.profiler over the native loop: each aten op's self CPU time (the
    convolution kernels run inside their aten op), named with its input shapes."""
    native = Native(config, dataset, schedule)
    native.run(schedule[:warmup])
    return "torch.profiler (self CPU time)", profiled_ops(lambda: native.run(schedule[warmup:]))
