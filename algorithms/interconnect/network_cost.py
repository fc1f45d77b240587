"""What the network costs each multi-host strategy: the same 2-host run on the rehearsal
cluster (scripts/netns_cluster.py) with every cable shaped to a rate by the kernel's
token-bucket shaper (tc tbf), from unshaped (as fast as the CPU copies) down to 10 Mbit/s.

    sudo .venv/bin/python -m algorithms.interconnect.network_cost [--rates none,1gbit,100mbit,10mbit]
        [--strategies torch-data,torch-localsgd,tensorflow-data] [--steps 20] [--batch_size 100]
        [--repeats 2] [--out results/benchmark]

Each run is 2 hosts x 1 process, 1 thread each (the 2 cores of this machine, one per host),
launched as docs/parallel.md shows (torch: torch_wrapper.agent with the c10d rendezvous on
host 0; TensorFlow: one TF_CONFIG per worker). Per strategy and rate it reports the mean
step time and the mean time spent communicating (the CSV's step_time_ms and comm_time_ms
after the warm-up steps; means, since localsgd communicates on one step in four), their
ratio, samples/s, and the speedup over one process with one thread on one host
(`--strategy single --threads 1`, run first): what the two hosts gain once the network has
taken its share. Each strategy and rate runs --repeats times and the fastest run is
reported: with one thread per host, anything else on either core slows a whole run.
Written to --out as <date>-network-cost.md (the table, the machine, the load average
before and after), .csv (one row per strategy and rate) and .png (step and communication
time against the rate). A delay per packet is algorithms/interconnect/network_latency.py's (this kernel has
no netem qdisc: the delay line of scripts/delay_line.py makes it).
Needs root, like the cluster.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile

import numpy as np

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
from scripts.netns_cluster import Cluster, rate_bits

STRATEGIES = ("torch-data", "torch-localsgd", "tensorflow-data")
DEFAULT_RATES = ("none", "1gbit", "100mbit", "10mbit")
COLUMNS = ("strategy", "rate", "steps", "step_ms", "comm_ms", "comm_share", "samples_per_s", "speedup")


def common_flags(args, results: str) -> list:
    return [
        *("--train", args.train, "--test", "none", "--batch_size", str(args.batch_size)),
        *("--max_steps", str(args.steps), "--threads", "1", "--results_dir", results, "--quiet"),
    ]


def host_commands(strategy: str, args, results: list, addresses: list) -> list:
    """The command each host runs for `strategy` (framework-strategy)."""
    framework, kind = strategy.split("-")
    if framework == "torch":
        return [
            [
                *(sys.executable, "-m", "torch_wrapper.agent", "--nnodes", "2", "--nproc_per_node", "1"),
                *("--rdzv_backend", "c10d", "--rdzv_endpoint", f"{addresses[0]}:{TORCH_RDZV_PORT}"),
                *("--rdzv_id", "network-cost", os.path.join(REPO_ROOT, "torch_script.py")),
                *("--strategy", kind, "--devices", "2", *common_flags(args, results[index])),
            ]
            for index in range(2)
        ]
    workers = {"worker": [f"{address}:{TF_PORT}" for address in addresses]}
    return [
        [
            "env",
            "TF_CONFIG=" + json.dumps({"cluster": workers, "task": {"type": "worker", "index": index}}),
            *(sys.executable, os.path.join(REPO_ROOT, "tensorflow_script.py")),
            *("--strategy", kind, "--devices", "2", *common_flags(args, results[index])),
        ]
        for index in range(2)
    ]


def steady_rows(folders: list, framework: str) -> list:
    """The train rows after the warm-up of whichever host recorded the run."""
    for folder in folders:
        path = os.path.join(folder, csv_name(framework))
        if os.path.exists(path):
            return [r for r in read_rows(path) if r["phase"] == "train" and r["step"] > WARMUP_STEPS]
    return []


def means(rows: list, batch: int) -> dict:
    """Means, not medians: localsgd communicates on one step in K, and its cost is the mean's."""
    step = float(np.mean([r["step_time_ms"] for r in rows]))
    comm = [r["comm_time_ms"] for r in rows if r["comm_time_ms"] is not None]
    comm_ms = float(np.mean(comm)) if comm else None
    return {
        "steps": len(rows),
        "step_ms": step,
        "comm_ms": comm_ms,
        "comm_share": comm_ms / step if comm_ms is not None else None,
        "samples_per_s": batch * 1000.0 / step,
    }


def one_process(args, scratch: str) -> dict:
    """The reference: one process, one thread, one host (the machine's own namespace)."""
    results = os.path.join(scratch, "single", "results")
    reference_run(["--strategy", "single", *common_flags(args, results)], scratch)
    return means(steady_rows([results], "torch"), args.batch_size)


def two_hosts(strategy: str, rate: str, args, scratch: str, repeat: int = 0) -> dict:
    framework = strategy.split("-")[0]
    label = f"{strategy}-{rate}-{repeat}"
    folders = [os.path.join(scratch, label, f"host{index}", "results") for index in range(2)]
    with Cluster(2, None if rate == "none" else rate) as cluster:
        commands = host_commands(strategy, args, folders, cluster.addresses)
        run_on_hosts(cluster, [(index, command, True) for index, command in enumerate(commands)], scratch, label)
    return means(steady_rows(folders, framework), args.batch_size)


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def write_outputs(rows: list, reference: dict, args, before: str, after: str) -> list:
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"{datetime.date.today().isoformat()}-network-cost")
    write_csv(stem + ".csv", COLUMNS, rows)
    lines = [
        f"# What the network costs each strategy ({datetime.date.today().isoformat()})",
        "",
        f"`.venv/bin/python -m algorithms.interconnect.network_cost --rates {','.join(args.rates)} "
        f"--strategies {','.join(args.strategies)} --steps {args.steps} --batch_size {args.batch_size} "
        f"--repeats {args.repeats}` (as root)",
        "",
        f"Machine: {machine()}. Load average before: {before}; after: {after}.",
        f"2 hosts (network namespaces on a bridge) x 1 process, 1 thread each; {NETWORK}, global batch "
        f"{args.batch_size}, means of steps {WARMUP_STEPS + 1}-{args.steps}, the fastest of {args.repeats} runs "
        "(one thread per host: a stray process on either core slows a whole run). Each cable shaped both ways "
        "by `tc qdisc ... tbf` at the rate (none: unshaped). The reference, one process with one thread: "
        f"{number(reference['step_ms'])} ms/step, {number(reference['samples_per_s'])} samples/s.",
        "",
        "| strategy | rate | step ms | comm ms | comm share | samples/s | speedup vs 1 process |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        share = "-" if row["comm_share"] is None else f"{100 * row['comm_share']:.0f}%"
        lines.append(
            f"| {row['strategy']} | {row['rate']} | {number(row['step_ms'])} | {number(row['comm_ms'])} | {share} "
            f"| {number(row['samples_per_s'])} | {number(row['speedup'], 2)} |"
        )
    with open(stem + ".md", "w") as handle:
        handle.write("\n".join(lines) + "\n")
    plot(rows, args, stem + ".png")
    return [stem + ".md", stem + ".csv", stem + ".png"]


def plot(rows: list, args, path: str) -> None:
    from algorithms.figures import pyplot, save_figure

    plt = pyplot()
    positions = {rate: index for index, rate in enumerate(args.rates)}
    figure, (steps, comms) = plt.subplots(1, 2, figsize=(11, 4.2))
    for strategy in args.strategies:
        mine = [row for row in rows if row["strategy"] == strategy]
        x = [positions[row["rate"]] for row in mine]
        steps.plot(x, [row["step_ms"] for row in mine], marker="o", label=strategy)
        comms.plot(x, [row["comm_ms"] or 0.0 for row in mine], marker="o", label=strategy)
    for axes, title in ((steps, "mean step time (ms)"), (comms, "mean time communicating (ms)")):
        axes.set_xticks(range(len(args.rates)), args.rates)
        axes.set_xlabel("link rate (tc tbf; none: unshaped)")
        axes.set_yscale("log")
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle(f"2 hosts x 1 process, batch {args.batch_size}, load {load()}")
    save_figure(figure, path)


def parse_args(argv: list):
    parser = parser_for(
        "algorithms.interconnect.network_cost",
        __doc__,
        ("--rates", DEFAULT_RATES, "link rates, as tc writes them; none: unshaped"),
        STRATEGIES,
        20,
        "steps per run (the first 3 are warm-up)",
        "runs of each strategy and rate; the fastest is reported (best of N)",
    )
    args = parser.parse_args(argv)
    args.rates = args.rates.split(",")
    check_strategies(parser, args, STRATEGIES)
    for rate in args.rates:
        if rate != "none":
            try:
                rate_bits(rate)
            except ValueError as error:
                parser.error(str(error))
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps {args.steps}: more than the {WARMUP_STEPS} warm-up steps, or nothing is measured")
    return args


def main(argv: list) -> int:
    args = parse_args(argv)
    if args.train == DEFAULT_TRAIN:
        ensure_default_data(os.path.dirname(DEFAULT_TRAIN))
    before = load()
    rows = []
    with tempfile.TemporaryDirectory(prefix="network-cost-") as scratch:
        print(f"[network cost] the reference: one process, one thread (load {before})", flush=True)
        reference = one_process(args, scratch)
        for strategy in args.strategies:
            for rate in args.rates:
                print(f"[network cost] {strategy} on 2 hosts, links at {rate}", flush=True)
                tries = [two_hosts(strategy, rate, args, scratch, repeat) for repeat in range(args.repeats)]
                measured = min(tries, key=lambda measured: measured["step_ms"])
                speedup = measured["samples_per_s"] / reference["samples_per_s"]
                rows.append({"strategy": strategy, "rate": rate, **measured, "speedup": speedup})
                print(
                    f"  {number(measured['step_ms'])} ms/step, {number(measured['comm_ms'])} ms communicating, "
                    f"speedup {speedup:.2f}",
                    flush=True,
                )
    for path in write_outputs(rows, reference, args, before, load()):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
