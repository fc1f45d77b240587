"""The GPU check's Keras side, in its own process, on the backend KERAS_BACKEND names
(algorithms/bench/gpu_check.py starts it as `python -m keras_wrapper.gpu_check PLAN.json
ROWS.jsonl`, with a brought-along keras on PYTHONPATH where the machine has none, and
holds what every side does alike):
keras_script.py's model (make_model) trained by model.fit on each batch size of the
plan. A first fit compiles (jit); the second, timed, is the step time. One JSON line
per run; without an importable keras, one line saying so."""

from __future__ import annotations

import os
import sys
import time

from algorithms.bench.gpu_check import append_row, read_plan, run_within_budget, whole_batches


def device_name(backend: str) -> str:
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return f"{device.platform} ({device.device_kind})"
    import torch

    from backends.torch_backend import device_name as torch_device_name

    return torch_device_name(torch.device("cuda" if torch.cuda.is_available() else "cpu"))


def fit_run(plan: dict, dataset, run: dict) -> dict:
    import numpy as np

    from algorithms.network.dropout import uniforms
    from algorithms.network.networks import get_network
    from keras_wrapper.trainer import fit_inputs, make_model

    network, seed = get_network(plan["network"]), plan["seed"]
    batch = run["batch"]
    model = make_model(network, network.training.optimizer, seed).training
    steps = whole_batches(len(dataset.train_y), batch, seed)
    losses, seconds = [], []
    for part in (steps[: plan["warmup"]], steps[plan["warmup"] : plan["steps"]]):  # compile, then timed
        order = np.concatenate([r for _, r in part])
        drawn = [uniforms(network, seed, epoch, r) for epoch, r in part]  # each step's from its epoch, as a run's
        x = fit_inputs(dataset.train_x[order], tuple(np.concatenate(layer) for layer in zip(*drawn)))
        start = time.perf_counter()
        history = model.fit(
            x,
            dataset.train_y[order],
            batch_size=batch,
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        seconds.append(time.perf_counter() - start)
        losses += [float(value) for value in history.history["batch_loss"]]
    steps_timed = plan["steps"] - plan["warmup"]
    return {
        **run,
        "ms_per_step": 1000.0 * seconds[1] / steps_timed,
        "steps_timed": steps_timed,
        "first_step_s": seconds[0],
        "losses": losses,
        "status": "ok",
    }


def main(argv=None) -> int:
    plan, rows_path = read_plan(argv)
    backend = os.environ.get("KERAS_BACKEND", "")

    def write(row: dict) -> None:
        append_row(rows_path, {"framework": "keras", "backend": backend, **row})

    try:
        import keras
    except ImportError as error:  # the GPU machine has no keras unless one is brought along
        for run in plan["keras_runs"]:
            write({**run, "status": f"not run: keras not importable ({error}); pass --keras_path"})
        return 0
    from algorithms.dataset.data import load_dataset

    dataset = load_dataset(plan["train"], None, None, 0.2, plan["seed"])
    versions = f"keras {keras.__version__} on {backend}"
    run_within_budget(
        plan["keras_runs"],
        time.monotonic() + plan["budget_s"],
        lambda run: [fit_run(plan, dataset, run)],
        write,
        stamp=lambda row: {**row, "device": device_name(backend), "versions": versions},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
