"""The benchmark's PyTorch side (algorithms/probe.py): a minimal native training
loop on the same model, weights, batches and dropout seed as torch_script.py, the
wrapper's own step as the harness, torch.mm for the GEMM peak and torch.compile."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F

from algorithms.init import initial_weights
from algorithms.probe import HandStepHarness, compiled_pair_ms, scratch_session, shape_text
from torch_wrapper.model import build_model, make_optimizer
from torch_wrapper.train import apply_threads as set_torch_threads
from torch_wrapper.train import build_trainer, describe_runtime


def apply_threads(config) -> str:
    set_torch_threads(config.threads)
    return f"torch.set_num_threads({torch.get_num_threads()}), interop {torch.get_num_interop_threads()}"


def make_session(config, dataset):
    return scratch_session(config, dataset, *describe_runtime())


class Native:
    """zero_grad, forward, mean cross-entropy, backward, step: nothing else per step."""

    def __init__(self, config, dataset, schedule, compile_model: bool = False):
        self.model = build_model(config.network, initial_weights(config.network, config.seed))
        self.optimizer = make_optimizer(config.optimizer, self.model.parameters())
        torch.manual_seed(config.seed)  # the dropout masks the wrapper draws (torch_wrapper/train.py)
        self.forward = torch.compile(self.model) if compile_model else self.model
        self.batches = {id(parts): (torch.from_numpy(dataset.train_x[parts[0]][:, None]),
                                    torch.from_numpy(dataset.train_y[parts[0]].astype(np.int64)))
                        for _, parts in schedule}
        self.losses: list = []  # loss tensors, read only after the timed steps

    def run(self, steps: list) -> list:
        times = []
        self.model.train()
        for _, parts in steps:
            images, labels = self.batches[id(parts)]
            start = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.forward(images), labels)
            loss.backward()
            self.optimizer.step()
            times.append((time.perf_counter() - start) * 1000.0)
            self.losses.append(loss.detach())
        return times


class Harness(HandStepHarness):
    def __init__(self, config, session):
        super().__init__(build_trainer(config), session)


def gemm(n: int):
    """One n x n fp32 matmul through torch's BLAS, as a call."""
    a, b = torch.rand(n, n), torch.rand(n, n)
    return lambda: torch.mm(a, b)


def compiled_ms(config, dataset, schedule, block: int) -> dict:
    """torch.compile beside eager: the native loop and torch_script.py --compile."""
    native = Native(config, dataset, schedule, compile_model=True)
    harness = Harness(replace(config, compile=True), make_session(config, dataset))
    return compiled_pair_ms(native, harness, schedule, block, "torch.compile")


def profile_ops(config, dataset, schedule, warmup: int) -> tuple:
    """torch.profiler over the native loop: each aten op's self CPU time (the
    convolution kernels run inside their aten op), named with its input shapes."""
    native = Native(config, dataset, schedule)
    native.run(schedule[:warmup])
    return "torch.profiler (self CPU time)", profiled_ops(lambda: native.run(schedule[warmup:]))


def profiled_ops(run) -> list:
    """[(aten op and input shapes, self CPU ms)] of everything `run()` does (keras_wrapper's
    torch backend is profiled through this too)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        run()
    return [(f"{event.key} {shape_text(event.input_shapes)}", event.self_cpu_time_total / 1000.0)
            for event in profiler.key_averages(group_by_input_shape=True) if event.self_cpu_time_total > 0]
