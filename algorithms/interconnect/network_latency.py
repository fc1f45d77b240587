"""What network latency costs each multi-host strategy: the same 2-host run on the rehearsal
cluster (scripts/netns_cluster.py) with a one-way delay added to every packet between the
hosts by the delay line (scripts/delay_line.py), from none (the bridge) through 0 ms (the
delay line's own cost) to 20 ms.

    sudo .venv/bin/python -m algorithms.interconnect.network_latency [--delays none,0,1,5,20]
        [--strategies torch-data,torch-localsgd-4,torch-localsgd-16,torch-ps,tensorflow-data,tensorflow-ps]
        [--steps 40] [--batch_size 100] [--repeats 2] [--out results/benchmark]

The strategies, 2 hosts with 1 thread per process (the 2 cores of this machine):
torch `data` and `localsgd --sync_every K` (K = 4, 16), 1 rank per host, launched as
docs/parallel.md shows (torch_wrapper.agent, the c10d rendezvous on host 0); torch `ps`
(the coordinator, the server and worker 0 on host 0, worker 1 on host 1 by
torch_wrapper.asynchronous.ps_worker); TensorFlow `data` (one TF_CONFIG worker per host) and `ps` (the
chief, the parameter server and worker 0 on host 0, worker 1 on host 1). The `ps` runs
are asynchronous, at --learning_rate 0.025 (the preset's 0.05 / 2 workers: at 0.05, `ps`
on 2 workers fell back to chance accuracy, docs/parallel.md), and make 2 updates of half a batch per global
batch, so they run 2 x --steps updates: every run sees the same samples.
Per strategy and delay it reports ms per global batch (the wall time between the CSV's
rows after the warm-up, per batch of --batch_size samples), the mean time communicating
per row, the final loss (the mean loss of the last global batch's rows), for `ps` the
mean staleness and worker 1's share of the updates, the median ping round trip measured
through the cluster before the run, how late the delay line sent its frames (99th
percentile), and the speedup over one process with one thread (`--strategy single
--threads 1`, run first). Each strategy runs every delay once, then again (--repeats
times in all), and the fastest run of each delay is reported: with one thread per process,
a burst of other work on either core slows a whole run, and it then hits one run of
several delays, not every run of one. Written to --out as <date>-latency.md (the tables,
the machine, `uptime` before and after), .csv (one row per strategy and delay) and .png
(ms per batch against the delay). Needs root, like the cluster.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from algorithms.interconnect.hosts import (
    NETWORK,
    TF_PORT,
    TORCH_RDZV_PORT,
    check_strategies,
    csv_name,
    machine,
    number,
    parser_for,
    reference_run,
    run_on_hosts,
    write_csv,
)
from algorithms.paths import DEFAULT_TRAIN, REPO_ROOT
from algorithms.records import WARMUP_STEPS, read_rows
from algorithms.dataset.data import ensure_default_data
from scripts.netns_cluster import Cluster
from scripts.ping import round_trips_ms

DEFAULT_DELAYS = ("none", "0", "1", "5", "20")
PS_ENDPOINT_PORT = 29500
PS_WORKERS = 2
PS_LEARNING_RATE = "0.025"
PINGS = 11  # the first also resolves the address (ARP): not counted
LOADED = 3.0  # a load average above this on 2 cores: the table says so
COLUMNS = (
    "strategy",
    "delay_ms",
    "rtt_ms",
    "batch_ms",
    "comm_ms",
    "final_loss",
    "staleness",
    "worker1_share",
    "speedup",
    "late_p99_ms",
    "frames",
    "load",
)


@dataclass(frozen=True)
class Strategy:
    framework: str  # torch or tensorflow
    kind: str  # --strategy
    extra: tuple = ()  # its own flags

    @property
    def rows_per_batch(self) -> int:
        """CSV rows per global batch: ps applies one update per worker's share."""
        return PS_WORKERS if self.kind == "ps" else 1


STRATEGIES = {
    "torch-data": Strategy("torch", "data"),
    "torch-localsgd-4": Strategy("torch", "localsgd", ("--sync_every", "4")),
    "torch-localsgd-16": Strategy("torch", "localsgd", ("--sync_every", "16")),
    "torch-ps": Strategy("torch", "ps", ("--learning_rate", PS_LEARNING_RATE)),
    "tensorflow-data": Strategy("tensorflow", "data"),
    "tensorflow-ps": Strategy("tensorflow", "ps", ("--learning_rate", PS_LEARNING_RATE, "--ps_tasks", "1")),
}


def run_flags(strategy: Strategy, args, results: str) -> list:
    return [
        *("--strategy", strategy.kind, "--devices", "1" if strategy.kind == "single" else "2", *strategy.extra),
        *("--train", args.train, "--test", "none", "--batch_size", str(args.batch_size)),
        *("--max_steps", str(args.steps * strategy.rows_per_batch), "--threads", "1"),
        *("--results_dir", results, "--quiet"),
    ]


def tf_task(spec: dict, kind: str, index: int, flags: list) -> list:
    config = json.dumps({"cluster": spec, "task": {"type": kind, "index": index}})
    return ["env", f"TF_CONFIG={config}", sys.executable, os.path.join(REPO_ROOT, "tensorflow_script.py"), *flags]


def tasks(strategy: Strategy, args, folders: list, addresses: list) -> list:
    """(host, command, whether the run ends with it) for each process of the run; the
    others (TensorFlow's ps and workers) serve until they are stopped."""
    first = addresses[0]
    if strategy.framework == "torch" and strategy.kind == "ps":
        across = ["--ps_endpoint", f"{first}:{PS_ENDPOINT_PORT}", "--remote_workers", "1"]
        return [
            (0, [sys.executable, os.path.join(REPO_ROOT, "torch_script.py"), *run_flags(strategy, args, folders[0])]
             + across, True),
            (1, [sys.executable, "-m", "torch_wrapper.asynchronous.ps_worker", "--worker", "1",
                 *run_flags(strategy, args, folders[1]), *across], True),
        ]  # fmt: skip
    if strategy.framework == "torch":
        agent = [sys.executable, "-m", "torch_wrapper.agent", "--nnodes", "2", "--nproc_per_node", "1"]
        agent += ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{first}:{TORCH_RDZV_PORT}", "--rdzv_id", "latency"]
        script = os.path.join(REPO_ROOT, "torch_script.py")
        return [(host, [*agent, script, *run_flags(strategy, args, folders[host])], True) for host in range(2)]
    if strategy.kind == "data":
        spec = {"worker": [f"{address}:{TF_PORT}" for address in addresses]}
        return [
            (host, tf_task(spec, "worker", host, run_flags(strategy, args, folders[host])), True) for host in (0, 1)
        ]
    spec = {
        "chief": [f"{first}:{TF_PORT}"],
        "worker": [f"{first}:{TF_PORT + 2}", f"{addresses[1]}:{TF_PORT}"],
        "ps": [f"{first}:{TF_PORT + 1}"],
    }
    chief = (0, tf_task(spec, "chief", 0, run_flags(strategy, args, folders[0])), True)
    serving = [  # (host, task type, index): each with a results folder of its own, which it leaves empty
        (host, tf_task(spec, kind, index, run_flags(strategy, args, f"{folders[host]}-{kind}{index}")), False)
        for host, kind, index in ((0, "ps", 0), (0, "worker", 0), (1, "worker", 1))
    ]
    return [chief, *serving]


def measure(strategy: Strategy, folders: list) -> dict:
    """From the CSV of whichever host recorded the run: after the warm-up, ms per global batch
    (wall time), mean ms communicating per row, the last batch's mean loss, ps's staleness."""
    written = [os.path.join(folder, csv_name(strategy.framework)) for folder in folders]
    path = next(path for path in written if os.path.exists(path))
    rows = [r for r in read_rows(path) if r["phase"] == "train"]
    per_batch = strategy.rows_per_batch
    start = WARMUP_STEPS * per_batch  # the row whose end the measured span starts at
    steady = rows[start:]
    span_s = steady[-1]["wall_time_s"] - rows[start - 1]["wall_time_s"]
    comm = [r["comm_time_ms"] for r in steady if r["comm_time_ms"] is not None]
    measured = {
        "batch_ms": 1e3 * span_s / len(steady) * per_batch,
        "comm_ms": statistics.mean(comm) if comm else None,
        "final_loss": statistics.mean(r["loss"] for r in rows[-per_batch:]),
        "staleness": None,
        "worker1_share": None,
    }
    if strategy.kind == "ps":
        measured["staleness"] = statistics.mean(int(r["staleness"]) for r in steady)
        measured["worker1_share"] = sum(int(r["worker"]) == 1 for r in rows) / len(rows)
    return measured


def delay_line_numbers(report: str) -> tuple:
    """(frames forwarded, how late the 99th percentile was sent in ms) from the delay line's last line."""
    found = re.match(r"forwarded (\d+) frames, .* p99 ([\d.]+) ms", report or "")
    return (int(found.group(1)), float(found.group(2))) if found else (None, None)


def two_hosts(name: str, delay: str, args, scratch: str, repeat: int) -> dict:
    strategy = STRATEGIES[name]
    label = f"{name}-{delay}-{repeat}"
    folders = [os.path.join(scratch, label, f"host{host}", "results") for host in range(2)]
    load_at_start = open("/proc/loadavg").read().split()[0]
    with Cluster(2, delay_ms=None if delay == "none" else float(delay)) as cluster:
        round_trips = round_trips_ms(cluster, 0, cluster.addresses[1], count=PINGS)[1:]
        run_on_hosts(cluster, tasks(strategy, args, folders, cluster.addresses), scratch, label)
    measured = measure(strategy, folders)
    frames, late_p99_ms = delay_line_numbers(cluster.delay_line_report)
    return {
        **measured,
        "rtt_ms": statistics.median(r for r in round_trips if r is not None),
        "late_p99_ms": late_p99_ms,
        "frames": frames,
        "load": load_at_start,
    }


def one_host(args, scratch: str) -> dict:
    """The reference: one process, one thread, on this machine's own network."""
    single = Strategy("torch", "single")
    results = os.path.join(scratch, "single", "results")
    reference_run(run_flags(single, args, results), scratch)
    return measure(single, [results])


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def one_minute_load(uptime_line: str) -> float:
    return float(uptime_line.split("load average:")[1].split(",")[0])


def delay_label(delay: str) -> str:
    return "none (bridge)" if delay == "none" else f"{delay} ms"


def write_outputs(rows: list, reference: dict, args, before: str, after: str) -> list:
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{datetime.date.today().isoformat()}-latency")
    write_csv(stem + ".csv", COLUMNS, rows)
    mine = {(row["strategy"], row["delay_ms"]): row for row in rows}
    loads = [one_minute_load(before), one_minute_load(after)] + [float(row["load"]) for row in rows]
    lines = [
        f"# What network latency costs each strategy ({datetime.date.today().isoformat()})",
        "",
        f"`.venv/bin/python -m algorithms.interconnect.network_latency --delays {','.join(args.delays)} "
        f"--strategies {','.join(args.strategies)} --steps {args.steps} --batch_size {args.batch_size} "
        f"--repeats {args.repeats}` (as root)",
        "",
        f"Machine: {machine()}.",
        "",
        f"`uptime` before: `{before}`; after: `{after}`.",
    ]
    if max(loads) > LOADED:
        lines += [
            "",
            f"**Loaded machine**: the 1-minute load average reached {max(loads):.1f} on 2 cores during these "
            "runs (other work shared the cores): absolute times are slower and noisier than on an idle machine; "
            "compare the ratios within this table, not with other tables.",
        ]
    lines += [
        "",
        f"2 hosts (network namespaces) x 1 thread per process; {NETWORK}, global batch {args.batch_size}, "
        f"{args.steps} batches (`ps`: {PS_WORKERS * args.steps} updates of half a batch, asynchronous, "
        f"--learning_rate {PS_LEARNING_RATE}); ms per batch from the wall time after the {WARMUP_STEPS} warm-up "
        f"batches, the fastest of {args.repeats} run(s); loss: the mean of the last batch's rows. Delay: one way, "
        "added to every packet by scripts/delay_line.py (none: the kernel's bridge, no delay line; 0 ms: the "
        "delay line's own cost). One process with one thread on one host: "
        f"{number(reference['batch_ms'])} ms/batch.",
        "",
        "ms per batch (final loss):",
        "",
        "| strategy | " + " | ".join(delay_label(d) for d in args.delays) + " | 20 ms / 0 ms |",
        "| --- | " + " | ".join("---:" for _ in args.delays) + " | ---: |",
    ]
    for strategy in args.strategies:
        cells = [
            f"{number(mine[(strategy, d)]['batch_ms'], 0)} ({mine[(strategy, d)]['final_loss']:.3f})"
            for d in args.delays
        ]
        ends = [mine.get((strategy, d)) for d in ("0", "20")]
        ratio = f"{ends[1]['batch_ms'] / ends[0]['batch_ms']:.2f}x" if all(ends) else "-"
        lines.append(f"| {strategy} | " + " | ".join(cells) + f" | {ratio} |")
    lines += [
        "",
        "Each run: the ping round trip through the cluster before it (median of 10), the mean ms communicating "
        "per CSV row, `ps`'s mean staleness and worker 1's (the remote worker's) share of the updates, the "
        "speedup over one process, the delay line's 99th-percentile lateness and the frames it forwarded in the "
        "whole run (start-up included), and the 1-minute load average at the run's start:",
        "",
        "| strategy | delay | ping rtt ms | ms/batch | comm ms/row | final loss | staleness | worker 1 share "
        "| speedup | late p99 ms | frames | load |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['strategy']} | {delay_label(row['delay_ms'])} | {number(row['rtt_ms'], 2)} "
            f"| {number(row['batch_ms'])} | {number(row['comm_ms'])} | {row['final_loss']:.4f} "
            f"| {number(row['staleness'], 2)} | {number(row['worker1_share'], 2)} | {number(row['speedup'], 2)} "
            f"| {number(row['late_p99_ms'], 2)} | {row['frames'] if row['frames'] is not None else '-'} "
            f"| {row['load']} |"
        )
    with open(stem + ".md", "w") as handle:
        handle.write("\n".join(lines) + "\n")
    plot(rows, args, stem + ".png", after)
    return [stem + ".md", stem + ".csv", stem + ".png"]


def plot(rows: list, args, path: str, after: str) -> None:
    from algorithms.figures import pyplot, save_figure

    plt = pyplot()
    positions = {delay: index for index, delay in enumerate(args.delays)}
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for strategy in args.strategies:
        mine = [row for row in rows if row["strategy"] == strategy]
        axes.plot([positions[row["delay_ms"]] for row in mine], [row["batch_ms"] for row in mine], "o-", label=strategy)
    axes.set_xticks(range(len(args.delays)), [delay_label(delay) for delay in args.delays])
    axes.set_xlabel("one-way delay between the hosts")
    axes.set_ylabel("ms per global batch")
    axes.set_yscale("log")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    axes.set_title(f"2 hosts, batch {args.batch_size}; {after.split('load average:')[-1].strip()} (load)")
    save_figure(figure, path)


def parse_args(argv: list):
    parser = parser_for(
        "algorithms.interconnect.network_latency",
        __doc__,
        ("--delays", DEFAULT_DELAYS, "one-way delays in ms; none: the bridge, no delay line"),
        STRATEGIES,
        40,
        "global batches per run (the first 3 are warm-up)",
        "runs of each strategy and delay; the fastest is kept",
    )
    args = parser.parse_args(argv)
    args.delays = args.delays.split(",")
    check_strategies(parser, args, STRATEGIES)
    for delay in args.delays:
        try:
            if delay != "none" and float(delay) < 0:
                raise ValueError
        except ValueError:
            parser.error(f"--delays: {delay} is not a delay in ms (0 or more) or none")
    if args.steps <= WARMUP_STEPS + 1:
        parser.error(
            f"--steps {args.steps}: more than {WARMUP_STEPS + 1} (the warm-up and one), or nothing is measured"
        )
    return args


def main(argv: list) -> int:
    args = parse_args(argv)
    if args.train == DEFAULT_TRAIN:
        ensure_default_data(os.path.dirname(DEFAULT_TRAIN))
    before = uptime()
    rows = []
    with tempfile.TemporaryDirectory(prefix="network-latency-") as scratch:
        print(f"[latency] the reference: one process, one thread ({before})", flush=True)
        reference = one_host(args, scratch)
        for strategy in args.strategies:
            tries = {delay: [] for delay in args.delays}
            for repeat in range(args.repeats):  # each repeat runs every delay: a burst of load hits one try of several
                for delay in args.delays:
                    print(f"[latency] {strategy} on 2 hosts, {delay_label(delay)} one way", flush=True)
                    tries[delay].append(two_hosts(strategy, delay, args, scratch, repeat))
                    print(
                        f"  ping {number(tries[delay][-1]['rtt_ms'], 2)} ms, "
                        f"{number(tries[delay][-1]['batch_ms'])} ms/batch, loss {tries[delay][-1]['final_loss']:.4f}",
                        flush=True,
                    )
            for delay in args.delays:
                measured = min(tries[delay], key=lambda measured: measured["batch_ms"])
                speedup = reference["batch_ms"] / measured["batch_ms"]
                rows.append({"strategy": strategy, "delay_ms": delay, **measured, "speedup": speedup})
    for path in write_outputs(rows, reference, args, before, uptime()):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
