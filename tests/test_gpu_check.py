"""`make gpu-check ARGS=--dry-run`: the GPU check's own script, on CPU at tiny sizes,
writes its CSV and markdown with every row it runs on a GPU (torch eager and
compiled in fp32/tf32/bf16, the cuDNN study's two settings, Keras on torch and jax,
and the harness: the entry scripts themselves, default and --parity, with --device cpu
in place of gpu), each trained and with an MFU; without an importable keras its rows
say so."""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import subprocess
import sys

import pytest

from algorithms.bench.gpu_harness import PRECISION
from algorithms.records import read_settings, results_csv_name, run_ids
from algorithms.network.networks import DEFAULT_NETWORK
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # three framework processes and twelve entry-script runs, minutes on 2 cores

HARNESS = (("torch", "torch", "torch_script.py"), ("keras", "jax", "keras_script.py"))


def test_dry_run_writes_every_row_of_the_gpu_table(tmp_path):
    out = tmp_path / "gpu"
    # the harness on torch and keras_jax (keras_torch runs the same code); no run cut by the budget
    args = f"--dry-run --out {out} --harness torch,keras_jax --budget_s 1500"
    proc = subprocess.run(
        ["make", "--no-print-directory", "gpu-check", f"ARGS={args}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (table,) = glob.glob(str(out / "gpu_check_*_dry_run.csv"))
    with open(table, newline="") as handle:
        rows = list(csv.DictReader(handle))
    kinds = [(row["framework"], row["backend"], row["mode"], row["precision"], row["batch"]) for row in rows]
    assert kinds == [
        *[("torch", "torch", mode, p, "16") for mode in ("eager",) for p in ("fp32", "tf32", "bf16")],
        ("torch", "torch", "cudnn.benchmark=True", "fp32", "16"),
        ("torch", "torch", "cudnn.deterministic=True", "fp32", "16"),
        *[("torch", "torch", "compiled", p, "16") for p in ("fp32", "tf32", "bf16")],
        ("keras", "torch", "fit", "fp32 (backend default)", "16"),
        ("keras", "jax", "fit", "fp32 (backend default)", "16"),
        *[
            (framework, backend, f"{script} {mode}", PRECISION[mode.lstrip("-")][0], "16")
            for framework, backend, script in HARNESS
            for mode in ("default", "--parity")
        ],
    ]
    assert all(row["status"] == "ok" for row in rows), [row["status"] for row in rows]
    for row in rows:
        assert float(row["ms_per_step"]) > 0 and float(row["mfu_pct"]) > 0, row
        assert math.isfinite(float(row["first_loss"])) and math.isfinite(float(row["last_loss"])), row
    study = {row["mode"]: row for row in rows if row["mode"].startswith("cudnn.")}
    assert float(study["cudnn.deterministic=True"]["drift_weights"]) == 0.0  # two runs, bit-identical
    assert study["cudnn.deterministic=True"]["speed_cost_pct"] != ""
    with open(table.replace(".csv", ".md")) as handle:
        markdown = handle.read()
    assert markdown.startswith("GPU check ") and "(dry run, CPU, tiny sizes)" in markdown
    assert markdown.count("\n| torch |") == 10 and markdown.count("\n| keras |") == 4
    harness = [row for row in rows if row["mode"].endswith(("default", "--parity"))]
    for row in harness:  # --device cpu stood in for gpu, and the rows say so
        assert row["device"].startswith("cpu: "), row
        assert math.isfinite(float(row["drift_loss"])) and math.isfinite(float(row["drift_vs_cpu"])), row
        if row["mode"].endswith("--parity"):  # two CPU runs and a third, deterministic kernels: bit-identical
            assert float(row["drift_loss"]) == 0.0 and float(row["drift_vs_cpu"]) == 0.0, row
    (runs,) = glob.glob(str(out / "gpu_check_*_dry_run_runs"))
    with open(os.path.join(runs, "results.log")) as handle:
        summary = handle.read()
    for framework, backend, _ in HARNESS:  # the entry scripts wrote their own CSVs, settings and summary
        path = os.path.join(runs, results_csv_name(DEFAULT_NETWORK, framework, backend))
        settings = read_settings(path)
        names = {run_id.split("-", 1)[1] for run_id in run_ids(path)}
        name = framework if framework == backend else f"{framework}_{backend}"
        assert names == {f"{name}-{mode}-{run}" for mode in ("default", "parity") for run in ("a", "b", "cpu")}
        assert {record["device"] for record in settings.values()} == {"cpu"}
        assert {record["parity"] for record in settings.values()} == {False, True}
        assert all(f"=== {run_id} " in summary for run_id in run_ids(path))


def test_keras_rows_say_not_run_when_keras_is_not_importable(tmp_path):
    fake = tmp_path / "no_keras" / "keras"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no keras on this machine')\n")
    plan, rows = tmp_path / "plan.json", tmp_path / "rows.jsonl"
    plan.write_text(json.dumps({"keras_runs": [{"kind": "keras", "mode": "fit", "batch": 128}]}))
    proc = subprocess.run(
        [sys.executable, "-m", "keras_wrapper.gpu_check", str(plan), str(rows)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), REPO_ROOT]), "KERAS_BACKEND": "jax"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(line) for line in rows.read_text().splitlines()]
    assert row["backend"] == "jax" and row["batch"] == 128
    assert row["status"] == "not run: keras not importable (no keras on this machine); pass --keras_path"
