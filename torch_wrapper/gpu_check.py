"""The GPU check's torch side, in its own process (algorithms/bench/gpu_check.py starts it
as `python -m torch_wrapper.gpu_check PLAN.json ROWS.jsonl`, and holds what every side
does alike: the plan, the rows, the budget): the device's own
matmul rate at fp32, tf32 and bf16, then the plan's training runs (eager or
torch.compile; fp32, tf32 or bf16 autocast over float32 weights; any batch) and the
cuDNN study (cudnn.benchmark against deterministic, each twice). One JSON line per
result, written as it finishes, so a run cut off by the time limit keeps the rest."""

from __future__ import annotations

import contextlib
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from algorithms.bench.gpu_check import append_row, read_plan, run_within_budget, whole_batches
from algorithms.dataset.data import load_dataset
from algorithms.network.dropout import uniforms
from algorithms.network.weights import initial_weights
from algorithms.network.networks import get_network
from backends.torch_backend import device_name, set_tf32
from torch_wrapper.model import build_model, images_to_torch, make_optimizer, uniforms_to_torch

CUDNN_MODES = ("cudnn.benchmark=True", "cudnn.deterministic=True")


def compute_context(precision: str, device: torch.device):
    """bf16: autocast over the float32 weights (no loss scaling: bf16 has float32's range)."""
    set_tf32(precision == "tf32")
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_rates(device: torch.device, n: int, reps: int) -> dict:
    """GFLOP/s of an n x n matmul at each precision, the best of `reps` timed calls."""
    rates = {}
    for precision, dtype in (("fp32", torch.float32), ("tf32", torch.float32), ("bf16", torch.bfloat16)):
        set_tf32(precision == "tf32")
        a, b = torch.rand(n, n, device=device, dtype=dtype), torch.rand(n, n, device=device, dtype=dtype)
        torch.mm(a, b)
        synchronize(device)
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            torch.mm(a, b)
            synchronize(device)
            best = min(best, time.perf_counter() - start)
        rates[precision] = 2.0 * n**3 / best / 1e9
    return rates


def train_run(plan: dict, dataset, device: torch.device, run: dict) -> dict:
    """One training run: per-step wall time (synchronized), the losses, the final weights' digest."""
    network = get_network(plan["network"])
    torch.manual_seed(plan["seed"])
    model = build_model(network, initial_weights(network, plan["seed"])).to(device)
    optimizer = make_optimizer(network.training.optimizer, model.parameters())
    forward = model
    if run["mode"] == "compiled":
        torch._dynamo.reset()  # a fresh compile per run: dynamo's cache would fall back to eager after 8
        forward = torch.compile(model, backend=plan["compile_backend"])
    batch = run["batch"]
    order = whole_batches(len(dataset.train_y), batch, plan["seed"])[: plan["steps"]]
    images = images_to_torch(network, dataset.train_x, device)
    labels = torch.from_numpy(dataset.train_y.astype(np.int64)).to(device)
    batches = [
        (
            images[torch.from_numpy(rows).to(device)],
            labels[torch.from_numpy(rows).to(device)],
            uniforms_to_torch(network, uniforms(network, plan["seed"], epoch, rows), device),
        )
        for epoch, rows in order
    ]
    times, losses = [], []
    model.train()
    with compute_context(run["precision"], device):
        for x, y, dropout_uniforms in batches:
            synchronize(device)
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(forward(x, dropout_uniforms).float(), y)
            loss.backward()
            optimizer.step()
            synchronize(device)
            times.append((time.perf_counter() - start) * 1000.0)
            losses.append(loss.item())
    set_tf32(False)
    warm = times[plan["warmup"] :] or times
    weights = torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()]).numpy()
    return {
        **run,
        "ms_per_step": statistics.median(warm),
        "steps_timed": len(warm),
        "first_step_s": times[0] / 1000.0,
        "losses": losses,
        "weights": weights,
    }


def cudnn_study(plan: dict, dataset, device: torch.device, batch: int) -> list:
    """cudnn.benchmark=True (autotuned, possibly non-deterministic algorithms) against
    deterministic=True, each run twice from the same seed: drift between the two runs
    of a setting, and its speed."""
    rows = []
    for label, benchmark, deterministic in zip(CUDNN_MODES, (True, False), (False, True)):
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = benchmark, deterministic
        first, second = (
            train_run(plan, dataset, device, {"kind": "cudnn", "mode": label, "precision": "fp32", "batch": batch})
            for _ in range(2)
        )
        rows.append(
            {
                **{key: value for key, value in second.items() if key not in ("losses", "weights")},
                "ms_per_step": statistics.median([first["ms_per_step"], second["ms_per_step"]]),
                "losses": second["losses"],
                "drift_loss": float(np.max(np.abs(np.subtract(first["losses"], second["losses"])))),
                "drift_weights": float(np.max(np.abs(first["weights"] - second["weights"]))),
            }
        )
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, False
    return rows


def main(argv=None) -> int:
    plan, rows_path = read_plan(argv)
    device = torch.device(plan["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: torch sees no CUDA device here; run with --dry-run on a CPU machine")
    dataset = load_dataset(plan["train"], None, None, 0.2, plan["seed"])
    deadline = time.monotonic() + plan["budget_s"]

    def write(row: dict) -> None:
        row = {key: value for key, value in row.items() if key != "weights"}
        append_row(rows_path, {**row, "device": device_name(device), "torch": torch.__version__})

    def run_one(run: dict) -> list:
        if run["kind"] == "cudnn":
            return cudnn_study(plan, dataset, device, run["batch"])
        return [train_run(plan, dataset, device, run)]

    def failed(run: dict) -> list:
        return [{**run, "mode": mode} for mode in CUDNN_MODES] if run["kind"] == "cudnn" else [run]

    write({"kind": "rates", "rates": matmul_rates(device, plan["matmul_n"], plan["matmul_reps"])})
    run_within_budget(plan["runs"], deadline, run_one, write, failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
