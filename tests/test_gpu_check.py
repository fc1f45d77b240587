"""`make gpu-check ARGS=--dry-run`: the GPU check's own script, on CPU at tiny sizes,
writes its CSV and markdown with every row it runs on a GPU (torch eager and
compiled in fp32/tf32/bf16, the cuDNN study's two settings, Keras on torch and jax),
each trained and with an MFU; without an importable keras its rows say so."""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # three framework processes, about a minute on 2 cores


def test_dry_run_writes_every_row_of_the_gpu_table(tmp_path):
    out = tmp_path / "gpu"
    proc = subprocess.run(
        ["make", "--no-print-directory", "gpu-check", f"ARGS=--dry-run --out {out}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
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
    assert markdown.count("\n| torch |") == 8 and markdown.count("\n| keras |") == 2


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
