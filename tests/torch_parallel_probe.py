"""One optimizer step of every two-process PyTorch strategy on a fixed batch,
dropout off, against the same step on one device; rank 0 prints one JSON line
of the largest absolute differences (loss, gradients, updated weights).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/torch_parallel_probe.py TRAIN_CSV

Also, on one device: --accumulate's K batches against one K x batch step, and
--checkpointing against the plain backward pass.
"""
import json
import os
import sys
from dataclasses import replace

import numpy as np
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from algorithms.cli import parse_config  # noqa: E402
from algorithms.data import load_kaggle_csv  # noqa: E402
from algorithms.spec import Dropout  # noqa: E402
from torch_wrapper.train import build_trainer  # noqa: E402

BATCH = 24  # split 12 + 12 across two replicas or two accumulated batches


def config_for(train_csv: str, *flags):
    """The run's config with every dropout rate set to 0 (same layer indices, so the same plan)."""
    config = parse_config(["--train", train_csv, "--batch_size", str(BATCH), *flags], "probe", "probe")
    layers = tuple(Dropout(0.0) if isinstance(layer, Dropout) else layer for layer in config.network.layers)
    return replace(config, network=replace(config.network, layers=layers))


def owned_layers(config, position: int) -> list:
    """The parametric layer indices whose parameters this rank's trainer holds, in order."""
    plan = config.plan
    start, stop = plan.stages[position] if plan.stages else (0, len(config.network.layers))
    return [index for index, _, _ in config.network.parametric_layers() if start <= index < stop]


def step(trainer, images, labels, parts: int = 1):
    """One optimizer step over `parts` accumulated batches; (loss, [(grad, weight), ...])."""
    batches = [trainer.to_batch(x, y) for x, y in zip(np.array_split(images, parts), np.array_split(labels, parts))]
    loss, _, _ = trainer.accumulate_step(batches)
    return loss, [(p.grad.detach().cpu().numpy(), p.detach().cpu().numpy()) for p in trainer._parameters()]


def keyed(config, position, tensors) -> dict:
    keys = [(index, kind) for index in owned_layers(config, position) for kind in ("kernel", "bias")]
    return dict(zip(keys, tensors))


def largest_differences(loss, tensors: dict, reference_loss, reference: dict) -> dict:
    assert tensors.keys() == reference.keys(), (sorted(tensors), sorted(reference))
    return {"loss": abs(loss - reference_loss),
            "grad": max(float(np.abs(tensors[k][0] - reference[k][0]).max()) for k in reference),
            "weight": max(float(np.abs(tensors[k][1] - reference[k][1]).max()) for k in reference),
            "grad_scale": max(float(np.abs(reference[k][0]).max()) for k in reference)}


def main(train_csv: str) -> None:
    images, labels = load_kaggle_csv(train_csv, labelled=True)
    images, labels = images[:BATCH], labels[:BATCH]
    single = config_for(train_csv)
    reference_loss, tensors = step(build_trainer(single), images, labels)
    reference = keyed(single, 0, tensors)
    report = {}
    two_process_runs = (("data", [], 1), ("data_accumulate2", ["--accumulate", "2"], 2), ("tensor", [], 1),
                        ("tensor_checkpointing", ["--checkpointing"], 1), ("model", [], 1), ("pipeline", [], 1),
                        ("pipeline_checkpointing", ["--checkpointing"], 1))
    for name, extra_flags, parts in two_process_runs:
        strategy = name.split("_")[0]
        config = config_for(train_csv, "--strategy", strategy, "--devices", "2", *extra_flags)
        trainer = build_trainer(config)
        loss, tensors = step(trainer, images, labels, parts)
        position = dist.get_rank()
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, (loss, keyed(config, 0 if strategy == "data" else position, tensors)))
        if strategy == "tensor":  # each rank holds a slice of every layer's output channels
            merged = {k: tuple(np.concatenate([rank[1][k][i] for rank in everyone]) for i in (0, 1))
                      for k in everyone[0][1]}
        elif strategy == "data":  # replicas must hold identical weights after the step
            merged = everyone[0][1]
            report[f"{name}_replica_gap"] = max(float(np.abs(everyone[1][1][k][1] - merged[k][1]).max())
                                                       for k in merged)
        else:  # stages: each rank holds its layers
            merged = {**everyone[0][1], **everyone[1][1]}
        report[name] = largest_differences(loss, merged, reference_loss, reference)
        report[name]["ranks_agree_on_loss"] = len({rank[0] for rank in everyone}) == 1
    for name, flags, parts in (("accumulate2", ["--accumulate", "2"], 2), ("accumulate3", ["--accumulate", "3"], 3),
                               ("checkpointing", ["--checkpointing"], 1)):
        config = config_for(train_csv, *flags)
        loss, tensors = step(build_trainer(config), images, labels, parts)
        report[name] = largest_differences(loss, keyed(config, 0, tensors), reference_loss, reference)
    if dist.get_rank() == 0:
        print(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
