"""The GPU check's Keras side, in its own process, on the backend KERAS_BACKEND names
(algorithms/bench/gpu_check.py starts it as `python -m keras_wrapper.gpu_check PLAN.json
ROWS.jsonl`, with a brought-along keras on PYTHONPATH where the machine has none):
keras_script.py's model (make_model) trained by model.fit on each batch size of the
plan. A first fit compiles (jit); the second, timed, is the step time. One JSON line
per run; without an importable keras, one line saying so."""

from __future__ import annotations

import json
import os
import sys
import time


def device_name(backend: str) -> str:
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return f"{device.platform} ({device.device_kind})"
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"


def fit_run(plan: dict, dataset, run: dict) -> dict:
    import numpy as np

    from algorithms.spec.data import batch_order
    from algorithms.spec.dropout import uniforms
    from algorithms.spec.networks import get_network
    from keras_wrapper.trainer import fit_inputs, make_model

    network, seed = get_network(plan["network"]), plan["seed"]
    batch = run["batch"]
    model = make_model(network, network.training.optimizer, seed).training
    steps = [(epoch, r) for epoch in range(64) for r in batch_order(len(dataset.train_y), batch, epoch, seed)]
    steps = [(epoch, r) for epoch, r in steps if len(r) == batch]
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
    plan_path, rows_path = sys.argv[1:3] if argv is None else argv
    with open(plan_path) as handle:
        plan = json.load(handle)
    backend = os.environ.get("KERAS_BACKEND", "")

    def write(row: dict) -> None:
        with open(rows_path, "a") as handle:
            handle.write(json.dumps({"framework": "keras", "backend": backend, **row}) + "\n")

    try:
        import keras
    except ImportError as error:  # the GPU machine has no keras unless one is brought along
        for run in plan["keras_runs"]:
            write({**run, "status": f"not run: keras not importable ({error}); pass --keras_path"})
        return 0
    from algorithms.spec.data import load_dataset

    dataset = load_dataset(plan["train"], None, None, 0.2, plan["seed"])
    versions = f"keras {keras.__version__} on {backend}"
    deadline = time.monotonic() + plan["budget_s"]
    for run in plan["keras_runs"]:
        if time.monotonic() > deadline:
            write({**run, "status": "not run: over the time budget"})
            continue
        try:
            row = fit_run(plan, dataset, run)
        except Exception as error:  # noqa: BLE001  (the row says what failed; the next batch still runs)
            row = {**run, "status": f"failed: {type(error).__name__}: {str(error)[:160]}"}
        write({**row, "device": device_name(backend), "versions": versions})
    return 0


if __name__ == "__main__":
    sys.exit(main())
