"""One framework's benchmark measurements, in its own process (frameworks, and the
legacy env, never share one). The benchmark (benchmark.py) and --batch_size auto
(batch_finder.py) start it, through probe_process.py, as

    python -m algorithms.run.probe PACKAGE --out result.json [--steps N] [--block B]
        [--gemm N] [--mode full|threads|profile|trial] [any entry-script flag, e.g. --threads 1]

and they read the JSON it writes. PACKAGE's `native.py` supplies (contract.NativeModule):
    apply_threads(config) -> text    the framework's thread switches, as the wrapper sets them
    Native(config, dataset, schedule) .run(steps) -> per-step ms   a minimal loop of the
                                     framework itself on pre-loaded tensors of `schedule`,
                                     at the config's --precision as the wrapper trains in it
                                     (timing.py's `NativeLoop` times a hand-stepped one)
    Harness(config, session)  .plan(schedule), .run(steps) -> per-step ms, .outside_step_ms,
                                     .call_overhead_ms (per run() call, the part of it outside
                                     its steps, which a run pays once an epoch: Keras's fit
                                     setup; none for a hand-stepped loop)
                                     the wrapper's step as the entry script runs it
                                     (recorder on); timing.py's `hand_step_harness(build_trainer)`
                                     for wrappers driven by algorithms/run/loop.py's train_by_hand
    gemm(n, precision) -> call       one n x n matmul through the framework's own matmul, its
                                     operands in `precision` (fp32, bf16, fp16); operands
                                     and any compiled function made once
    device_memory_mb() -> dict | None  on a GPU, the framework's peak-allocated memory since
                                     the process started and the GPU's free memory
                                     ({"peak_mb", "free_mb"}); None when the steps ran on the CPU
    STEPS_PER_CALL                   the fewest steps one run() call should take (Keras: one
                                     model.fit call per block, its setup spread over them)
    compiled_ms(config, dataset, schedule, steps) -> {name: ms/step}   compiled paths
                                     ({} for a framework without a compiler switch)
    profile_ops(config, dataset, schedule, warmup) -> (profiler, [(op, ms), ...])
                                     the native loop over `schedule` under the framework's
                                     own profiler, the first `warmup` steps not recorded:
                                     each op's (kernel's, layer's) self time, summed
The harness's RunSession is the entry script's, from PACKAGE.train.describe_runtime(),
writing to the probe's scratch results folder.
Imports no framework itself; PACKAGE.native is imported after the thread environment is set.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile

from algorithms.run.entry import prepare, support_of
from algorithms.run.timing import (
    WARMUP_BLOCKS,
    data_share,
    interleaved,
    paired_ratio,
    seconds_per_call,
    step_schedule,
)
from algorithms.session.run_session import RunSession
from algorithms.machine.threads import peak_rss_mb, set_malloc, set_thread_environment
from algorithms.machine.tuning import apply_tuned, resolve_tuned

PROFILE_TOP = 12  # ops kept per profile


def measure(
    package: str, mode: str, steps: int, block: int, gemm_n: int, argv: list, compiled: bool = True, dump: str = ""
) -> dict:
    config, dataset = prepare(argv, "algorithms.run.probe", "")
    support = support_of(package)
    config = resolve_tuned(config, support.tuning)
    environment = set_thread_environment(config.threads, support.thread_environment) + "; " + set_malloc(config.malloc)
    tuned = apply_tuned(config)  # before PACKAGE.native imports the framework
    if mode == "profile" and dump and support.profile_environment:  # a compiler's output: what its fusions hold
        support.profile_environment(dump)
    native_module = importlib.import_module(f"{package}.native")
    runtime = importlib.import_module(f"{package}.train").describe_runtime()
    result = {
        "package": package,
        "mode": mode,
        "threads": config.threads,
        "batch": config.batch_size,
        "thread_settings": environment + "; " + native_module.apply_threads(config),
        "setting": tuned or "default",
        "flops_per_sample": config.network.train_flops_per_sample(),
    }
    session = RunSession(config, dataset, runtime)
    block = max(block, native_module.STEPS_PER_CALL)  # a call's setup is spread over its steps
    schedule = step_schedule(session, steps + block * WARMUP_BLOCKS, whole_only=mode == "trial")
    if mode == "trial":  # --batch_size auto (algorithms/run/batch_finder.py): the harness alone, and its memory
        return trial(native_module, config, session, schedule, block, result)
    if mode == "profile":  # where the native loop's time goes, by the framework's own profiler
        result["profiler"], ops = native_module.profile_ops(config, dataset, schedule, block * WARMUP_BLOCKS)
        ops = sorted(ops, key=lambda op: op[1], reverse=True)
        result["profile"] = [[name, ms / steps] for name, ms in ops[:PROFILE_TOP]]
        result["profiled_ms"] = sum(ms for _, ms in ops) / steps  # every op's self time, per step
        return result
    native = native_module.Native(config, dataset, schedule)
    if mode == "threads":  # 1 vs all cores: the native loop alone
        times = [t for start in range(0, len(schedule), block) for t in native.run(schedule[start : start + block])][
            block * WARMUP_BLOCKS :
        ]
        result["native_ms"] = statistics.median(times)
    else:
        harness = native_module.Harness(config, session)
        harness.plan(schedule)
        gemm = []  # GFLOP/s of single matmuls between the blocks: the machine's speed at the same moments
        matmul = native_module.gemm(gemm_n, config.precision) if gemm_n else None

        def sample_gemm():
            gemm.append(2.0 * gemm_n**3 / seconds_per_call(matmul, 1) / 1e9)

        native_ms, harness_ms = interleaved(native, harness, schedule, block, sample_gemm if gemm_n else None)
        result.update(
            native_ms=statistics.median(native_ms),
            harness_ms=statistics.median(harness_ms),
            steps_timed=len(native_ms),
            data_share=data_share(session, block * WARMUP_BLOCKS),
        )
        if harness.outside_step_ms:  # measured where the harness steps through algorithms/run/loop.py
            result["outside_step_ms"] = statistics.median(harness.outside_step_ms[block * WARMUP_BLOCKS :])
        result["ratio"], result["ratio_ci95"] = paired_ratio(native_ms, harness_ms, block)
        result["block"] = block
        if gemm:
            result["gemm_gflops"], result["gemm_samples"] = statistics.median(gemm), len(gemm)
        if compiled:
            result["compiled"] = native_module.compiled_ms(config, dataset, schedule, block)
    result["peak_rss_mb"] = peak_rss_mb()
    return result


def trial(native_module, config, session: RunSession, schedule: list, block: int, result: dict) -> dict:
    """The wrapper's own steps at the config's batch, each of the whole batch (`schedule`
    holds no short step): a warm-up block, then the rest timed in one call, as the run
    makes them. harness_ms is what a step of the run costs: the median step, plus the
    share of each of the run's epochs of what a call costs beside its steps (Keras:
    model.fit's setup, paid once an epoch: `call_overhead_ms`). The process's peak RSS
    and, on a GPU, the framework's peak allocation."""
    harness = native_module.Harness(config, session)
    harness.plan(schedule)
    warmup = block * WARMUP_BLOCKS
    harness.run(schedule[:warmup])
    before = len(harness.call_overhead_ms)
    times = harness.run(schedule[warmup:])
    overhead_ms = sum(harness.call_overhead_ms[before:])
    run_steps_per_epoch = len(session.optimizer_batches(0))  # the run's call (Keras: fit) per epoch
    result.update(
        harness_ms=statistics.median(times) - overhead_ms / len(times) + overhead_ms / run_steps_per_epoch,
        steps_timed=len(times),
        call_overhead_ms=overhead_ms,
        device_memory=native_module.device_memory_mb(),
        peak_rss_mb=peak_rss_mb(),
    )
    return result


def probe_config_args(argv: list, results_dir: str) -> list:
    """The entry-script flags a probe runs with: test set off, rows to a scratch folder."""
    extra = [] if "--results_dir" in argv else ["--results_dir", results_dir]
    return argv + (["--test", "none"] if "--test" not in argv else []) + extra


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="algorithms.run.probe")
    parser.add_argument("package")
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=("full", "threads", "profile", "trial"), default="full")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each kind (after warm-up)")
    parser.add_argument("--block", type=int, default=5, help="steps per interleaved block")
    parser.add_argument("--gemm", type=int, default=2048, help="matmul size for the GEMM peak (0: skip)")
    parser.add_argument("--skip_compiled", action="store_true", help="leave out the compiled paths")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="probe-") as scratch:
        result = measure(
            args.package,
            args.mode,
            args.steps,
            args.block,
            args.gemm,
            probe_config_args(rest, os.path.join(scratch, "results")),
            not args.skip_compiled,
            os.path.join(scratch, "compiled"),
        )
    with open(args.out, "w") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
