"""The GPU check's harness part (`gpu_check.py`, algorithms/bench/gpu_check.py runs it after
the study): the harness itself on the GPU. For each of torch_script.py and keras_script.py
on torch and on jax, in its default mode and with --parity, the real entry script runs as
a process of its own: twice with --device gpu (run-to-run drift on the GPU) and once with
--device cpu (the GPU against the CPU), the same seed, steps and batch. Each (framework,
mode) is one row of the check's table, read back from the runs' CSVs and settings records:
ms/step (the steady-state median), MFU against the device's matmul rate, the largest loss
difference of the two GPU runs (drift_loss) and of the GPU run and the CPU run
(drift_vs_cpu), and the device the run recorded. The dry run runs the same scripts with
--device cpu in place of gpu, at tiny sizes. Imports no framework."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

from algorithms.paths import REPO_ROOT
from algorithms.records import read_rows, read_settings, results_csv_name, steady_state_ms
from algorithms.registry.frameworks import get
from algorithms.tables import last_line

FRAMEWORKS = ("torch", "keras_torch", "keras_jax")
MODES = {"default": [], "parity": ["--parity"]}
# the precision each mode's float32 runs at on a GPU, and the matmul rate its MFU is set against
PRECISION = {
    "default": ("fp32 (framework default: cuDNN and XLA convolutions may take TF32)", "tf32"),
    "parity": ("fp32 (--parity: TF32 off, deterministic kernels)", "fp32"),
}
RUNS = ("a", "b", "cpu")  # two on the device under test, one on the CPU
RUN_TIMEOUT_S = 300


def commands(plan: dict, name: str, mode: str, folder: str, stamp: str) -> list:
    """(run, argv) of the three runs of one (framework, mode)."""
    device = plan["device_flag"]
    common = [
        *("--train", plan["train"], "--test", "none", "--seed", str(plan["seed"])),
        *("--max_steps", str(plan["steps"]), "--batch_size", str(plan["harness_batch"]), "--quiet"),
        *("--results_dir", folder, "--results_log", os.path.join(folder, "results.log")),
        *MODES[mode],
    ]
    script = os.path.join(REPO_ROOT, get(name).script)
    return [
        (run, [sys.executable, script, *common, "--device", "cpu" if run == "cpu" else device, "--run_id", run_id])
        for run, run_id in ((run, f"{stamp}-{name}-{mode}-{run}") for run in RUNS)
    ]


def run_harness(plan: dict, folder: str, stamp: str, deadline: float, keras_path: str, rates: dict) -> list:
    """Every (framework, mode) of the plan: its runs, then its table row (gpu_check.COLUMNS)."""
    os.makedirs(folder, exist_ok=True)
    flops = plan["flops_per_sample"]
    rows = []
    for name in plan["harness"]:
        framework = get(name)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (keras_path, REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
        path = os.path.join(folder, results_csv_name(plan["network"], framework.framework, framework.backend))
        for mode in MODES:
            row = {
                "framework": framework.framework,
                "backend": framework.backend,
                "mode": f"{framework.script} {'--parity' if mode == 'parity' else 'default'}",
                "precision": PRECISION[mode][0],
                "batch": plan["harness_batch"],
            }
            problem = ""
            for run, argv in commands(plan, name, mode, folder, stamp):
                left = deadline - time.monotonic()
                if left < 20:
                    problem = "not run: over the time budget"
                    break
                try:
                    proc = subprocess.run(
                        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=min(RUN_TIMEOUT_S, left)
                    )
                    if proc.returncode:
                        problem = f"failed: run {run}: {last_line(proc.stderr, 'no message')[:160]}"
                except subprocess.TimeoutExpired:
                    problem = f"not run: run {run} timed out"
                if problem:
                    break
            if not problem:
                try:  # a run that wrote no rows or no settings leaves a row saying so, and the table
                    row = finish(row, path, plan, mode, stamp, name, rates, flops)
                except (OSError, KeyError, IndexError, ValueError) as error:
                    problem = f"failed: reading the runs' records: {type(error).__name__}: {str(error)[:120]}"
            rows.append({**row, "status": problem} if problem else row)
    return rows


def finish(row: dict, path: str, plan: dict, mode: str, stamp: str, name: str, rates: dict, flops: float) -> dict:
    """The row of one (framework, mode) whose three runs finished, from their records."""
    runs = {run: f"{stamp}-{name}-{mode}-{run}" for run in RUNS}
    train = {run: [r for r in read_rows(path, run_id) if r["phase"] == "train"] for run, run_id in runs.items()}
    first = train["a"]
    device = read_settings(path)[runs["a"]]
    if plan["device_flag"] == "gpu" and device["device"] != "gpu":
        return {**row, "status": f"failed: --device gpu recorded {device['device']}"}
    median_ms = steady_state_ms([r["step_time_ms"] for r in first])
    samples = row["batch"] * 1000.0 / median_ms
    tflops = flops * samples / 1e12
    basis = PRECISION[mode][1]
    rate = rates.get(basis)
    return {
        **row,
        "device": f"{first[0]['device']}: {device['device_detail']}",
        "ms_per_step": f"{median_ms:.2f}",
        "samples_per_sec": f"{samples:.0f}",
        "tflops": f"{tflops:.3f}",
        "mfu_pct": f"{100.0 * tflops * 1000.0 / rate:.1f}" if rate else "",
        "mfu_against": f"{basis} matmul {(rate or 0) / 1000.0:.1f} TFLOP/s",
        "first_step_s": f"{first[0]['step_time_ms'] / 1000.0:.2f}",
        "first_loss": f"{first[0]['loss']:.4f}",
        "last_loss": f"{first[-1]['loss']:.4f}",
        "drift_loss": f"{largest_difference(first, train['b']):.3g}",
        "drift_vs_cpu": f"{largest_difference(first, train['cpu']):.3g}",
        "status": "ok",
    }


def largest_difference(a: list, b: list) -> float:
    """The largest |loss difference| of two runs' train rows over their common steps."""
    losses_a = {r["step"]: r["loss"] for r in a}
    common = [r["step"] for r in b if r["step"] in losses_a]
    if not common:
        return float("nan")
    theirs = np.array([r["loss"] for r in b if r["step"] in losses_a])
    return float(np.max(np.abs(np.array([losses_a[step] for step in common]) - theirs)))
