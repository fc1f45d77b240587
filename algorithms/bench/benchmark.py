"""The benchmark (`python benchmark.py`): for every framework of algorithms/registry/frameworks.py,
at every precision of --precision it trains in, one probe process (algorithms/run/probe.py)
measures the harness against a native loop (interleaved), the GEMM peak through the
framework's own matmul at that precision, compiled paths and peak RSS; a second one the
native loop on 1 thread; a third profiles, with the framework's own profiler, each
framework under half the best one's FLOP/s at that precision. This process (no framework)
adds the data-path timing, prints the tables and writes them as CSV under
results/benchmark/."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

from algorithms.errors import EXIT_FAILED
from algorithms.bench import precision as precisions
from algorithms.bench.data_benchmark import csv_vs_cache
from algorithms.dataset.data import ensure_default_data
from algorithms.registry.frameworks import NAMES, get
from algorithms.paths import DEFAULT_DATA_DIR, RESULTS_DIR
from algorithms.run import probe_process
from algorithms.config.flags import PRECISIONS
from algorithms.config.values import count, positive
from algorithms.config.parser import OneLineErrorParser
from algorithms.machine.threads import MALLOC_POLICIES
from algorithms.registry.capabilities import support
from algorithms.machine.tuning import DEFAULT
from algorithms.tables import last_line, text_table

COLUMNS = [
    "framework",
    "backend",
    "setting",
    "precision",
    "ms_per_step",
    "speedup_over_fp32",
    "samples_per_sec",
    "gflops",
    "pct_of_peak",
    "pct_of_own_gemm",
    "native_ms",
    "harness_over_native",
    "ratio_ci95",
    "outside_step_ms",
    "steps_timed",
    "block",
    "data_share_pct",
    "peak_rss_mb",
    "one_thread_ms",
    "all_core_speedup",
    "threads",
    "gemm_gflops",
    "gemm_speedup_over_fp32",
    "machine_peak_gflops",
    "cpu_units",
    "compiled",
    "status",
]


def parse_args(argv):
    parser = OneLineErrorParser(prog="benchmark.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(NAMES), help="comma-separated subset of: " + ", ".join(NAMES))
    parser.add_argument("--batch_size", type=positive, default=128)
    parser.add_argument("--steps", type=positive, default=24, help="timed steps of each kind per framework")
    parser.add_argument(
        "--block",
        type=positive,
        default=1,
        help="steps per interleaved native/harness block (small: both see the same machine load)",
    )
    parser.add_argument("--thread_steps", type=count, default=3, help="timed 1-thread steps (0: skip)")
    parser.add_argument(
        "--gemm",
        type=positive,
        default=2048,
        help="matmul size for the GEMM peak (one matmul after every second timed pair)",
    )
    parser.add_argument("--data_rows", type=positive, default=42000, help="rows of the generated Kaggle-size CSV")
    parser.add_argument("--skip_compiled", action="store_true", help="leave out XLA / torch.compile")
    parser.add_argument(
        "--profile",
        choices=("under_half", "all", "none"),
        default="under_half",
        help="which frameworks to profile: those under half the best GFLOP/s (default), all, none",
    )
    parser.add_argument("--profile_steps", type=positive, default=4, help="profiled steps per framework")
    parser.add_argument(
        "--malloc",
        choices=MALLOC_POLICIES,
        default=MALLOC_POLICIES[0],
        help="every probe's --malloc (see the entry scripts' --help); release: glibc's default",
    )
    parser.add_argument(
        "--tuned",
        action="store_true",
        help="beside each framework's defaults, a row at its tuned setting (--tuned of the entry scripts)",
    )
    parser.add_argument(
        "--candidates",
        nargs="?",
        const="all",
        default="",
        metavar="NAMES",
        help="beside each framework's defaults, a row at every candidate setting of the wrapper's --tuned table "
        "(the measurement that picks --tuned's), or at the comma-separated NAMES only",
    )
    parser.add_argument(
        "--rounds",
        type=positive,
        default=1,
        help="with --tuned or --candidates: probe the defaults and each setting this many times, in turn; "
        "each row is the round with the median step",
    )
    parser.add_argument(
        "--precision",
        default=PRECISIONS[0],
        help=f"comma-separated, of {', '.join(PRECISIONS)}: each framework at each of these it trains in "
        "(the entry scripts' --precision), its GEMM at the same precision; a precision a framework lacks is a row "
        "saying why",
    )
    parser.add_argument("--train", default=None, help="training CSV (default: data/train.csv)")
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "benchmark"))
    parser.add_argument("--timeout", type=positive, default=300, help="seconds per probe process")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in NAMES]
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}")
    args.precisions = [value.strip() for value in args.precision.split(",") if value.strip()]
    unknown = [value for value in args.precisions if value not in PRECISIONS]
    if unknown or not args.precisions:
        parser.error(f"--precision: {', '.join(unknown) or 'none given'}; choose from {', '.join(PRECISIONS)}")
    return args, names


def run_probe(name: str, probe_args: list, timeout: int) -> dict:
    """One probe process; {'status': ...} on failure."""
    framework = get(name)
    try:
        probe = probe_process.run_probe(framework.python, framework.package, probe_args, timeout, framework.env)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout} s"}
    if probe.result is None:
        return {"status": f"failed (exit {probe.returncode}): {last_line(probe.stderr)[:120]}"}
    return {**probe.result, "status": "ok"}


def extra_settings(name: str, args) -> list:
    """The settings probed beside the defaults: the tuned one, or every candidate."""
    tuning = support(get(name)).tuning
    if args.candidates:
        wanted = None if args.candidates == "all" else args.candidates.split(",")
        return [setting.name for setting in tuning.candidates if wanted is None or setting.name in wanted]
    return [tuning.best] if args.tuned and tuning.best != DEFAULT else []


def median_probe(probes: list, full: dict = None) -> dict:
    """Of one setting's rounds, the probe with the median harness step (the first
    failure if none ran); with `full`, its GEMM, compiled paths and RSS are kept."""
    ok = sorted((probe for probe in probes if probe["status"] == "ok"), key=lambda probe: probe["harness_ms"])
    chosen = ok[(len(ok) - 1) // 2] if ok else probes[0]
    if full is None or chosen is full or full["status"] != "ok":
        return chosen
    timed = ("native_ms", "harness_ms", "ratio", "ratio_ci95", "outside_step_ms", "data_share", "steps_timed")
    return {**full, **{key: chosen[key] for key in timed if key in chosen}, "rounds": len(probes)}


def setting_label(name: str, setting: str) -> str:
    """The table's setting cell: the name, marked where it is --tuned's choice."""
    best = support(get(name)).tuning.best
    if setting == DEFAULT:
        return "default (= tuned)" if best == DEFAULT else "default"
    return f"{setting} (tuned)" if setting == best else setting


def table_row(
    name: str,
    full: dict,
    single: dict,
    batch: int,
    peak_gflops: float,
    setting: str = DEFAULT,
    precision: str = precisions.FP32,
    cpu_units: str = "",
) -> dict:
    """One table row; `peak_gflops` is the best framework's GEMM at the row's precision."""
    framework = get(name)
    row = {column: "" for column in COLUMNS}
    row.update(
        framework=framework.framework,
        backend=framework.backend,
        setting=setting_label(name, setting),
        precision=precision,
        status=full["status"],
        machine_peak_gflops=f"{peak_gflops:.0f}",
        cpu_units=cpu_units,
    )
    if full["status"] != "ok":
        return row
    ms = full["harness_ms"]
    gflops = full["flops_per_sample"] * batch * 1000.0 / ms / 1e9
    row.update(
        ms_per_step=f"{ms:.1f}",
        samples_per_sec=f"{batch * 1000.0 / ms:.0f}",
        gflops=f"{gflops:.1f}",
        pct_of_peak=f"{100.0 * gflops / peak_gflops:.1f}" if peak_gflops else "",
        native_ms=f"{full['native_ms']:.1f}",
        harness_over_native=f"{full['ratio']:.3f}",
        ratio_ci95="{:.3f}-{:.3f}".format(*full["ratio_ci95"]),
        steps_timed=full["steps_timed"],
        block=full["block"],
        outside_step_ms=f"{full['outside_step_ms']:.2f}" if "outside_step_ms" in full else "",
        data_share_pct=f"{100.0 * full['data_share']:.2f}",
        peak_rss_mb=f"{full['peak_rss_mb']:.0f}",
        threads=full["threads"],
        gemm_gflops=f"{full.get('gemm_gflops', 0):.1f}",
        pct_of_own_gemm=f"{100.0 * gflops / full['gemm_gflops']:.1f}" if full.get("gemm_gflops") else "",
        compiled="; ".join(f"{key} {value:.1f} ms" for key, value in full.get("compiled", {}).items()),
    )
    if single.get("status") == "ok":
        row.update(
            one_thread_ms=f"{single['native_ms']:.1f}",
            all_core_speedup=f"{single['native_ms'] / full['native_ms']:.2f}",
        )
    return row


UNSHOWN_COLUMNS = (  # in the CSV only
    "steps_timed",
    "block",
    "threads",
    "machine_peak_gflops",
    "cpu_units",
    "compiled",
    "status",
)


def print_table(rows: list) -> None:
    shown = [column for column in COLUMNS if column not in UNSHOWN_COLUMNS]
    for line in text_table(shown, [[str(row[column]) for column in shown] for row in rows], left=0):
        print(line)
    for row in rows:
        if row["compiled"] or row["status"] != "ok":
            print(
                f"  {row['framework']}/{row['backend']} {row['setting']} {row['precision']}: "
                f"{row['compiled'] or row['status']}"
            )


def profiled(which: str, rows: dict) -> list:
    """The (framework, precision) keys of `rows` to profile: under half the best achieved
    GFLOP/s at the same precision, all, or none."""
    if which == "none":
        return []
    speeds = {key: float(row["gflops"]) for key, row in rows.items() if row["status"] == "ok"}
    best = {}
    for (_, precision), gflops in speeds.items():
        best[precision] = max(best.get(precision, 0.0), gflops)
    return [key for key, gflops in speeds.items() if which == "all" or gflops < best[key[1]] / 2]


def print_profiles(profiles: dict, rows: dict) -> None:
    print("\nwhere the time goes (each framework's own profiler, native loop, self time per step):")
    for (name, precision), result in profiles.items():
        if result["status"] != "ok":
            print(f"  {name} {precision}: {result['status']}")
            continue
        print(
            f"  {name} {precision} ({rows[name, precision]['gflops']} GFLOP/s; {result['profiler']}; "
            f"{result['profiled_ms']:.1f} ms/step profiled):"
        )
        for op, ms in result["profile"][:6]:
            print(f"    {ms:7.1f} ms  {100.0 * ms / result['profiled_ms']:4.1f}%  {op[:110]}")


def write_profiles(path: str, profiles: dict) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["framework", "backend", "precision", "profiler", "op", "ms_per_step", "share_pct"])
        for (name, precision), result in profiles.items():
            framework = get(name)
            for op, ms in result.get("profile", []):
                writer.writerow(
                    [
                        framework.framework,
                        framework.backend,
                        precision,
                        result["profiler"],
                        op,
                        f"{ms:.2f}",
                        f"{100.0 * ms / result['profiled_ms']:.1f}",
                    ]
                )


def larger_blocks(results: dict, block: int) -> str:
    """ " (keras_jax: 4, ...)" for the probes whose native.py asked for larger blocks."""
    larger = {name: full["block"] for (name, _), (full, _) in results.items() if full.get("block", block) > block}
    return f" ({', '.join(f'{name}: {size}' for name, size in larger.items())})" if larger else ""


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def measure(name: str, precision: str, args, data_flags: list, started: float) -> tuple:
    """One framework at one precision: (the full probe, the 1-thread probe, {setting: probe}
    for the --tuned / --candidates settings), each probe the median of its --rounds."""
    refused = precisions.refusal(support(get(name)), precision)
    if refused:
        print(f"{name} {precision}: not run ({refused})", flush=True)
        return {"status": f"not run: {refused}"}, {"status": "skipped"}, {}
    data_flags = data_flags + ["--precision", precision]
    batch = ["--batch_size", str(args.batch_size)]
    common = [*batch, "--steps", str(args.steps), "--block", str(args.block), *data_flags]
    common += ["--skip_compiled"] if args.skip_compiled else []
    full = run_probe(name, common + ["--gemm", str(args.gemm)], args.timeout)
    single = {"status": "skipped"}
    if args.thread_steps:
        threads = ["--mode", "threads", "--threads", "1", "--steps", str(args.thread_steps)]
        single = run_probe(name, [*data_flags, *batch, *threads, "--block", str(args.thread_steps)], args.timeout)
    print(f"{name} {precision}: {full['status']} ({time.perf_counter() - started:.0f} s)", flush=True)
    cheap = ["--gemm", "0"] + ([] if args.skip_compiled else ["--skip_compiled"])  # no GEMM, compile, 1 thread
    again = {DEFAULT: [full]}
    extras = extra_settings(name, args)
    for round_index in range(args.rounds if extras else 0):  # defaults and settings in turn: the load drifts
        for setting in ([DEFAULT] if round_index else []) + extras:
            flags = cheap + ([] if setting == DEFAULT else ["--tuned", setting])
            probe = run_probe(name, common + flags, args.timeout)
            again.setdefault(setting, []).append(probe)
            step = f", {probe['harness_ms']:.1f} ms/step" if probe["status"] == "ok" else ""
            elapsed = time.perf_counter() - started
            print(f"{name} {precision} {setting}: {probe['status']}{step} ({elapsed:.0f} s)", flush=True)
    full = median_probe(again.pop(DEFAULT), full)
    return full, single, {setting: median_probe(probes) for setting, probes in again.items()}


def main(argv=None) -> int:
    args, names = parse_args(sys.argv[1:] if argv is None else argv)
    ensure_default_data(DEFAULT_DATA_DIR)
    started, load_before = time.perf_counter(), load_average()
    data_flags = (["--train", os.path.abspath(args.train)] if args.train else []) + ["--malloc", args.malloc]
    units = precisions.machine_units()
    results, tuned = {}, {}  # keyed by (name, precision)
    for precision in args.precisions:
        for name in names:
            full, single, settings = measure(name, precision, args, data_flags, started)
            results[name, precision] = (full, single)
            tuned.update({(name, precision, setting): probe for setting, probe in settings.items()})
    peak = precisions.peaks(
        {
            precision: [full.get("gemm_gflops", 0.0) for (_, at), (full, _) in results.items() if at == precision]
            for precision in args.precisions
        }
    )
    rows, default_rows = [], {}
    for (name, precision), (full, single) in results.items():
        row = table_row(name, full, single, args.batch_size, peak[precision], DEFAULT, precision, units)
        rows.append(row)
        default_rows[name, precision] = row
        for (tuned_name, at, setting), probe in tuned.items():
            if (tuned_name, at) == (name, precision):  # against the default row's GEMM, measured in the same minutes
                probe = {**probe, "gemm_gflops": full.get("gemm_gflops", 0.0)} if probe["status"] == "ok" else probe
                rows.append(table_row(name, probe, {}, args.batch_size, peak[precision], setting, precision, units))
    precisions.add_speedups(rows)
    profiles = {}
    for name, precision in profiled(args.profile, default_rows):
        profile = ["--mode", "profile", "--steps", str(args.profile_steps), "--block", "1"]
        profiles[name, precision] = run_probe(
            name,
            [*data_flags, "--precision", precision, "--batch_size", str(args.batch_size), *profile],
            args.timeout,
        )
        elapsed = time.perf_counter() - started
        print(f"{name} {precision}: profiled, {profiles[name, precision]['status']} ({elapsed:.0f} s)", flush=True)
    data = csv_vs_cache(args.data_rows)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"benchmark_{stamp}.csv")
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(
        f"\nbenchmark {stamp} · batch {args.batch_size} · {args.steps} timed steps each, interleaved blocks of "
        f"{args.block}{larger_blocks(results, args.block)} · --malloc {args.malloc} · "
        f"load average {load_before} at start, {load_average()} at end · "
        f"{os.cpu_count()} CPUs"
    )
    print(f"CPU units for bf16 / fp16 matmuls ({', '.join(precisions.LOW_PRECISION_UNITS)}): {units}")
    for precision in args.precisions:
        print(
            f"GEMM peak ({precision} {args.gemm}x{args.gemm}, best framework's own matmul, median of the matmuls "
            f"between its blocks): {peak[precision]:.0f} GFLOP/s"
        )
    print()
    print_table(rows)
    if profiles:
        print_profiles(profiles, default_rows)
        write_profiles(path.replace(".csv", "_profile.csv"), profiles)
    print(
        f"\ndata path ({args.data_rows} x 785 CSV): parse {data['csv_s']:.2f} s, binary cache {data['cache_s']:.3f} s: "
        f"cached {data['ratio']:.0f}x faster"
    )
    with open(path.replace(".csv", "_data.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(data))
        writer.writeheader()
        writer.writerow(data)
    print(f"table: {path} · wall {time.perf_counter() - started:.0f} s")
    ran = [row for row in rows if not row["status"].startswith("not run")]
    return 0 if all(row["status"] == "ok" for row in ran) else EXIT_FAILED
