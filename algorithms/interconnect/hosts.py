"""What the two studies of the link between hosts (network_cost.py: its rate;
network_latency.py: its delay) do alike: the processes of one run started on the hosts of
the rehearsal cluster (scripts/netns_cluster.py) and waited for, the one-process
reference run, the environment every run gets, the machine line and the CSV of their
tables, and the flags both take."""

from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import time

from algorithms.machine.devices import cpu_name
from algorithms.machine.tuning import cpu_flags
from algorithms.paths import DEFAULT_TRAIN, REPO_ROOT, RESULTS_DIR

NETWORK = "cnn2d_3layer_fullconnected_3layer"
RUN_TIMEOUT_S = 900
TF_PORT = 2222
TORCH_RDZV_PORT = 29400


def csv_name(framework: str) -> str:
    return f"{NETWORK}_{framework}.csv"


def run_env(scratch: str) -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TMPDIR": scratch,
    }


def run_on_hosts(cluster, tasks: list, scratch: str, label: str) -> None:
    """Starts each (host, command, whether the run ends with it) on its host of `cluster`
    and waits for those that end the run (the others serve until the cluster stops them);
    SystemExit naming the run and the last line of the first that failed."""
    started = [
        (
            cluster.start(
                host,
                command,
                cwd=REPO_ROOT,
                env=run_env(scratch),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            ),
            ends,
        )
        for host, command, ends in tasks
    ]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    ending = [(host, process) for (process, ends), (host, _, _) in zip(started, tasks) if ends]
    outputs = [process.communicate(timeout=max(1, deadline - time.monotonic()))[0] for _, process in ending]
    for (host, process), output in zip(ending, outputs):
        if process.returncode != 0:
            last = output.strip().splitlines()[-1:] or ["(no output)"]
            raise SystemExit(f"error: {label} failed on host {host}: {last[0]}")


def reference_run(flags: list, scratch: str) -> None:
    """torch_script.py with `flags` as one process on this machine's own network (the
    reference each study's speedup is over); SystemExit with its last line if it fails."""
    command = [sys.executable, os.path.join(REPO_ROOT, "torch_script.py"), *flags]
    proc = subprocess.run(command, cwd=REPO_ROOT, env=run_env(scratch), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: the one-process reference run failed: {proc.stderr.strip().splitlines()[-1:]}")


def machine() -> str:
    flags = cpu_flags() or set()
    vector = [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in flags]
    return f"{cpu_name()}, {os.cpu_count()} cores ({', '.join(vector)}), Linux {platform.release()}"


def number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_csv(path: str, columns: tuple, rows: list) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)


def parser_for(prog: str, doc: str, varied: tuple, strategies, steps: int, steps_help: str, repeats_help: str):
    """The flags of a study: what it varies (`varied`: flag, default values, help), then
    those both take (--strategies of `strategies`, --steps, --batch_size, --repeats,
    --train, --out)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {prog}", description=doc.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    flag, defaults, help_text = varied
    parser.add_argument(flag, default=",".join(defaults), help=help_text)
    parser.add_argument("--strategies", default=",".join(strategies), help=f"of {', '.join(strategies)}")
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    parser.add_argument("--batch_size", type=int, default=100, help="the global batch")
    parser.add_argument("--repeats", type=int, default=2, help=repeats_help)
    parser.add_argument("--train", default=DEFAULT_TRAIN, help="the training CSV (default: the default data)")
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "benchmark"), help="where the table goes")
    return parser


def check_strategies(parser, args, strategies) -> None:
    """--strategies split into a list, each one of `strategies`, or the parser's error."""
    args.strategies = args.strategies.split(",")
    unknown = [strategy for strategy in args.strategies if strategy not in strategies]
    if unknown:
        parser.error(f"--strategies: {', '.join(unknown)} is not one of {', '.join(strategies)}")
