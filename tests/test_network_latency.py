"""algorithms/interconnect/network_latency.py for real, short: torch data parallel on 2 hosts whose packets
the delay line holds 20 ms each way takes at least a round trip (40 ms) longer per batch
than through the delay line at 0 ms (each step's all-reduce waits for the other host), ping
measures the round trip the delay sets, the synchronous run ends at the same loss whatever
the delay, and the table, the CSV and the plot are written with the machine and `uptime`."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers.netns import require_namespaces

pytestmark = pytest.mark.slow  # a reference run and two 2-host runs


def test_a_delay_costs_data_parallel_a_round_trip_per_batch_and_not_its_loss(small_data, tmp_path):
    require_namespaces()
    command = [sys.executable, "-m", "algorithms.interconnect.network_latency"]
    command += ["--strategies", "torch-data", "--delays", "0,20"]
    command += [
        "--steps",
        "6",
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
    (table,) = tmp_path.glob("*-latency.csv")
    at = {row["delay_ms"]: row for row in csv.DictReader(open(table))}
    assert sorted(at) == ["0", "20"]
    assert abs(float(at["20"]["rtt_ms"]) - 40) <= 4 and float(at["0"]["rtt_ms"]) < 0.5, at
    assert float(at["20"]["batch_ms"]) >= float(at["0"]["batch_ms"]) + 40, at
    assert at["20"]["final_loss"] == at["0"]["final_loss"]  # synchronous: the delay changes when, not what
    assert int(at["20"]["frames"]) > 0 and at["20"]["late_p99_ms"] != "", at
    (page,) = tmp_path.glob("*-latency.md")
    text = page.read_text()
    assert "Machine: " in text and "`uptime` before: `" in text and "load average:" in text
    assert "| torch-data | 0 ms | " in text and "| torch-data | 20 ms | " in text
    assert list(tmp_path.glob("*-latency.png"))


def test_a_strategy_it_does_not_run_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "algorithms.interconnect.network_latency", "--strategies", "torch-async"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--strategies: torch-async is not one of "
            + ", ".join(
                ["torch-data", "torch-localsgd-4", "torch-localsgd-16", "torch-ps", "tensorflow-data", "tensorflow-ps"]
            )
        )
    )
