"""One optimizer step of every PyTorch strategy on a fixed batch, dropout off,
against the same step on one device; rank 0 prints one JSON line of the largest
absolute differences (loss, gradients, updated weights).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/helpers/torch_parallel_probe.py TRAIN_CSV
    python -m torch.distributed.run --standalone --nproc_per_node 4 tests/helpers/torch_parallel_probe.py TRAIN_CSV

Two processes: data (also with --accumulate), tensor, model, pipeline (also with
--checkpointing), and on one device --accumulate's K batches against one K x
batch step, --checkpointing against the plain backward pass, and a learning
rate of 0 set through set_learning_rate leaving the weights alone. Four
processes: hybrid, 2 replicas x each inner strategy on 2.
"""

import json
import os
import sys

import numpy as np
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from algorithms.config.run_config import parse_config  # noqa: E402
from algorithms.dataset.data import load_kaggle_csv  # noqa: E402
from algorithms.network.dropout import uniforms  # noqa: E402
from torch_wrapper.distributed import join_process_group  # noqa: E402
from torch_wrapper.trainer import build_trainer  # noqa: E402

BATCH = 24  # split 12 + 12 across two replicas or two accumulated batches
TWO_PROCESS_RUNS = (  # (name, flags, accumulated batches)
    ("data", ["--strategy", "data", "--devices", "2"], 1),
    ("data_accumulate2", ["--strategy", "data", "--devices", "2", "--accumulate", "2"], 2),
    ("tensor", ["--strategy", "tensor", "--devices", "2"], 1),
    ("tensor_checkpointing", ["--strategy", "tensor", "--devices", "2", "--checkpointing"], 1),
    ("model", ["--strategy", "model", "--devices", "2"], 1),
    ("pipeline", ["--strategy", "pipeline", "--devices", "2"], 1),
    ("pipeline_checkpointing", ["--strategy", "pipeline", "--devices", "2", "--checkpointing"], 1),
)
ONE_DEVICE_RUNS = (
    ("accumulate2", ["--accumulate", "2"], 2),
    ("accumulate3", ["--accumulate", "3"], 3),
    ("checkpointing", ["--checkpointing"], 1),
)
FOUR_PROCESS_RUNS = tuple(
    (f"hybrid_{inner}", ["--strategy", "hybrid", "--devices", "4", "--inner", inner], 1)
    for inner in ("tensor", "model", "pipeline")
)


def config_for(train_csv: str, *flags):
    """The run's config, dropout on: every strategy drops the units the shared uniforms say."""
    return parse_config(["--train", train_csv, "--batch_size", str(BATCH), *flags], "probe", "probe")


def owned_layers(config, position: int) -> list:
    """The parametric layer indices whose parameters this rank's trainer holds, in order."""
    plan = config.plan
    start, stop = plan.stages[position] if plan.stages else (0, len(config.network.layers))
    return [index for index, _, _ in config.network.parametric_layers() if start <= index < stop]


def step(trainer, images, labels, parts: int = 1):
    """One optimizer step over `parts` accumulated batches, each row's dropout uniforms cut
    with it (network/dropout.py); (loss, [(grad, weight), ...])."""
    drawn = uniforms(trainer.network, 0, 0, np.arange(len(labels)))
    cut = [np.array_split(u, parts) for u in drawn]
    batches = [
        trainer.to_batch(x, y, tuple(pieces[k] for pieces in cut))
        for k, (x, y) in enumerate(zip(np.array_split(images, parts), np.array_split(labels, parts)))
    ]
    loss = trainer.step(batches).loss
    return loss, [(p.grad.detach().cpu().numpy(), p.detach().cpu().numpy()) for p in trainer._parameters()]


def keyed(config, position, tensors) -> dict:
    keys = [(index, kind) for index in owned_layers(config, position) for kind in ("kernel", "bias")]
    return dict(zip(keys, tensors))


def initial_tensors(config) -> list:
    from torch_wrapper.model import build_model
    from algorithms.network.weights import initial_weights

    return [
        p.detach().numpy()
        for p in build_model(config.network, initial_weights(config.network, config.seed)).parameters()
    ]


def largest_differences(loss, tensors: dict, reference_loss, reference: dict) -> dict:
    assert tensors.keys() == reference.keys(), (sorted(tensors), sorted(reference))
    return {
        "loss": abs(loss - reference_loss),
        "grad": max(float(np.abs(tensors[k][0] - reference[k][0]).max()) for k in reference),
        "weight": max(float(np.abs(tensors[k][1] - reference[k][1]).max()) for k in reference),
        "grad_scale": max(float(np.abs(reference[k][0]).max()) for k in reference),
    }


def main(train_csv: str) -> None:
    images, labels = load_kaggle_csv(train_csv, labelled=True)
    images, labels = images[:BATCH], labels[:BATCH]
    single = config_for(train_csv)
    reference_loss, tensors = step(build_trainer(single), images, labels)
    reference = keyed(single, 0, tensors)
    report = {}
    join_process_group()
    world = dist.get_world_size()
    for name, flags, parts in TWO_PROCESS_RUNS if world == 2 else FOUR_PROCESS_RUNS:
        config = config_for(train_csv, *flags)
        trainer = build_trainer(config)
        loss, tensors = step(trainer, images, labels, parts)
        plan = config.plan
        position = dist.get_rank() % plan.group
        everyone = [None] * world
        dist.all_gather_object(everyone, (loss, keyed(config, position if plan.group > 1 else 0, tensors)))
        replicas = [everyone[r * plan.group : (r + 1) * plan.group] for r in range(plan.replicas)]
        first = replicas[0]  # the ranks of replica 0, by position
        if plan.shards:  # each position holds a slice of every layer's output channels
            merged = {k: tuple(np.concatenate([rank[1][k][i] for rank in first]) for i in (0, 1)) for k in first[0][1]}
        else:  # each position holds its stage's layers (one position: the whole model)
            merged = {k: v for rank in first for k, v in rank[1].items()}
        if plan.replicas > 1:  # every replica must hold the very same weights after the step
            report[f"{name}_replica_gap"] = max(
                float(np.abs(other[1][k][1] - mine[1][k][1]).max())
                for replica in replicas[1:]
                for other, mine in zip(replica, first)
                for k in mine[1]
            )
        report[name] = largest_differences(loss, merged, reference_loss, reference)
        report[name]["ranks_agree_on_loss"] = len({rank[0] for rank in everyone}) == 1
    for name, flags, parts in ONE_DEVICE_RUNS if world == 2 else ():
        config = config_for(train_csv, *flags)
        loss, tensors = step(build_trainer(config), images, labels, parts)
        report[name] = largest_differences(loss, keyed(config, 0, tensors), reference_loss, reference)
    if world == 2:
        trainer = build_trainer(single)
        trainer.set_learning_rate(0.0)
        _, tensors = step(trainer, images, labels)
        report["learning_rate_zero_moved_weights_by"] = max(
            float(np.abs(tensor[1] - reference_weight).max())
            for tensor, reference_weight in zip(tensors, initial_tensors(single))
        )
    if dist.get_rank() == 0:
        print(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
