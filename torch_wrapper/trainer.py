"""The trainer for the run's strategy (`build_trainer`): the contract.Trainer that
algorithms/run/loop.py drives, one shape for every strategy.

Every strategy scales the loss the same way: the sum of its samples' losses
divided by the samples in the whole optimizer step (all replicas, all
accumulated batches). Gradients then only need summing, whether over
accumulated batches, micro-batches or replicas, and equal the gradient of the
global batch's mean loss, as on one device."""

from __future__ import annotations

import copy
import os
from contextlib import nullcontext

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.nn.parallel import DistributedDataParallel

from algorithms.contract.types import StepResult
from algorithms.run.loop import step_on_zeros_then_restore
from algorithms.session.noise_scale import replica_gradient_norms
from algorithms.network.dropout import uniforms
from algorithms.reference.train_state import StateNotHeld, TrainState, from_channels_first_state
from algorithms.network.weights import LayerWeights, initial_weights
from algorithms.network.parallel import layer_stages, split_ranges
from algorithms.machine.threads import process_threads
from algorithms.machine.tuning import tuned_options
from algorithms.session.clock import CommClock
from backends.torch_backend import run_device, set_threads
from torch_wrapper.distributed import (
    GradientNormTotals,
    global_rank,
    join_process_group,
    make_layout,
    sum_gradients,
    sum_over,
    timed_sum_hook,
    with_gradient_norms,
)
from torch_wrapper.model import (
    PARAMETER_MODULES,
    Checkpointed,
    build_blocks,
    build_stage,
    images_to_torch,
    make_optimizer,
    uniforms_to_torch,
)
from torch_wrapper import TRAINER_FAULTS
from torch_wrapper.pipeline import StageSchedule, channels_first
from torch_wrapper.tensor_parallel import build_tensor_parallel


COMPUTE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class _StrategyTrainer:
    """A subclass supplies `_forward_backward(images, labels, uniforms, total, last)` ->
    tensor([loss sum, correct]) of its samples, and `logits(images)`."""

    def __init__(
        self,
        optimizer,
        device: torch.device,
        clock: CommClock,
        replica: int = 0,
        replicas: int = 1,
        data_group=None,
        gradients_summed_in_backward: bool = False,
    ):
        self.optimizer, self.device, self.clock = optimizer, device, clock
        self.replica, self.replicas = replica, replicas
        self.metrics_group = data_group  # the replicas whose loss and accuracy make the step's, or None
        self.gradient_group = None if gradients_summed_in_backward else data_group
        self.gradient_norm_totals = None  # --noise_scale: a GradientNormTotals filled by DDP's hook
        self.compute_dtype = None  # --precision bf16 / fp16: autocast's dtype (set by build_trainer)
        self.scaler = None  # --precision fp16: torch.amp.GradScaler, the dynamic loss scale
        self.network = None  # the spec, for prepare_batch's step (set by build_trainer)
        # the spec's loss: "sum" only for --fault loss:sum, a known error on purpose
        self.loss_reduction = "mean"
        # a known error on purpose (--fault eval_dropout, momentum_reset, lr_late, accuracy_labels:
        # network/variants.py), or None; the epoch-bound ones need the epoch's steps (set by train.py)
        self.fault = None
        self.steps_per_epoch = 0
        self.steps_done = 0
        self._late_rates: list = []  # --fault lr_late: (step it takes effect at, lr)
        # why this process cannot give the whole model's state (a stage or a shard), or "" (train_state)
        self.holds_part = ""
        self._rate = None  # the learning rate set last (late_lr scales it)
        self.fault_at, self.fault_value = 0, 0.0  # a late fault's EPOCH or START, and its value
        self.maxnorm_kernel = None  # --fault maxnorm: the kernel it holds

    def autocast(self):
        """Mixed precision: the float32 weights cast to the compute dtype op by op (torch.autocast)."""
        if self.compute_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def backward(self, loss) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def to_batch(self, images: np.ndarray, labels: np.ndarray, uniforms: tuple):
        """This replica's rows of the shared global batch and their dropout uniforms, and
        the global batch size."""
        start, stop = split_ranges(len(labels), self.replicas)[self.replica]
        return (
            images_to_torch(self.network, images[start:stop], self.device),
            torch.from_numpy(labels[start:stop].astype(np.int64)).to(self.device),
            uniforms_to_torch(self.network, tuple(u[start:stop] for u in uniforms), self.device),
            len(labels),
        )

    def _known_error_before_step(self) -> None:
        """--fault momentum_reset, lr_late, late_lr and late_momentum act here, before the
        step they change (`fault_at`, `fault_value`: the fault's EPOCH and its value)."""
        if self.fault == "momentum_reset" and self.steps_done and self.steps_done % self.steps_per_epoch == 0:
            self.optimizer.state.clear()  # an optimizer made anew at the epoch's first step
        while self._late_rates and self._late_rates[0][0] <= self.steps_done:
            self._set_rate(self._late_rates.pop(0)[1])
        epoch = self.steps_done // self.steps_per_epoch if self.steps_per_epoch else 0  # 0-based, this step's
        if self.fault in ("late_lr", "late_momentum") and epoch + 1 >= self.fault_at:
            for group in self.optimizer.param_groups:
                if self.fault == "late_lr":
                    group["lr"] = self._rate * self.fault_value
                else:
                    group["momentum"] = self.fault_value

    def _update_skipped(self) -> bool:
        """--fault skip:START:EVERY: this step's update is one the known error drops."""
        step = self.steps_done  # this step's number (1-based), counted before the update
        return step >= self.fault_at and (step - self.fault_at) % int(self.fault_value) == 0

    @torch.no_grad()
    def _hold_max_norm(self) -> None:
        """--fault maxnorm:LAYER:VALUE: after the update, each unit's incoming kernel of the
        layer scaled down to an L2 norm of VALUE where it is larger."""
        kernel = self.maxnorm_kernel
        norms = kernel.flatten(1).norm(dim=1).clamp(min=self.fault_value)
        kernel.mul_((self.fault_value / norms).view(-1, *([1] * (kernel.dim() - 1))))

    def step(self, batches: list) -> StepResult:
        """One optimizer step over K batches (K > 1: --accumulate K): the gradient of
        the mean loss over all their samples, exactly one K x batch step."""
        if self.fault is not None:
            self._known_error_before_step()
        self.steps_done += 1
        total = sum(size for *_, size in batches)
        divisor = 1 if self.loss_reduction == "sum" else total  # the gradient's: its loss summed, or the mean
        self.optimizer.zero_grad(set_to_none=True)
        sums = torch.zeros(2, device=self.device)
        for index, (images, labels, dropout_uniforms, _) in enumerate(batches):
            sums += self._forward_backward(images, labels, dropout_uniforms, divisor, index == len(batches) - 1)
        self._exchange_gradients()
        if self.scaler is None:
            if not (self.fault == "skip" and self._update_skipped()):
                self.optimizer.step()
            if self.fault == "maxnorm":
                self._hold_max_norm()
            scale, skipped = None, False
        else:  # unscales, skips the step if any gradient overflowed, then adjusts the scale
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            skipped = self.scaler.get_scale() < scale  # GradScaler halves the scale exactly when it skips
        if self.gradient_norm_totals is None:
            loss_sum, correct = sum_over(sums, self.metrics_group, self.clock).tolist()
            return StepResult(loss_sum / total, correct / total, self.clock.take(), scale, skipped)
        before, after = self.gradient_norm_totals.take()
        # the replicas' squared norms ride on the metrics' all-reduce: no extra collective;
        # every replica holds the same all-reduced gradient, so its norm sums `replicas` times
        loss_sum, correct, before_sum, after_sq_sum = sum_over(
            torch.cat([sums.double(), before, after]), self.metrics_group, self.clock
        ).tolist()
        norms = replica_gradient_norms(
            [size for *_, size in batches], self.replicas, lambda: (before_sum, after_sq_sum / self.replicas)
        )
        return StepResult(loss_sum / total, correct / total, self.clock.take(), scale, skipped, gradient_norms=norms)

    def set_learning_rate(self, learning_rate: float) -> None:
        if self.fault == "lr_late":  # the known error: the change lands an epoch after it was asked for
            self._late_rates.append((self.steps_done + self.steps_per_epoch, learning_rate))
            return
        self._set_rate(learning_rate)

    def _set_rate(self, learning_rate: float) -> None:
        self._rate = learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    def prepare_batch(self, batch_size: int) -> None:
        """Eager PyTorch runs any batch as it comes: nothing to do. A torch.compile'd
        model (--compile) re-compiles for a new shape at its first call: one step on zeros
        of the new shape here, then the weights, optimizer state, loss scale and RNG put back."""
        if isinstance(self._state_module(), torch._dynamo.eval_frame.OptimizedModule):
            step_on_zeros_then_restore(self, batch_size, self.network, self._snapshot, self._restore)

    def _state(self) -> dict:
        """Everything a step changes: weights, optimizer state, loss scale, RNG."""
        return {
            "model": self._state_module().state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
        }

    def _snapshot(self) -> dict:
        return copy.deepcopy(self._state())

    def _restore(self, state: dict) -> None:
        self._state_module().load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"].cpu())
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])

    def save_checkpoint(self, folder: str) -> None:
        """This process's `_state()`, in torch's format; returns once every process of the
        run has written its file."""
        torch.save(self._state(), os.path.join(folder, f"torch-rank{global_rank()}.pt"))
        if dist.is_initialized():
            dist.barrier()

    def load_checkpoint(self, folder: str) -> None:
        path = os.path.join(folder, f"torch-rank{global_rank()}.pt")
        self._restore(torch.load(path, map_location=self.device, weights_only=True))

    def train_state(self) -> TrainState:
        """The model's weights and the optimizer's slots in the spec's layout and convention
        (reference/train_state.py): torch's momentum buffer is its velocity already, Adam's
        exp_avg and exp_avg_sq its moments. Raises StateNotHeld where this process holds
        one part of the model (a stage, a shard)."""
        if self.holds_part:
            raise StateNotHeld(self.holds_part)
        module = self._state_module()
        module = getattr(module, "_orig_mod", module)  # torch.compile's wrapper holds the same parameters
        modules = [m for m in module.modules() if isinstance(m, PARAMETER_MODULES)]
        weights, slots, updates = [], {}, 0
        for (index, _, _), m in zip(self.network.parametric_layers(), modules):
            running = {}
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                running = {"running_mean": _numpy(m.running_mean), "running_var": _numpy(m.running_var)}
            weights.append(LayerWeights(index, _numpy(m.weight), _numpy(m.bias), **running))
            for role, parameter in (("kernel", m.weight), ("bias", m.bias)):
                state = self.optimizer.state.get(parameter, {}) if parameter is not None else {}
                if "momentum_buffer" in state and state["momentum_buffer"] is not None:
                    slots[(index, role)] = {"velocity": _numpy(state["momentum_buffer"])}
                elif "exp_avg" in state:
                    slots[(index, role)] = {"first": _numpy(state["exp_avg"]), "second": _numpy(state["exp_avg_sq"])}
                    updates = int(state["step"])
        return from_channels_first_state(self.network, weights, slots, adam_updates=updates, adam_epsilon="corrected")

    def _exchange_gradients(self) -> None:
        if self.gradient_group is not None:
            sum_gradients(self._parameters(), self.gradient_group, self.clock)

    def _parameters(self):
        return [p for group in self.optimizer.param_groups for p in group["params"]]


class ModuleTrainer(_StrategyTrainer):
    """A model whose forward gives logits on this rank: one device, a DDP replica
    (`ddp`: DDP sums the gradients itself, during backward), an nn.DataParallel
    model, or a tensor-parallel model (gathers inside its forward)."""

    def __init__(self, model, optimizer, device, clock, replica=0, replicas=1, data_group=None, ddp=False):
        super().__init__(optimizer, device, clock, replica, replicas, data_group, gradients_summed_in_backward=ddp)
        self.model, self.ddp = model, ddp

    def _forward_backward(self, images, labels, uniforms, total, last):
        self.model.train()
        # DDP: exchange gradients once, after the last accumulated batch
        with self.model.no_sync() if self.ddp and not last else nullcontext():
            with self.autocast():
                logits = self.model(images, uniforms)
            loss_sum = F.cross_entropy(logits.float(), labels, reduction="sum")  # the loss in float32
            self.backward(loss_sum / total)
        counted = labels.roll(1) if self.fault == "accuracy_labels" else labels  # the known error: other labels
        return torch.stack([loss_sum.detach(), (logits.argmax(1) == counted).sum().float()])

    def _state_module(self):
        return self.model.module if self.ddp or isinstance(self.model, torch.nn.DataParallel) else self.model

    @torch.no_grad()
    def logits(self, images: np.ndarray) -> np.ndarray:
        model = self.model.module if self.ddp else self.model
        model.eval()
        extra = ()
        if self.fault == "eval_dropout":  # the known error: evaluated in training mode, its dropout on
            model.train()
            drawn = uniforms(self.network, 0, -1, np.arange(len(images)))
            extra = (uniforms_to_torch(self.network, drawn, self.device),)
        with self.autocast():
            logits = model(images_to_torch(self.network, images, self.device), *extra).float().cpu().numpy()
        self.clock.take()  # evaluation traffic (tensor parallel's gathers) is not part of any training step
        return logits


class LocalSGDTrainer(ModuleTrainer):
    """--strategy localsgd: each rank steps its own copy of the model on its share of
    the batch (the gradient of its own samples' mean: no gradient exchange), and
    torch's PeriodicModelAverager averages the copies' parameters after every K-th
    step (Lin et al. 2018, "Don't use large mini-batches, use local SGD"). Its
    warm-up of K - 1 steps makes the first average come after step K, not step 1.
    With SGD and K = 1 this is synchronous data parallel (the average of the
    momentum updates is the momentum update of the average gradient) to float32."""

    def __init__(self, model, optimizer, device, clock, sync_every, replica, replicas, data_group):
        super().__init__(model, optimizer, device, clock, replica, replicas, data_group)
        self.gradient_group = None  # never summed: each rank applies its own
        self.averager = PeriodicModelAverager(period=sync_every, warmup_steps=sync_every - 1, process_group=data_group)

    def to_batch(self, images, labels, uniforms):
        images, labels, uniforms, _ = super().to_batch(images, labels, uniforms)
        return images, labels, uniforms, len(labels)  # this rank's samples make its own step

    def step(self, batches: list) -> StepResult:
        result = super().step(batches)  # its loss and accuracy: summed over the ranks / one rank's samples
        with self.clock.timing():
            self.averager.average_parameters(self.model.parameters())
        return StepResult(
            result.loss / self.replicas, result.accuracy / self.replicas, result.comm_time_ms + self.clock.take()
        )


class PipelineTrainer(_StrategyTrainer):
    """One stage of a model- or pipeline-parallel replica (torch_wrapper/pipeline.py)."""

    def __init__(
        self, schedule: StageSchedule, classes: int, optimizer, device, clock, replica=0, replicas=1, data_group=None
    ):
        super().__init__(optimizer, device, clock, replica, replicas, data_group)
        self.schedule, self.classes = schedule, classes

    def _state_module(self):
        return self.schedule.stage

    def _forward_backward(self, images, labels, uniforms, total, last):
        self.schedule.stage.train()
        return self.schedule.forward_backward(images, labels, uniforms, total)

    @torch.no_grad()
    def logits(self, images: np.ndarray) -> np.ndarray:
        self.schedule.stage.eval()
        logits = self.schedule.logits(images_to_torch(self.network, images, self.device), self.classes)
        self.clock.take()  # evaluation traffic is not part of any training step
        return logits.cpu().numpy()


def _numpy(tensor):
    return None if tensor is None else tensor.detach().float().cpu().numpy().copy()


def whole_model_blocks(network, checkpointing: bool) -> tuple:
    """Checkpointing recomputes the conv block and the dense block separately."""
    return layer_stages(network, 2) if checkpointing else ((0, len(network.layers)),)


def build_trainer(config):
    set_threads(process_threads(config.threads))  # the ranks on this machine share its cores
    trainer = _build_trainer(config)
    trainer.network = config.network
    trainer.loss_reduction = config.network.loss_reduction
    trainer.fault = config.fault.kind if config.fault and config.fault.kind in TRAINER_FAULTS else None
    if trainer.fault is not None:
        trainer.fault_at, trainer.fault_value = config.fault.layer, config.fault.value
        trainer._rate = config.optimizer.learning_rate
    if trainer.fault == "maxnorm":
        module = trainer._state_module()
        modules = [m for m in module.modules() if isinstance(m, PARAMETER_MODULES)]
        owners = [index for index, _, _ in config.network.parametric_layers()]
        trainer.maxnorm_kernel = modules[owners.index(config.fault.layer)].weight
    if config.precision != "fp32":
        trainer.compute_dtype = COMPUTE_DTYPES[config.precision]
        if config.precision == "fp16":
            trainer.scaler = torch.amp.GradScaler(trainer.device.type)
    return trainer


def _build_trainer(config):
    network, plan, seed = config.network, config.plan, config.seed
    weights = initial_weights(network, seed)
    blocks = whole_model_blocks(network, config.checkpointing)
    if config.strategy == "single" or config.dp_impl == "dataparallel":
        # single: the GPU where torch sees one (none under --device cpu); DataParallel: GPU 0 drives them all
        device = run_device() if config.strategy == "single" else torch.device("cuda", 0)
        model = build_blocks(network, weights, blocks, config.checkpointing).to(device)
        mode = tuned_options(config).get("torch.compile")  # --tuned compile / compile_max_autotune
        if config.compile or mode:  # --compile: torch.compile (Inductor); the first step compiles
            model = torch.compile(model, mode=None if mode in (None, "default") else mode)
        if config.strategy != "single":  # one process driving every GPU (launch.py checked they exist)
            model = nn.DataParallel(model, device_ids=list(range(config.devices)))
        return ModuleTrainer(model, make_optimizer(config.optimizer, model.parameters()), device, CommClock(False))

    device = join_process_group()
    clock = CommClock(measures=device.type == "cpu")  # nccl calls return before the transfer ends
    layout = make_layout(plan.replicas, plan.group)
    inner = plan.inner or config.strategy
    replica = dict(replica=layout.replica, replicas=layout.replicas, data_group=layout.data_group)
    if inner == "data":
        model = build_blocks(network, weights, blocks, config.checkpointing).to(device)
        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, process_group=layout.data_group
        )
        if device.type == "cpu":
            hook, state = timed_sum_hook, (clock, layout.data_group)
        else:  # nccl: sum (not DDP's default mean): the loss is already scaled by 1 / global batch
            hook, state = _nccl_sum_hook, layout.data_group
        totals = GradientNormTotals(device) if config.noise_scale else None
        if totals is not None:
            hook, state = with_gradient_norms(hook), (state, totals)
        model.register_comm_hook(state, hook)
        optimizer = make_optimizer(config.optimizer, model.parameters())
        trainer = ModuleTrainer(model, optimizer, device, clock, **replica, ddp=True)
        trainer.gradient_norm_totals = totals
        return trainer
    if inner == "localsgd":
        model = build_blocks(network, weights, blocks, config.checkpointing).to(device)
        optimizer = make_optimizer(config.optimizer, model.parameters())
        trainer = LocalSGDTrainer(model, optimizer, device, clock, config.sync_every, **replica)
        trainer.holds_part = "--strategy localsgd: each process steps its own copy between averages"
        return trainer
    if inner == "tensor":
        model = build_tensor_parallel(network, weights, plan.shards, layout, clock, config.checkpointing).to(device)
        trainer = ModuleTrainer(model, make_optimizer(config.optimizer, model.parameters()), device, clock, **replica)
        trainer.holds_part = "--strategy tensor: each process holds a shard of every layer"
        return trainer
    start, stop = plan.stages[layout.position]
    stage = build_stage(network, weights, start, stop).to(device)
    stage = Checkpointed(stage) if config.checkpointing else stage
    boundaries = [channels_first(network.input_shapes()[first]) for first, _ in plan.stages]
    schedule = StageSchedule(stage, layout, boundaries, plan.micro_batches, device, clock)
    optimizer = make_optimizer(config.optimizer, stage.parameters())
    trainer = PipelineTrainer(schedule, network.num_classes, optimizer, device, clock, **replica)
    trainer.holds_part = f"--strategy {config.strategy}: each process holds one stage of the layers"
    return trainer


def _nccl_sum_hook(group, bucket):
    return dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future().then(lambda f: f.value()[0])
