"""--strategy async: Hogwild (Recht et al. 2011), as pytorch/examples mnist_hogwild
runs it: one model whose parameters live in shared memory (`share_memory()`), N
processes (torch.multiprocessing) each with its own optimizer, reading and writing
those parameters without any lock, in whatever order the scheduler runs them.

This process records: it holds the shared model (and scores it between epochs, when
the workers wait), hands each worker its share of the batches and writes a row per
applied update. A counter in shared memory numbers the updates, so each worker
knows how many others landed between its read (the forward pass's start) and its
own apply: the row's staleness."""

from __future__ import annotations

import queue
import time

import numpy as np
import torch
import torch.nn.functional as F

from algorithms.network.dropout import channels_first
from algorithms.network.weights import initial_weights
from algorithms.contract.types import Update
from backends.torch_backend import set_threads
from torch_wrapper.model import build_blocks, images_to_torch, make_optimizer
from algorithms.machine.processes import ChildWorkers, ignore_interrupts
from torch_wrapper.asynchronous.workers import CONTEXT, child_processes


class HogwildPool(ChildWorkers):
    """The algorithms.contract.types.UpdatePool of a Hogwild run."""

    def __init__(self, config, dataset):
        self.slots = self.parts = workers = config.plan.replicas
        self.network = network = config.network
        self.model = build_blocks(network, initial_weights(network, config.seed), ((0, len(network.layers)),), False)
        self.model.share_memory()
        images = images_to_torch(network, dataset.train_x).share_memory_()
        labels = torch.from_numpy(dataset.train_y.astype(np.int64)).share_memory_()
        self.processes = child_processes()
        # applied updates; its lock guards the count only, never the weights (kept: the children unpickle it)
        self.version = version = CONTEXT.Value("q", 0)
        self.results = CONTEXT.Queue()
        self.jobs = [CONTEXT.SimpleQueue() for _ in range(workers)]
        threads = max(1, config.threads // workers)  # the workers share this machine's cores
        for worker in range(workers):
            self.processes.start(
                f"Hogwild worker {worker}",
                work,
                worker,
                self.model,
                version,
                self.jobs[worker],
                self.results,
                images,
                labels,
                config.optimizer,
                config.seed,
                threads,
            )

    def submit(self, slot: int, indices: np.ndarray, learning_rate: float, uniforms: tuple) -> None:
        # numpy, pickled by value: a torch tensor would cross by torch's fd passing, through this
        # process's multiprocessing resource sharer, whose thread prints a traceback when a worker
        # dies between asking for the descriptor and taking it (and it costs a round trip a step)
        drawn = channels_first(self.network, uniforms)  # contiguous float32 arrays already
        self.jobs[slot].put((np.asarray(indices, dtype=np.int64), learning_rate, drawn))

    def result(self, timeout_s: float):
        try:
            return self.results.get(timeout=timeout_s)
        except queue.Empty:
            return None

    @torch.no_grad()
    def logits(self, images: np.ndarray) -> np.ndarray:
        self.model.eval()
        return self.model(images_to_torch(self.network, images)).numpy()

    def close(self, graceful: bool = True) -> None:
        if graceful:
            for jobs in self.jobs:
                jobs.put(None)
            self.processes.wait()
        self.processes.end()


def work(worker, model, version, jobs, results, images, labels, optimizer_spec, seed, threads) -> None:
    """One Hogwild process: steps the shared model on each share it is handed."""
    ignore_interrupts()
    set_threads(threads)
    optimizer = make_optimizer(optimizer_spec, model.parameters())
    model.train()
    while (job := jobs.get()) is not None:
        rows, learning_rate, drawn = job
        indices, uniforms = torch.from_numpy(rows), tuple(torch.from_numpy(u) for u in drawn)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate
        start = time.perf_counter()
        batch, target = images[indices], labels[indices]
        ready = time.perf_counter()
        read = version.value
        optimizer.zero_grad(set_to_none=True)
        logits = model(batch, uniforms)
        loss_sum = F.cross_entropy(logits, target, reduction="sum")
        (loss_sum / len(target)).backward()
        optimizer.step()  # writes the shared parameters in place, unlocked
        with version.get_lock():
            version.value += 1
            applied = version.value
        done = time.perf_counter()
        results.put(
            Update(
                worker=worker,
                loss=loss_sum.item() / len(target),
                accuracy=(logits.argmax(1) == target).sum().item() / len(target),
                step_time_ms=(done - ready) * 1000.0,
                data_time_ms=(ready - start) * 1000.0,
                samples=len(target),
                staleness=applied - 1 - read,
            )
        )
