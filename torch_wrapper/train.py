"""PyTorch training: the trainer for the run's strategy (trainer.py), driven by the
shared loop in algorithms/run/loop.py. Multi-process strategies run one process per
device under torchrun (torch_wrapper/launch.py starts it); rank 0 records the run."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from algorithms.contract.types import Device, LayerProbe, ModelParameter, Runtime
from algorithms.spec.weights import gradients_from_channels_first, initial_weights, output_from_channels_first
from algorithms.run.loop import train_by_hand
from backends.torch_backend import describe_device, set_threads
from algorithms.errors import PeerLost
from torch_wrapper.distributed import (
    describe_devices,
    global_rank,
    leave_process_group,
    lost_peer,
    rank_device,
    signal_of_any_rank,
)
from torch_wrapper.model import build_model, images_to_torch, layer_modules
from torch_wrapper.trainer import build_trainer


def describe_runtime() -> Runtime:
    device = Device(*describe_device(rank_device()))  # rank 0's records: its own device
    return Runtime("torch", "torch", {"torch": torch.__version__, "numpy": np.__version__}, describe_devices(), device)


def records(config) -> bool:
    """Rank 0 records a multi-process run; the other ranks step through it silently."""
    return global_rank() == 0


def train(session):
    if session.config.strategy in ("async", "ps"):  # this process records; its children update
        return train_asynchronously(session)
    trainer = build_trainer(session.config)
    trainer.steps_per_epoch = session.steps_per_epoch  # where --fault momentum_reset and lr_late act
    session.execution_note, session.precision_note = describe_modes(session.config, trainer)
    if dist.is_initialized():  # one process per device: a signal to any stops all after the same step
        session.signal_of_any_process = signal_of_any_rank(trainer.device)
    try:
        summary = train_by_hand(trainer, session)
    except RuntimeError as error:  # a collective failed: name the host that was lost, in one line
        lost = lost_peer(error) if dist.is_initialized() else None
        if lost is None:
            raise
        raise PeerLost(lost) from error
    if session.config.part == "run":  # the epoch check's processes go on to the run in the same group
        leave_process_group()
    return summary


def train_asynchronously(session):
    from algorithms.run.updates import train_by_updates

    config = session.config
    set_threads(config.threads)  # this process scores the model between epochs, while the workers wait
    if config.strategy == "async":
        from torch_wrapper.asynchronous.hogwild import HogwildPool as Pool
    else:
        from torch_wrapper.asynchronous.param_server import ParameterServerPool as Pool
    pool = Pool(config, session.dataset)
    try:
        summary = train_by_updates(pool, session)
    except BaseException:  # a worker lost, a signal: end the others now
        pool.close(graceful=False)
        raise
    pool.close()
    return summary


def describe_modes(config, trainer) -> tuple:
    """(execution, precision) as the trainer runs them (as `config` asks), for results.log."""
    execution = (
        "compiled: torch.compile (Inductor) of the model; the first step compiles"
        if config.compile
        else "eager: every op dispatched from Python (PyTorch's default)"
    )
    precision = {
        "fp32": "fp32: float32 weights and compute",
        "bf16": "bf16: torch.autocast(bfloat16) forward, float32 master weights, float32 loss",
        "fp16": "fp16: torch.autocast(float16) forward, float32 master weights, float32 loss, "
        "torch.amp.GradScaler dynamic loss scale (the CSV's loss_scale column)",
    }[config.precision]
    return execution, precision


@torch.no_grad()
def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """PyTorch's own cross-entropy and the logits of the shared initial weights, dropout off
    (evaluation: a BatchNormalization's running statistics)."""
    model = build_model(network, initial_weights(network, seed)).eval()
    logits = model(images_to_torch(network, images))
    return float(F.cross_entropy(logits, torch.from_numpy(labels.astype(np.int64)))), logits.numpy()


PARAMETER_MODULES = (nn.Conv2d, nn.Linear, nn.modules.batchnorm._BatchNorm)
ROLES = {"weight": "kernel", "bias": "bias"}


def layout(module: nn.Module, name: str) -> str:
    if name == "bias" or isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "O"
    return "OIHW" if isinstance(module, nn.Conv2d) else "OI"


def parameter_module(modules: list):
    """The module of a spec layer's modules that holds its parameters (a conv may follow its pad), or None."""
    return next((module for module in modules if isinstance(module, PARAMETER_MODULES)), None)


def model_parameters(network) -> list:
    """The parameters of the model build_model makes, each with the spec layer whose modules hold it."""
    layers = layer_modules(network, initial_weights(network, 0))
    model = nn.Sequential(*[module for modules in layers for module in modules])
    owners = {id(module): index for index, modules in enumerate(layers) for module in modules}
    return [
        ModelParameter(
            f"{position}.{name}", owners[id(module)], ROLES[name], tuple(parameter.shape), layout(module, name)
        )
        for position, module in enumerate(model)
        for name, parameter in module.named_parameters(recurse=False)
    ]


def layer_outputs_and_gradients(network, weights, images, labels, on_output=None) -> LayerProbe:
    """The fused model training builds (pads in the convolutions, ReLUs after the pools),
    in training (a BatchNormalization on the batch's statistics), so its outputs are those at
    the boundaries where it holds the spec's values, each handed to `on_output` as the forward
    pass reaches it; each layer's input gradient where it holds that input. A parameter
    autograd gave no gradient (requires_grad off, or cut from the graph) has None. With a
    BatchNormalization, the same model in evaluation too (its running statistics)."""
    layers = layer_modules(network, weights)
    held = set(range(len(network.layers))) - network.outputs_fused_away()
    x, outputs, inputs = images_to_torch(network, images).requires_grad_(True), {}, {}
    for index, modules in enumerate(layers):
        if index == 0 or index - 1 in held:
            x.retain_grad()
            inputs[index] = x
        for module in modules:
            x = module(x)
        if index in held:
            outputs[index] = output_from_channels_first(network, index, x.detach().numpy().copy())
            if on_output is not None:
                on_output(index, outputs[index])
    loss = F.cross_entropy(x, torch.from_numpy(labels.astype(np.int64)))
    loss.backward()
    gradients = {}
    for index, modules in enumerate(layers):
        module = parameter_module(modules)
        if module is not None:
            for role, parameter in (("kernel", module.weight), ("bias", module.bias)):
                if parameter is not None:  # None: a layer built without its bias (--fault bias:...)
                    gradients[(index, role)] = None if parameter.grad is None else parameter.grad.numpy()
    input_gradients = {
        index: output_from_channels_first(network, index - 1, tensor.grad.numpy().copy())
        if index
        else np.ascontiguousarray(tensor.grad.numpy().transpose(0, 2, 3, 1))
        for index, tensor in inputs.items()
        if tensor.grad is not None
    }
    evaluation = {}
    if network.batch_normalizations():
        with torch.no_grad():
            x = images_to_torch(network, images)
            for index, modules in enumerate(layer_modules(network, weights)):
                for module in modules:
                    x = module.eval()(x)
                if index in held:
                    evaluation[index] = output_from_channels_first(network, index, x.numpy().copy())
    return LayerProbe(
        loss.item(), outputs, gradients_from_channels_first(network, gradients), input_gradients, evaluation
    )
