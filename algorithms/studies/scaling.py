"""The scaling report: one strategy at 1, 2, ... devices for each chosen framework,
each run a real entry-script process (the 1-device run is `--strategy single`),
read back from the CSVs they wrote, then one table: ms/step, samples/s, speedup,
scaling efficiency, and the measured communication time next to the bytes a ring
all-reduce must move per step (2 (K - 1) / K x gradient bytes). The verdict uses
the seeds' rule: under 1.5x at 2 devices, adding devices does not pay.

    python scaling_report.py --frameworks torch,tensorflow --devices 1,2 --max_steps 20 [entry-script flags]

Works with any framework of the registry (algorithms/registry/frameworks.py) whose entry script accepts
`--strategy STRATEGY --devices N`; a framework that refuses is reported, not fatal.

Threads: on a CPU machine one device is --threads_per_device cores (T); each run gets
--threads T x its devices, which its processes or logical devices share, T each (torchrun's
ranks, Hogwild's and the parameter server's workers, TensorFlow's cluster tasks, one
process's intra-op pool over N logical devices), as its results.log says.

The asynchronous strategies (ps, async) apply N updates of 1/N batch per global batch,
and their workers overlap: their --max_steps is N x the report's (the same samples
seen), and their throughput comes from the rows' wall time (updates/s x samples per
update), not from one update's time. Every row also shows updates/s, the staleness of
the applied updates (median, 95th percentile), the last validation accuracy and the
run's wall time, so strategies can be set side by side at equal samples seen.
"""

from __future__ import annotations

import csv
import os
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Optional

from algorithms.figures import grid_and_legend, pyplot, save_figure
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR, InputError
from algorithms.registry.frameworks import NAMES, framework_names, get
from algorithms.network.parallel import STRATEGIES, ring_allreduce_bytes
from algorithms.paths import RESULTS_DIR
from algorithms.config.argv import without_flags
from algorithms.session.faults import NEAR_CHANCE
from algorithms.records import WARMUP_STEPS, read_log_field, steady_state_ms, update_rates
from algorithms.run.entry import prepare
from algorithms.session.run_session import new_run_id
from algorithms.studies import children
from algorithms.tables import number, text_table

WORTH_IT_AT_TWO = 1.5  # the seeds' rule: a second device must give at least this speedup
DEFAULT_MAX_STEPS = 20
# set by the report for each run, so a user's copy would only be overridden
OWN_FLAGS = ("--strategy", "--devices", "--results_dir", "--results_log", "--run_id", "--max_steps")
OWN_SWITCHES = ("--quiet",)


@dataclass
class ScalingRow:
    framework: str
    devices: int
    strategy: str
    status: str
    ms_per_step: Optional[float] = None
    samples_per_sec: Optional[float] = None
    speedup: Optional[float] = None
    efficiency: Optional[float] = None
    comm_ms: Optional[float] = None  # median measured communication per step
    predicted_allreduce_mb: Optional[float] = None  # ring all-reduce volume each replica sends per step
    effective_mb_per_s: Optional[float] = None  # predicted volume / measured communication time
    updates_per_sec: Optional[float] = None  # applied updates per second of wall time
    staleness_median: Optional[float] = None
    staleness_p95: Optional[float] = None
    val_accuracy: Optional[float] = None  # the last validation pass
    wall_s: Optional[float] = None  # from the session's start to its last row
    threads: Optional[int] = None  # the run's --threads: --threads_per_device x its devices
    near_chance: bool = False  # the run ended where a net that learned nothing would (its results.log says so)


ASYNCHRONOUS = ("ps", "async")  # each worker's 1/N share of a batch is an update of its own


def without_strategy_flags(forwarded: list) -> list:
    """`forwarded` minus --ps_sync and --sync_every K, which only their strategy takes
    (the 1-device run is --strategy single)."""
    return without_flags(forwarded, "--sync_every", "--ps_sync")


def updates_per_batch(strategy: str, devices: int, forwarded: list) -> int:
    return devices if strategy in ASYNCHRONOUS and devices > 1 and "--ps_sync" not in forwarded else 1


def replicas_of(strategy: str, devices: int, group: int) -> int:
    """Data-parallel copies whose gradients are all-reduced (the prediction applies to them only)."""
    return devices if strategy == "data" else devices // group if strategy == "hybrid" else 1


def parse_args(argv: list):
    parser = children.study_parser(
        "scaling_report.py",
        description="Run a strategy at 1, 2, ... devices per framework; print the "
        "scaling table. Every other flag goes to each entry script.",
    )
    parser.add_argument("--frameworks", default="torch", help=f"comma-separated: {', '.join(NAMES)}")
    parser.add_argument("--strategy", default="data", choices=[s for s in STRATEGIES if s != "single"])
    parser.add_argument("--devices", default="1,2", help="comma-separated device counts; 1 runs --strategy single")
    parser.add_argument("--max_steps", default=str(DEFAULT_MAX_STEPS), help="steps per run")
    parser.add_argument(
        "--threads_per_device",
        type=int,
        default=None,
        help="on a CPU machine one 'device' is this many cores: a run on N devices gets --threads N x this, "
        "which its processes or devices share, this many each (default: cores / the largest device count)",
    )
    parser.add_argument(
        "--results_dir",
        default=RESULTS_DIR,
        help="the report goes to RESULTS_DIR/scaling/<id>.{csv,png}, its runs under <id>/",
    )
    parser.add_argument("--run_id", default=None, help="names the report (default: time + random)")
    args, forwarded = children.parse_study_flags(parser, argv)
    frameworks = framework_names(parser, args.frameworks, "--frameworks")
    try:
        devices = sorted({int(text) for text in args.devices.split(",")})
    except ValueError:
        parser.error(f"--devices {args.devices}: expected whole numbers like 1,2,4")
    if devices[0] < 1:
        parser.error(f"--devices {args.devices}: counts must be 1 or more")
    if args.threads_per_device is None:
        args.threads_per_device = max(1, (os.cpu_count() or 1) // devices[-1])
    if args.threads_per_device < 1:
        parser.error(f"--threads_per_device {args.threads_per_device}: must be 1 or more")
    if any(flag == "--threads" or flag.startswith("--threads=") for flag in forwarded):
        parser.error("--threads: the report gives each run --threads_per_device x its devices; pass that instead")
    return frameworks, args, devices, forwarded


def run_one(
    name: str, strategy: str, devices: int, forwarded: list, directory: str, report_id: str, threads: int, network: str
):
    """One entry-script process at `threads` per device (--threads is a run's in total: its
    processes or devices share them, threads each); returns (exit status, its rows, the
    diagnostics line of its results.log block)."""
    results_dir = os.path.join(directory, f"{name}_x{devices}")
    run_id = f"{report_id}-{name}-x{devices}"
    results_log = os.path.join(directory, "results.log")
    flags = [
        *(without_strategy_flags(forwarded) if devices == 1 else forwarded),
        "--threads",
        str(threads * devices),
        "--strategy",
        "single" if devices == 1 else strategy,
        "--devices",
        str(devices),
        "--results_dir",
        results_dir,
        "--results_log",
        results_log,
        "--run_id",
        run_id,
        "--quiet",
    ]
    if updates_per_batch(strategy, devices, forwarded) > 1:  # the same samples as the others' steps
        steps = int(flags[flags.index("--max_steps") + 1]) * devices
        flags[flags.index("--max_steps") + 1] = str(steps)
    code, _ = children.run_framework(name, flags, f"  {name} x{devices}", quiet=True)
    framework = get(name)
    diagnostics = read_log_field(results_log, run_id, f"{framework.framework}/{framework.backend}", "diagnostics")
    return code, children.run_rows(children.results_csv(results_dir, network, name), run_id), diagnostics or ""


def summarize(
    name: str,
    strategy: str,
    devices: int,
    code: int,
    rows: list,
    param_count: int,
    group: int,
    diagnostics: str = "",
    threads: Optional[int] = None,
) -> ScalingRow:
    """`rows`: the run's rows (train and val); `diagnostics`: its results.log's line;
    `threads`: the run's --threads."""
    train = [row for row in rows if row["phase"] == "train"]
    val = [row for row in rows if row["phase"] == "val"]
    if code != 0 or not train:
        return ScalingRow(name, devices, "single" if devices == 1 else strategy, f"failed (exit {code})")
    rates = update_rates(train)
    ms = steady_state_ms([row["step_time_ms"] for row in train])
    samples_per_sec = train[0]["global_batch"] * 1000.0 / ms
    overlapping = train[0]["strategy"] in ASYNCHRONOUS and len({row["worker"] for row in train}) > 1
    if overlapping and rates["updates_per_sec"]:  # one update's time says nothing of N overlapping workers
        samples_per_update = statistics.median(row["samples_per_sec"] * row["step_time_ms"] / 1000.0 for row in train)
        samples_per_sec = rates["updates_per_sec"] * samples_per_update
        ms = train[0]["global_batch"] * 1000.0 / samples_per_sec  # per global batch's worth of samples
    comm = [row["comm_time_ms"] for row in train[WARMUP_STEPS:] or train if row["comm_time_ms"] is not None]
    replicas = replicas_of(strategy, devices, group) if devices > 1 else 1
    predicted = ring_allreduce_bytes(param_count, replicas) / 1e6 if replicas > 1 else None
    comm_ms = statistics.median(comm) if comm else None
    return ScalingRow(
        name,
        devices,
        train[0]["strategy"],
        "ok",
        ms,
        samples_per_sec,
        comm_ms=comm_ms,
        predicted_allreduce_mb=predicted,
        effective_mb_per_s=predicted / comm_ms * 1000.0 if predicted and comm_ms else None,
        **rates,
        val_accuracy=val[-1]["accuracy"] if val else None,
        wall_s=max(row["wall_time_s"] for row in rows if row["wall_time_s"] is not None),
        threads=threads,
        near_chance=NEAR_CHANCE in diagnostics,
    )


def add_speedups(rows: list) -> None:
    """Speedup against the same framework's 1-device run (same global batch); none where
    either run ended near chance: a run that learned nothing is no training to speed up."""
    for row in rows:
        base = next((r for r in rows if r.framework == row.framework and r.devices == 1 and r.ms_per_step), None)
        if base and row.ms_per_step and not (row.near_chance or base.near_chance):
            row.speedup = base.ms_per_step / row.ms_per_step
            row.efficiency = row.speedup / row.devices


def verdicts(rows: list) -> list:
    lines = []
    for name in dict.fromkeys(row.framework for row in rows):
        two = next((r for r in rows if r.framework == name and r.devices == 2 and r.speedup), None)
        chance = [r for r in rows if r.framework == name and r.near_chance]
        if chance:
            lines.append(
                f"{name}: no speedup judged: "
                + ", ".join(f"x{r.devices} ({r.strategy}, val acc {number(r.val_accuracy, '.4f')})" for r in chance)
                + " ended near chance (their results.log says why): a run that learns nothing is no training to "
                "speed up; give the runs more steps (--max_steps), or fix what stops them learning"
            )
        elif two is None:
            lines.append(f"{name}: no 1- and 2-device pair to judge")
        elif two.speedup < WORTH_IT_AT_TWO:
            lines.append(
                f"{name}: {two.speedup:.2f}x at 2 devices (< {WORTH_IT_AT_TWO}x): don't add more devices "
                "for this network and batch; a bigger batch or model may change that"
            )
        else:
            widest = max((r for r in rows if r.framework == name and r.speedup), key=lambda r: r.devices)
            lines.append(
                f"{name}: {two.speedup:.2f}x at 2 devices (>= {WORTH_IT_AT_TWO}x): scaling pays; "
                f"{widest.efficiency:.0%} efficiency at {widest.devices} devices"
            )
    return lines


def format_table(rows: list) -> str:
    header = (
        "framework",
        "devices",
        "strategy",
        "ms/step",
        "samples/s",
        "speedup",
        "efficiency",
        "comm ms",
        "ring all-reduce MB",
        "effective MB/s",
        "updates/s",
        "stale p50/p95",
        "val acc",
        "wall s",
        "threads",
    )

    def cell(value, spec):
        return number(value, spec, missing="-")

    lines = [
        (
            r.framework,
            str(r.devices),
            r.strategy if r.status == "ok" else r.status,
            cell(r.ms_per_step, ".1f"),
            cell(r.samples_per_sec, ".0f"),
            cell(r.speedup, ".2f"),
            cell(r.efficiency, ".0%"),
            cell(r.comm_ms, ".1f"),
            cell(r.predicted_allreduce_mb, ".2f"),
            cell(r.effective_mb_per_s, ".0f"),
            cell(r.updates_per_sec, ".1f"),
            "-" if r.staleness_median is None else f"{r.staleness_median:g}/{r.staleness_p95:g}",
            cell(r.val_accuracy, ".4f") + (" chance" if r.near_chance else ""),
            cell(r.wall_s, ".1f"),
            cell(r.threads, "d"),
        )
        for r in rows
    ]
    return "\n".join(text_table(header, lines, left=3, rule=True))


def write_csv(rows: list, path: str) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def plot_png(rows: list, path: str, title: str) -> None:
    plt = pyplot()
    figure, (time_axis, speed_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(dict.fromkeys(r.framework for r in rows))
    width = 0.8 / len(names)
    for offset, name in enumerate(names):
        mine = [r for r in rows if r.framework == name and r.ms_per_step]
        if not mine:  # every run of it failed: its table row says so, it has no bar
            continue
        positions = [r.devices + (offset - (len(names) - 1) / 2) * width for r in mine]
        comm = [r.comm_ms or 0.0 for r in mine]
        bars = time_axis.bar(positions, [r.ms_per_step - c for r, c in zip(mine, comm)], width, label=f"{name} compute")
        time_axis.bar(
            positions,
            comm,
            width,
            bottom=[r.ms_per_step - c for r, c in zip(mine, comm)],
            color=bars.patches[0].get_facecolor(),
            alpha=0.45,
            hatch="//",
            label=f"{name} communication",
        )
        speed_axis.plot([r.devices for r in mine], [r.speedup for r in mine], marker="o", label=name)
    counts = sorted({r.devices for r in rows})
    speed_axis.plot(counts, counts, linestyle=":", color="grey", label="ideal")
    speed_axis.scatter(
        [2], [WORTH_IT_AT_TWO], marker="_", s=400, color="red", label=f"{WORTH_IT_AT_TWO}x at 2: the bar"
    )
    time_axis.set(title="ms per step (median, warm-up excluded)", xlabel="devices", ylabel="ms", xticks=counts)
    speed_axis.set(title="speedup against 1 device", xlabel="devices", ylabel="speedup", xticks=counts)
    grid_and_legend(time_axis, speed_axis, fontsize=7)
    figure.suptitle(title, fontsize=10)
    save_figure(figure, path)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    frameworks, args, devices, forwarded = parse_args(argv)
    strategy, max_steps = args.strategy, args.max_steps
    forwarded = [*without_flags(forwarded, OWN_FLAGS, OWN_SWITCHES), "--max_steps", max_steps]
    try:
        config, dataset = prepare(
            [*without_strategy_flags(forwarded), "--results_dir", args.results_dir], "scaling_report.py", ""
        )
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    report_id = args.run_id or new_run_id()
    directory = os.path.join(config.results_dir, "scaling", report_id)
    os.makedirs(directory, exist_ok=True)
    print(
        f"scaling report {report_id}: {config.network.name}, --strategy {strategy} at {devices} devices, "
        f"global batch {config.batch_size}, {max_steps} steps per run, {args.threads_per_device} thread(s) "
        f"per device (each run: --threads {args.threads_per_device} x its devices), {dataset.describe()}",
        flush=True,
    )
    rows = []
    for name in frameworks:
        for count in devices:
            threads = args.threads_per_device
            code, train, diagnostics = run_one(
                name, strategy, count, forwarded, directory, report_id, threads, config.network.name
            )
            rows.append(
                summarize(
                    name,
                    strategy,
                    count,
                    code,
                    train,
                    config.network.param_count(),
                    config.plan.group,
                    diagnostics,
                    threads * count,
                )
            )
    add_speedups(rows)
    title = (
        f"{config.network.name} · {strategy} · global batch {config.batch_size} · "
        f"{config.network.param_count():,} parameters"
    )
    print(f"\n{title}\n{format_table(rows)}\n")
    print(
        "communication: 'comm ms' is measured inside the framework's collectives (blank where it does not "
        "expose it); 'ring all-reduce MB' is 2 (K - 1) / K x the float32 gradient each replica sends per step"
    )
    if any(row.near_chance for row in rows):
        print("'chance': the run ended near chance (it learned nothing): its speedup is not judged")
    for line in verdicts(rows):
        print("verdict: " + line)
    csv_path, png_path = directory + ".csv", directory + ".png"
    write_csv(rows, csv_path)
    plot_png(rows, png_path, title)
    print(f"\ntable: {csv_path}\nplot:  {png_path}\nruns:  {directory}/")
    return 0 if all(row.status == "ok" for row in rows) else EXIT_FAILED
