"""Tensor parallelism: every conv layer's output channels and every dense layer's
units are split across the ranks of a replica per `plan.shards`; each rank
computes its slice (and the slice's activation, which is elementwise) from the
full input, and an all-gather joins the slices into the full activation that
every rank then feeds to the next layer. Non-parametric layers (padding,
pooling, flatten, dropout) run on every rank alike; dropout draws the same mask
on every rank of a replica from the batch's shared uniforms."""

from __future__ import annotations

from torch import nn

from algorithms.network.networks import Network
from algorithms.session.clock import CommClock
from torch_wrapper.distributed import Layout, gather_shards, replicated_input
from torch_wrapper.model import Checkpointed, SpecStack, layer_modules


class GatheredShard(nn.Module):
    """One layer's local slice, then the all-gather along the channel axis (dim 1
    in NCHW and in (batch, units) alike). Backward: the gathered gradient is the
    same on every rank (the layers after it are replicated), so each keeps its
    slice; the input's gradient is summed over the ranks (each slice saw all of
    the input but contributes only through its own channels)."""

    def __init__(self, local: nn.Module, sizes: list, group, clock: CommClock):
        super().__init__()
        self.local, self.sizes, self.group, self.clock = local, sizes, group, clock

    def forward(self, inputs):
        inputs = replicated_input(inputs, self.group, self.clock)
        return gather_shards(self.local(inputs), 1, self.sizes, self.group, self.clock)


def build_tensor_parallel(
    network: Network, weights: list, shards: dict, layout: Layout, clock: CommClock, checkpointing: bool
) -> SpecStack:
    """This rank's model: its shard of each parametric layer, gathered after each.
    With `checkpointing`, each shard's local compute is recomputed in the backward
    pass (the all-gather is not: it stays outside the recomputed part)."""
    mine = {index: ranges[layout.position] for index, ranges in shards.items()}
    modules = []
    for index, layer_parts in enumerate(layer_modules(network, weights, mine)):
        if index in shards:
            local = nn.Sequential(*layer_parts)
            sizes = [stop - start for start, stop in shards[index]]
            modules.append(
                GatheredShard(Checkpointed(local) if checkpointing else local, sizes, layout.inner_group, clock)
            )
        else:
            modules.extend(layer_parts)
    return SpecStack(*modules)
