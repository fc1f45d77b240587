"""algorithms/interconnect/network_cost.py for real, short: torch data parallel on 2 hosts whose cables the
kernel shapes to 10 Mbit/s spends most of each step communicating (an all-reduce of the
net's 1 MB of gradients takes about 0.8 s at that rate, the step's arithmetic a tenth of
that), and the table, the CSV and the plot are written with the machine and the load."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers.netns import require_namespaces

pytestmark = pytest.mark.slow  # a reference run and a 2-host run


def test_a_slow_link_makes_data_parallel_mostly_communication_and_the_table_says_so(small_data, tmp_path):
    require_namespaces()
    command = [sys.executable, "-m", "algorithms.interconnect.network_cost"]
    command += ["--strategies", "torch-data", "--rates", "10mbit"]
    command += [
        "--steps",
        "5",
        "--repeats",
        "1",
        "--batch_size",
        "32",
        "--train",
        str(small_data / "train.csv"),
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (table,) = tmp_path.glob("*-network-cost.csv")
    (row,) = list(csv.DictReader(open(table)))
    assert (row["strategy"], row["rate"], row["steps"]) == ("torch-data", "10mbit", "2")
    assert float(row["comm_share"]) > 0.5 and float(row["comm_ms"]) > 500, row  # 1 MB each way at 1.25 MB/s
    assert float(row["speedup"]) < 1  # the two hosts lose to one process: the network is the bottleneck
    (page,) = tmp_path.glob("*-network-cost.md")
    text = page.read_text()
    assert "Machine: " in text and "Load average before: " in text and "| torch-data | 10mbit |" in text
    assert list(tmp_path.glob("*-network-cost.png"))


def test_a_strategy_it_cannot_run_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "algorithms.interconnect.network_cost", "--strategies", "torch-ps"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("--strategies: torch-ps is not one of torch-data, torch-localsgd, tensorflow-data")
    )
