"""The benchmark (`python benchmark.py`): for every framework of algorithms/registry/frameworks.py,
one probe process (algorithms/bench/probe.py) measures the harness against a native loop
(interleaved), the GEMM peak through the framework's BLAS, compiled paths and peak
RSS; a second one the native loop on 1 thread; a third profiles, with the framework's
own profiler, each framework under half the best one's FLOP/s. This process (no
framework) adds the data-path timing, prints the tables and writes them as CSV
under results/benchmark/."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

from algorithms.bench.data_benchmark import csv_vs_cache
from algorithms.spec.data import ensure_default_data
from algorithms.registry.frameworks import NAMES, get
from algorithms.paths import DEFAULT_DATA_DIR, RESULTS_DIR
from algorithms.run import probe_process
from algorithms.run.flags import OneLineErrorParser, count, positive
from algorithms.run.threads import MALLOC_POLICIES
from algorithms.registry.capabilities import support
from algorithms.run.tuning import DEFAULT
from algorithms.tables import last_line, text_table

COLUMNS = [
    "framework",
    "backend",
    "setting",
    "ms_per_step",
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
    "machine_peak_gflops",
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
    parser.add_argument("--train", default=None, help="training CSV (default: data/train.csv)")
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "benchmark"))
    parser.add_argument("--timeout", type=positive, default=300, help="seconds per probe process")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in NAMES]
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}")
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


def table_row(name: str, full: dict, single: dict, batch: int, peak_gflops: float, setting: str = DEFAULT) -> dict:
    framework = get(name)
    row = {column: "" for column in COLUMNS}
    row.update(
        framework=framework.framework,
        backend=framework.backend,
        setting=setting_label(name, setting),
        status=full["status"],
        machine_peak_gflops=f"{peak_gflops:.0f}",
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
        gemm_gflops=f"{full.get('gemm_gflops', 0):.0f}",
        pct_of_own_gemm=f"{100.0 * gflops / full['gemm_gflops']:.1f}" if full.get("gemm_gflops") else "",
        compiled="; ".join(f"{key} {value:.1f} ms" for key, value in full.get("compiled", {}).items()),
    )
    if single.get("status") == "ok":
        row.update(
            one_thread_ms=f"{single['native_ms']:.1f}",
            all_core_speedup=f"{single['native_ms'] / full['native_ms']:.2f}",
        )
    return row


UNSHOWN_COLUMNS = ("steps_timed", "block", "threads", "machine_peak_gflops", "compiled", "status")  # in the CSV only


def print_table(rows: list) -> None:
    shown = [column for column in COLUMNS if column not in UNSHOWN_COLUMNS]
    for line in text_table(shown, [[str(row[column]) for column in shown] for row in rows], left=0):
        print(line)
    for row in rows:
        if row["compiled"] or row["status"] != "ok":
            print(f"  {row['framework']}/{row['backend']} {row['setting']}: {row['compiled'] or row['status']}")


def profiled(which: str, rows: list, names: list) -> list:
    """The frameworks to profile: under half the best achieved GFLOP/s, all, or none."""
    if which == "none":
        return []
    speeds = {name: float(row["gflops"]) for name, row in zip(names, rows) if row["status"] == "ok"}
    best = max(speeds.values(), default=0.0)
    return [name for name, gflops in speeds.items() if which == "all" or gflops < best / 2]


def print_profiles(profiles: dict, rows: list, names: list) -> None:
    speeds = {name: row["gflops"] for name, row in zip(names, rows)}
    print("\nwhere the time goes (each framework's own profiler, native loop, self time per step):")
    for name, result in profiles.items():
        if result["status"] != "ok":
            print(f"  {name}: {result['status']}")
            continue
        print(f"  {name} ({speeds[name]} GFLOP/s; {result['profiler']}; {result['profiled_ms']:.1f} ms/step profiled):")
        for op, ms in result["profile"][:6]:
            print(f"    {ms:7.1f} ms  {100.0 * ms / result['profiled_ms']:4.1f}%  {op[:110]}")


def write_profiles(path: str, profiles: dict) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["framework", "backend", "profiler", "op", "ms_per_step", "share_pct"])
        for name, result in profiles.items():
            framework = get(name)
            for op, ms in result.get("profile", []):
                writer.writerow(
                    [
                        framework.framework,
                        framework.backend,
                        result["profiler"],
                        op,
                        f"{ms:.2f}",
                        f"{100.0 * ms / result['profiled_ms']:.1f}",
                    ]
                )


def larger_blocks(results: dict, block: int) -> str:
    """ " (keras_jax: 4, ...)" for the probes whose native.py asked for larger blocks."""
    larger = [f"{name}: {full['block']}" for name, (full, _) in results.items() if full.get("block", block) > block]
    return f" ({', '.join(larger)})" if larger else ""


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main(argv=None) -> int:
    args, names = parse_args(sys.argv[1:] if argv is None else argv)
    ensure_default_data(DEFAULT_DATA_DIR)
    started, load_before = time.perf_counter(), load_average()
    data_flags = (["--train", os.path.abspath(args.train)] if args.train else []) + ["--malloc", args.malloc]
    common = [
        "--batch_size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
        "--block",
        str(args.block),
        *data_flags,
        *(["--skip_compiled"] if args.skip_compiled else []),
    ]
    results, tuned = {}, {}
    for name in names:
        full = run_probe(name, common + ["--gemm", str(args.gemm)], args.timeout)
        single = (
            run_probe(
                name,
                [
                    *data_flags,
                    "--batch_size",
                    str(args.batch_size),
                    "--mode",
                    "threads",
                    "--threads",
                    "1",
                    "--steps",
                    str(args.thread_steps),
                    "--block",
                    str(max(1, args.thread_steps)),
                ],
                args.timeout,
            )
            if args.thread_steps
            else {"status": "skipped"}
        )
        print(f"{name}: {full['status']} ({time.perf_counter() - started:.0f} s)", flush=True)
        cheap = ["--gemm", "0"] + ([] if args.skip_compiled else ["--skip_compiled"])  # no GEMM, compile, 1 thread
        again = {DEFAULT: [full]}
        extras = extra_settings(name, args)
        for round_index in range(args.rounds if extras else 0):  # defaults and settings in turn: the load drifts
            for setting in ([DEFAULT] if round_index else []) + extras:
                flags = cheap + ([] if setting == DEFAULT else ["--tuned", setting])
                probe = run_probe(name, common + flags, args.timeout)
                again.setdefault(setting, []).append(probe)
                step = f", {probe['harness_ms']:.1f} ms/step" if probe["status"] == "ok" else ""
                print(f"{name} {setting}: {probe['status']}{step} ({time.perf_counter() - started:.0f} s)", flush=True)
        results[name] = (median_probe(again.pop(DEFAULT), full), single)
        tuned.update({(name, setting): median_probe(probes) for setting, probes in again.items()})
    peak = max((full.get("gemm_gflops", 0.0) for full, _ in results.values()), default=0.0)
    rows = []
    for name, (full, single) in results.items():
        rows.append(table_row(name, full, single, args.batch_size, peak))
        for (tuned_name, setting), probe in tuned.items():
            if tuned_name == name:  # against the default row's GEMM, measured in the same minutes
                probe = {**probe, "gemm_gflops": full.get("gemm_gflops", 0.0)} if probe["status"] == "ok" else probe
                rows.append(table_row(name, probe, {}, args.batch_size, peak, setting))
    default_rows = [row for row in rows if row["setting"].startswith(DEFAULT)]  # one per name, in order
    profiles = {}
    for name in profiled(args.profile, default_rows, names):
        profiles[name] = run_probe(
            name,
            [
                *data_flags,
                "--batch_size",
                str(args.batch_size),
                "--mode",
                "profile",
                "--steps",
                str(args.profile_steps),
                "--block",
                "1",
            ],
            args.timeout,
        )
        print(f"{name}: profiled, {profiles[name]['status']} ({time.perf_counter() - started:.0f} s)", flush=True)
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
    print(
        f"GEMM peak (fp32 {args.gemm}x{args.gemm}, best framework BLAS, median of the matmuls between its "
        f"blocks): {peak:.0f} GFLOP/s\n"
    )
    print_table(rows)
    if profiles:
        print_profiles(profiles, default_rows, names)
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
    return 0 if all(row["status"] == "ok" for row in rows) else 1
