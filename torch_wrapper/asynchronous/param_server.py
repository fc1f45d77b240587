"""--strategy ps: a parameter server over torch.distributed.rpc (TensorPipe), as
PyTorch's "parameter server using RPC" tutorial builds it. Processes (rpc names):

    coordinator   this process: hands each worker its share of a batch, records a
                  row per applied update, scores the server's parameters between
                  epochs (it trains nothing, like TensorFlow's chief)
    ps            holds the parameters and the optimizer; applies each pushed
                  gradient as it arrives, or with --ps_sync the sum of all N once
                  every worker of the step has pushed (one update per step)
    worker0..N-1  pull the parameters, compute the gradient of their share, push it

On one host every process meets through a FileStore (rpc's file:// init method: no
rendezvous port) and TensorPipe listens on the loopback interface only
(TP_SOCKET_IFNAME=lo). Across hosts (--ps_endpoint HOST:PORT, an address of the
coordinator's host) they meet at a TCP store the coordinator hosts on that address alone,
TensorPipe binds the interface each host reaches it through, and the last
--remote_workers workers are started on the other hosts by `python -m
torch_wrapper.asynchronous.ps_worker` (ps_worker.py) instead of here.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
import warnings

import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.nn.functional as F

from algorithms.network.parallel import split_ranges
from algorithms.network.weights import initial_weights
from algorithms.contract.types import Update
from backends.torch_backend import set_threads
from torch_wrapper.model import build_blocks, images_to_torch, make_optimizer, uniforms_to_torch
from torch_wrapper.nodes import rpc_meeting
from algorithms.machine.processes import ChildWorkers, ignore_interrupts
from torch_wrapper.asynchronous.workers import child_processes

# a call to a dead server fails when TensorPipe sees the connection close; this bounds
# the wait where it does not, inside the 60 s a killed run has to end in
RPC_TIMEOUT_S = 30
DEATH_NOTICED_S = 5  # after a failed call: time for the dead process's exit to be reaped


def _whole_model(config):
    network = config.network
    return build_blocks(network, initial_weights(network, config.seed), ((0, len(network.layers)),), False)


def meeting(config, rendezvous_file: str = None) -> tuple:
    """(rpc's init method, the interface TensorPipe binds) of a process of this run: a
    FileStore on loopback on one host, the --ps_endpoint's bound store across hosts (its
    scheme registered in the calling process: each process calls this itself)."""
    if config.ps_endpoint:
        return rpc_meeting(config.ps_endpoint)
    return f"file://{rendezvous_file}", "lo"


def _join(name: str, rank: int, world: int, place: tuple) -> None:
    init_method, interface = place
    os.environ["TP_SOCKET_IFNAME"] = interface  # TensorPipe's TCP transport binds this interface's address
    os.environ["GLOO_SOCKET_IFNAME"] = interface  # init_rpc's own gloo group: the same
    warnings.filterwarnings("ignore", message="You are using a Backend")  # torch's own init_rpc trips it
    options = rpc.TensorPipeRpcBackendOptions(init_method=init_method, rpc_timeout=RPC_TIMEOUT_S)
    rpc.init_rpc(name, rank=rank, world_size=world, rpc_backend_options=options)


# --------------------------------------------------------------------------- the server


class ParameterServer:
    def __init__(self, config):
        self.parameters = list(_whole_model(config).parameters())
        self.optimizer = make_optimizer(config.optimizer, self.parameters)
        self.workers, self.synchronous = config.plan.replicas, config.ps_sync
        self.version = 0  # updates applied
        self.lock = threading.Lock()  # rpc handlers run on a thread pool: one apply at a time
        self.pushed, self.waiting = [], []  # --ps_sync: this step's gradients and their callers

    def pull(self):
        with self.lock:
            return self.version, [p.detach().clone() for p in self.parameters]

    def _apply(self, gradients: list, learning_rate: float) -> None:
        for parameter, gradient in zip(self.parameters, gradients):
            parameter.grad = gradient
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        self.optimizer.step()
        self.version += 1

    def push(self, read_version: int, gradients: list, learning_rate: float) -> int:
        """Applies one worker's gradient now; returns its staleness."""
        with self.lock:
            self._apply(gradients, learning_rate)
            return self.version - 1 - read_version

    def push_and_wait(self, read_version: int, gradients: list, learning_rate: float) -> torch.futures.Future:
        """--ps_sync: completes once the step's last worker has pushed and their sum is applied."""
        done = torch.futures.Future()
        with self.lock:
            self.pushed.append(gradients)
            self.waiting.append(done)
            if len(self.pushed) < self.workers:
                return done
            total = [torch.stack(parts).sum(0) for parts in zip(*self.pushed)]
            self._apply(total, learning_rate)
            waiting, self.pushed, self.waiting = self.waiting, [], []
        for future in waiting:
            future.set_result(0)
        return done


_SERVER = None  # the ps process's ParameterServer
_MODEL = None  # a worker's (or the coordinator's) copy of the model, loaded from each pull


def _pull():
    return _SERVER.pull()


def _push(read_version, gradients, learning_rate):
    return _SERVER.push(read_version, gradients, learning_rate)


@rpc.functions.async_execution
def _push_and_wait(read_version, gradients, learning_rate):
    return _SERVER.push_and_wait(read_version, gradients, learning_rate)


def serve(config, rendezvous_file: str) -> None:
    """The ps process: holds the parameters until the coordinator ends the run."""
    global _SERVER
    ignore_interrupts()
    set_threads(1)  # the optimizer's element-wise updates; the workers need the cores
    _SERVER = ParameterServer(config)
    _join("ps", 1, config.plan.replicas + 2, meeting(config, rendezvous_file))
    rpc.shutdown()  # waits until every process is done


# --------------------------------------------------------------------------- a worker


def _load_pulled(model, parameters: list) -> None:
    with torch.no_grad():
        for mine, pulled in zip(model.parameters(), parameters):
            mine.copy_(pulled)


def _compute(images, labels, uniforms, learning_rate, total, synchronous):
    """One share: pull, forward and backward on it (loss scaled by 1 / total), push.
    A call to the server that fails returns its error's text (raised, rpc would print
    a traceback here too; the coordinator names the process that died, once)."""
    try:
        return _pull_compute_push(images, labels, uniforms, learning_rate, total, synchronous)
    except RuntimeError as error:
        return str(error).splitlines()[0]


def _pull_compute_push(images, labels, uniforms, learning_rate, total, synchronous):
    start = time.perf_counter()
    read_version, parameters = rpc.rpc_sync("ps", _pull)
    pulled = time.perf_counter()
    _load_pulled(_MODEL, parameters)
    _MODEL.train()
    _MODEL.zero_grad(set_to_none=True)
    logits = _MODEL(images, uniforms)
    loss_sum = F.cross_entropy(logits, labels, reduction="sum")
    (loss_sum / total).backward()
    gradients = [p.grad for p in _MODEL.parameters()]
    computed = time.perf_counter()
    push = _push_and_wait if synchronous else _push
    staleness = rpc.rpc_sync("ps", push, args=(read_version, gradients, learning_rate))
    done = time.perf_counter()
    correct = (logits.argmax(1) == labels).sum().item()
    comm_ms = ((pulled - start) + (done - computed)) * 1000.0
    return loss_sum.item(), correct, len(labels), (done - start) * 1000.0, comm_ms, staleness


def work(config, worker: int, threads: int, rendezvous_file: str, interruptible: bool = False) -> None:
    """A worker: a child of the coordinator, or (`interruptible`, Ctrl-C ends it) a
    process of its own on another host (ps_worker.py)."""
    global _MODEL
    if not interruptible:
        ignore_interrupts()
    set_threads(threads)
    _MODEL = _whole_model(config)
    _join(f"worker{worker}", 2 + worker, config.plan.replicas + 2, meeting(config, rendezvous_file))
    rpc.shutdown()


# --------------------------------------------------------------------------- the coordinator


class ParameterServerPool(ChildWorkers):
    """The algorithms.contract.types.UpdatePool of a parameter-server run."""

    def __init__(self, config, dataset):
        global _MODEL
        workers = config.plan.replicas
        self.synchronous = config.ps_sync
        self.workers = workers
        self.slots = self.parts = 1 if self.synchronous else workers  # --ps_sync: whole steps, one at a time
        self.dataset, self.config = dataset, config
        self.done: queue.Queue = queue.Queue()
        self.rendezvous = tempfile.mkdtemp(prefix="cnn-parallel-rpc-")
        rendezvous_file = os.path.join(self.rendezvous, "store")
        self.processes = child_processes()
        self.processes.start("the parameter server", serve, config, rendezvous_file)
        local = workers - config.remote_workers  # the others are started on their hosts (ps_worker.py)
        threads = max(1, config.threads // max(1, local))
        for worker in range(local):
            self.processes.start(f"ps worker {worker}", work, config, worker, threads, rendezvous_file)
        _MODEL = _whole_model(config)
        _join("coordinator", 0, workers + 2, meeting(config, rendezvous_file))

    def _share(self, indices, uniforms: tuple, rows: slice = slice(None)):
        """(images, labels, dropout uniforms) of `rows` of these training rows, as tensors."""
        indices = np.asarray(indices)[rows]
        return (
            images_to_torch(self.config.network, self.dataset.train_x[indices]),
            torch.from_numpy(self.dataset.train_y[indices].astype(np.int64)),
            uniforms_to_torch(self.config.network, tuple(u[rows] for u in uniforms)),
        )

    def submit(self, slot: int, indices: np.ndarray, learning_rate: float, uniforms: tuple) -> None:
        if not self.synchronous:
            share = self._share(indices, uniforms)
            future = rpc.rpc_async(f"worker{slot}", _compute, args=(*share, learning_rate, len(indices), False))
            future.then(lambda done: self.done.put((slot, [done])))
            return
        shares = [slice(start, stop) for start, stop in split_ranges(len(indices), self.workers)]
        futures = [
            rpc.rpc_async(
                f"worker{w}", _compute, args=(*self._share(indices, uniforms, rows), learning_rate, len(indices), True)
            )
            for w, rows in enumerate(shares)
        ]
        torch.futures.collect_all(futures).then(lambda done: self.done.put((0, done.value())))

    def result(self, timeout_s: float):
        try:
            slot, futures = self.done.get(timeout=timeout_s)
        except queue.Empty:
            return None
        try:
            results = [future.wait() for future in futures]
            failure = next((r for r in results if isinstance(r, str)), None)
        except RuntimeError as error:  # the worker itself is gone
            failure = str(error).splitlines()[0]
        if failure is not None:
            self._failed(failure, "during an update")
        loss_sum, correct, samples = (sum(r[i] for r in results) for i in range(3))
        return Update(
            worker=slot,
            loss=loss_sum / samples,
            accuracy=correct / samples,
            step_time_ms=max(r[3] for r in results),
            data_time_ms=0.0,  # the coordinator gathers a share while the workers compute the last one
            samples=samples,
            staleness=results[0][5],
            comm_time_ms=max(r[4] for r in results),
        )

    def _failed(self, failure: str, when: str) -> None:
        """A call failed: raises PeerLost naming the process that died, if one did."""
        deadline = time.monotonic() + DEATH_NOTICED_S
        while time.monotonic() < deadline:
            self.check(when)
            time.sleep(0.2)
        raise RuntimeError(f"a parameter-server call failed {when}: {failure}")

    @torch.no_grad()
    def logits(self, images: np.ndarray) -> np.ndarray:
        try:
            _, parameters = rpc.rpc_sync("ps", _pull)
        except RuntimeError as error:
            self._failed(str(error).splitlines()[0], "while the coordinator scored its parameters")
        _load_pulled(_MODEL, parameters)
        _MODEL.eval()
        return _MODEL(images_to_torch(self.config.network, images)).numpy()

    def close(self, graceful: bool = True) -> None:
        if graceful:
            rpc.shutdown()
            self.processes.wait()
        else:
            self.processes.end()
            rpc.shutdown(graceful=False)
        self.processes.end()
        for name in os.listdir(self.rendezvous):
            os.remove(os.path.join(self.rendezvous, name))
        os.rmdir(self.rendezvous)
