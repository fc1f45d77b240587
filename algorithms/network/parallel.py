"""The parallel plan, computed once from the spec and the flags. A wrapper reads
the plan and makes only the framework calls; it never decides which layer goes
where, how channels are sharded or how a batch is cut.

    strategy  what is split                              plan fields a wrapper reads
    single    nothing                                    -
    data      the batch, across `replicas` copies        replicas, per_replica_batch
    model     the layers: conv block | dense block       stages (layer index ranges)
    tensor    each parametric layer's output channels    shards (per layer index)
    pipeline  the layers into stages, fed micro-batches  stages, micro_batch_sizes
    hybrid    data x (model | tensor | pipeline)         replicas, group, inner, + the inner's fields
    ps        the batch, across `replicas` workers that  replicas, per_replica_batch
              pull parameters from servers and push
              gradients to it (applied as they arrive,
              or after all of them with --ps_sync)
    async     the batch, across `replicas` processes     replicas, per_replica_batch
              updating one shared model without locks
    localsgd  the batch, across `replicas` copies that   replicas, per_replica_batch
              step alone, averaged every --sync_every

`devices` is the total: for hybrid it is replicas x group (group = devices per
replica, 2 unless --group says otherwise).

Also here, because every wrapper must agree on it: the ring all-reduce
communication volume the scaling report predicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from algorithms.errors import InputError
from algorithms.network.networks import Conv2D, Dense, Flatten, Network, ZeroPad2D

STRATEGIES = ("single", "data", "model", "tensor", "pipeline", "hybrid", "ps", "async", "localsgd")
INNER_STRATEGIES = ("model", "tensor", "pipeline")
# each worker applies its own part of every step: one worker is the one-device run
WORKER_STRATEGIES = ("ps", "async", "localsgd")
FLOAT32_BYTES = 4
_WHERE_WORKER_STRATEGIES_RUN = {
    "ps": "torch_script.py --strategy ps (torch.distributed.rpc) and tensorflow_script.py --strategy ps "
    "(ParameterServerStrategy) run one",
    "async": "torch_script.py --strategy async runs it (Hogwild: torch.multiprocessing, one model in shared memory)",
    "localsgd": "torch_script.py --strategy localsgd --sync_every K runs it (torch's PeriodicModelAverager)",
}


def worker_strategy_advice(why: str, strategies=WORKER_STRATEGIES) -> dict:
    """Support.advice for a framework that runs none of `strategies`: why, and which script does."""
    return {strategy: f"{why}; {_WHERE_WORKER_STRATEGIES_RUN[strategy]}" for strategy in strategies}


@dataclass(frozen=True)
class ParallelPlan:
    strategy: str
    devices: int
    global_batch: int  # samples per forward/backward pass over all replicas (--batch_size)
    replicas: int = 1  # data-parallel copies of the model
    group: int = 1  # devices inside one replica (model/tensor/pipeline width)
    inner: Optional[str] = None  # model | tensor | pipeline inside each replica, or None
    stages: tuple = ()  # ((first layer index, stop index), ...) per stage
    shards: dict = field(default_factory=dict)  # layer index -> ((start, stop) output channels per rank)
    micro_batches: int = 1

    @property
    def per_replica_batch(self) -> int:
        return self.global_batch // self.replicas

    def micro_batch_sizes(self, batch: int) -> list:
        return split_sizes(batch, min(self.micro_batches, batch))

    def describe(self) -> str:
        parts = [f"{self.strategy} on {self.devices} device{'s' if self.devices != 1 else ''}"]
        if self.replicas > 1:
            parts.append(f"{self.replicas} replicas x {self.per_replica_batch} samples")
        if self.inner:
            parts.append(f"{self.inner} inside each replica over {self.group} devices")
        if self.stages:
            parts.append("stages " + " | ".join(f"layers {a}-{b - 1}" for a, b in self.stages))
        if self.micro_batches > 1:
            parts.append(f"{self.micro_batches} micro-batches")
        return ", ".join(parts)


def split_sizes(total: int, parts: int) -> list:
    """`total` cut into `parts` near-equal whole pieces, the larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split_ranges(total: int, parts: int) -> tuple:
    ranges, start = [], 0
    for size in split_sizes(total, parts):
        ranges.append((start, start + size))
        start += size
    return tuple(ranges)


def layer_stages(network: Network, stages: int) -> tuple:
    """Contiguous layer ranges, one per stage. Two stages: the conv block and the
    dense block (cut at the Flatten), the placement the original model-parallel
    examples use. More: cut where the forward FLOPs are most even, never inside
    a layer's own activation, never between a ZeroPad2D and the layer it pads (a
    wrapper may fold the pair into one padded convolution), and every stage holds
    a layer with weights (a stage without any has nothing to train)."""
    count = len(network.layers)
    if stages == 1:
        return ((0, count),)
    if stages == 2:  # at the Flatten, or the first layer of vectors (after a global pool)
        flatten = next(
            (i for i, layer in enumerate(network.layers) if isinstance(layer, Flatten)),
            next(i for i, shape in enumerate(network.input_shapes()) if len(shape) == 1),
        )
        return ((0, flatten), (flatten, count))
    parametric = [isinstance(layer, (Conv2D, Dense)) for layer in network.layers]
    if stages > sum(parametric):
        raise InputError(
            f"--devices {stages}: {network.name} has only {sum(parametric)} layers with weights, "
            f"one or more per stage; use --devices {sum(parametric)} or fewer"
        )
    costs = _layer_flops(network)
    cuts_allowed = [start == 0 or not isinstance(network.layers[start - 1], ZeroPad2D) for start in range(count)]
    # minimise the most expensive stage over all allowed contiguous cuts (dynamic programming; tiny n)
    prefix, weighted = [0], [0]
    for cost, has_weights in zip(costs, parametric):
        prefix.append(prefix[-1] + cost)
        weighted.append(weighted[-1] + has_weights)
    best = {(0, 0): (0, ())}
    for k in range(1, stages + 1):
        for end in range(k, count + 1):
            options = []
            for start in range(k - 1, end):
                if (k - 1, start) in best and cuts_allowed[start] and weighted[end] > weighted[start]:
                    worst, cuts = best[(k - 1, start)]
                    options.append((max(worst, prefix[end] - prefix[start]), cuts + ((start, end),)))
            if options:
                best[(k, end)] = min(options)
    return best[(stages, count)][1]


def _layer_flops(network: Network) -> list:
    costs = []
    for layer, in_shape, out_shape in zip(network.layers, network.input_shapes(), network.output_shapes()):
        if isinstance(layer, Conv2D):
            costs.append(2 * layer.kernel_size**2 * in_shape[-1] * out_shape[0] * out_shape[1] * out_shape[2])
        elif isinstance(layer, Dense):
            costs.append(2 * in_shape[0] * layer.units)
        else:
            costs.append(1)  # pooling, padding, dropout: cheap, but a stage must hold something
    return costs


def tensor_shards(network: Network, ranks: int) -> dict:
    """Output channels (conv) or units (dense) of every parametric layer, split
    across `ranks`; each rank computes its slice and an all-gather joins them."""
    shards = {}
    for index, layer in enumerate(network.layers):
        if isinstance(layer, (Conv2D, Dense)):
            width = layer.filters if isinstance(layer, Conv2D) else layer.units
            if width < ranks:
                raise InputError(
                    f"--devices {ranks}: layer {index} of {network.name} has only {width} "
                    f"output channels to split; use --devices {width} or fewer"
                )
            shards[index] = split_ranges(width, ranks)
    return shards


def make_plan(
    network: Network,
    strategy: str,
    devices: int,
    global_batch: int,
    micro_batches: int = 0,
    group: int = 2,
    inner: str = "model",
    batch_schedule: tuple = (),
) -> ParallelPlan:
    """Checks the combination and builds the plan; a bad one is an InputError naming the fix.
    `batch_schedule` (--batch_schedule's (epoch, batch) pairs): each batch must split as `global_batch` must,
    and the first entry (`global_batch`'s) is the one a refusal names, not --batch_size."""
    first_epoch = batch_schedule[0][0] if batch_schedule else None
    plan = _plan(network, strategy, devices, global_batch, micro_batches, group, inner, first_epoch)
    _check_batch_schedule(plan, batch_schedule)
    return plan


def _plan(
    network: Network,
    strategy: str,
    devices: int,
    global_batch: int,
    micro_batches: int,
    group: int,
    inner: str,
    schedule_epoch: Optional[int] = None,
) -> ParallelPlan:
    if strategy not in STRATEGIES:
        raise InputError(f"--strategy {strategy}: unknown; choose from {', '.join(STRATEGIES)}")
    if devices < 1:
        raise InputError(f"--devices {devices}: must be 1 or more")
    if strategy == "single":
        if devices != 1:
            raise InputError(
                f"--devices {devices}: strategy 'single' runs on one device; use --devices 1 "
                "or pick a parallel --strategy"
            )
        return ParallelPlan("single", 1, global_batch)
    if strategy in WORKER_STRATEGIES:
        _check_divisible(global_batch, devices, "--devices", schedule_epoch)
        return ParallelPlan(strategy, devices, global_batch, replicas=devices)
    if devices < 2:
        raise InputError(f"--strategy {strategy} needs --devices 2 or more")
    if strategy == "data":
        _check_divisible(global_batch, devices, "--devices", schedule_epoch)
        return ParallelPlan("data", devices, global_batch, replicas=devices)
    if strategy == "hybrid":
        if inner not in INNER_STRATEGIES:
            raise InputError(f"--inner {inner}: choose from {', '.join(INNER_STRATEGIES)}")
        if group < 2 or devices % group or devices // group < 2:
            raise InputError(
                f"--strategy hybrid --devices {devices} --group {group}: devices must be "
                "(2 or more replicas) x (group of 2 or more), e.g. --devices 4 --group 2"
            )
        replicas = devices // group
        _check_divisible(global_batch, replicas, f"the {replicas} data-parallel replicas", schedule_epoch)
        inner_plan = make_plan(network, inner, group, global_batch // replicas, micro_batches)
        return ParallelPlan(
            "hybrid",
            devices,
            global_batch,
            replicas=replicas,
            group=group,
            inner=inner,
            stages=inner_plan.stages,
            shards=inner_plan.shards,
            micro_batches=inner_plan.micro_batches,
        )
    if strategy == "model":
        return ParallelPlan("model", devices, global_batch, group=devices, stages=layer_stages(network, devices))
    if strategy == "tensor":
        return ParallelPlan("tensor", devices, global_batch, group=devices, shards=tensor_shards(network, devices))
    micro = micro_batches or 2 * devices  # enough micro-batches to keep every stage busy most of the time
    if micro > global_batch:
        raise InputError(f"--micro_batches {micro}: more than the batch of {global_batch}")
    return ParallelPlan(
        "pipeline", devices, global_batch, group=devices, stages=layer_stages(network, devices), micro_batches=micro
    )


def _check_divisible(batch: int, parts: int, what: str, schedule_epoch: Optional[int] = None) -> None:
    """`batch` is --batch_size's, or with `schedule_epoch` that --batch_schedule entry's (named instead)."""
    if batch % parts:
        lower, upper = batch - batch % parts, batch + parts - batch % parts
        if schedule_epoch is not None:
            raise InputError(
                f"--batch_schedule {schedule_epoch}:{batch}: {batch} does not divide evenly across {what} ({parts}); "
                f"use {schedule_epoch}:{lower or upper} or {schedule_epoch}:{upper}"
            )
        raise InputError(
            f"--batch_size {batch} does not divide evenly across {what} ({parts}); "
            f"use --batch_size {lower or upper} or {upper}"
        )


def _check_batch_schedule(plan: ParallelPlan, schedule: tuple) -> None:
    """Every batch of a --batch_schedule must split as --batch_size must."""
    parts = plan.replicas
    for epoch, batch in schedule:
        if batch % parts:
            lower, upper = batch - batch % parts, batch + parts - batch % parts
            raise InputError(
                f"--batch_schedule {epoch}:{batch}: {batch} does not divide evenly across the {parts} "
                f"data-parallel replicas; use {epoch}:{lower or upper} or {epoch}:{upper}"
            )
        if plan.micro_batches > batch:
            raise InputError(
                f"--batch_schedule {epoch}:{batch}: fewer samples than the {plan.micro_batches} micro-batches"
            )


# --------------------------------------------------------------------------- communication


def ring_allreduce_bytes(param_count: int, replicas: int, bytes_per_value: int = FLOAT32_BYTES) -> float:
    """Bytes each replica sends per step when gradients are averaged with a ring
    all-reduce: 2 (K - 1) / K x the gradient size (reduce-scatter + all-gather)."""
    if replicas <= 1:
        return 0.0
    return 2.0 * (replicas - 1) / replicas * param_count * bytes_per_value
