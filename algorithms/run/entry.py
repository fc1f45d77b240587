"""What every entry script does: parse the shared flags, load and check the data
(before any framework is imported, so a bad input fails fast with status 2 and
writes nothing), then hand the run to one wrapper, through the names of
algorithms/contract/types.py:

    package.supported()                      refuse what it does not run, before it loads
                                             (--device gpu: no GPU here, a CPU-only build)
    place_device                             --device cpu: every GPU hidden from the run
    package.prepare_process(config, dataset) what the framework reads at import (device counts)
    package.launch(config, argv)             start worker processes (does not return), or return
    module.records(config)                   whether this process writes the run's records
    module.describe_runtime()                the Runtime for the CSV and results.log (where
                                             the framework placed the run: --device gpu and
                                             no GPU found is refused here)
    module.train(session)                    train, then session.finish
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import replace
from typing import Optional

from algorithms.run.batch_finder import find_batch_size
from algorithms.config.run_config import parse_config
from algorithms.run import yardstick
from algorithms.run.epoch_check import ASYNCHRONOUS, CHECK_STEPS, check_run
from algorithms.contract.types import Support
from algorithms.dataset.data import default_test_labels, ensure_default_data, load_dataset
from algorithms.errors import EXIT_INPUT_ERROR, EXIT_PEER_LOST, EXIT_RESOURCE_ERROR, InputError, PeerLost, ResourceError
from algorithms.session.faults import (
    exit_status,
    install_signal_handlers,
    interruption_name,
    is_out_of_memory,
    is_out_of_processes,
    is_out_of_space,
    out_of_memory_advice,
)
from algorithms.paths import DEFAULT_DATA_DIR, DEFAULT_TRAIN
from algorithms.session.recorder import check_writable
from algorithms.machine.devices import hide_gpus, no_gpu_reason
from algorithms.machine.resources import check_resources, dataset_mb
from algorithms.session.run_session import RunSession
from algorithms.run.notices import startup_notices_dropped
from algorithms.machine.threads import process_threads, set_malloc, set_thread_environment
from algorithms.machine.tuning import apply_tuned, resolve_tuned


def prepare(argv: Optional[list], prog: str, description: str, support: Optional[Support] = None):
    """Flags, data and the results' places, checked. Raises InputError for the
    user's mistakes, ResourceError for results that cannot be written. `support`: the
    wrapper's, whose strategies, faults and optional flags --help lists (None: every one)."""
    config = parse_config(argv, prog, description, support)
    check_gpu_here(config, support)
    if config.train == DEFAULT_TRAIN:
        ensure_default_data(DEFAULT_DATA_DIR)
    config = replace(config, test_labels=config.test_labels or default_test_labels(config.test))
    network = config.network
    dataset = load_dataset(
        config.train,
        config.test,
        config.test_labels,
        config.validation_split,
        config.seed,
        network.input_shape,
        network.num_classes,
    )
    check_batch_fits(config, len(dataset.train_x))
    check_writable(config.results_dir, config.results_log)
    return config, dataset


def check_gpu_here(config, support: Optional[Support] = None) -> None:
    """--device gpu on a machine that shows no GPU (or fewer than the run's devices on this
    host): one line, before the data or a framework loads. A wrapper that never runs on a
    GPU says its own reason instead (check_supported)."""
    if config.device != "gpu" or (support is not None and "--device gpu" not in support.flags):
        return
    elsewhere = "WORLD_SIZE" in os.environ or os.environ.get("TF_CONFIG", "").strip()  # a rank or task: 1 GPU here
    why = no_gpu_reason(1 if elsewhere else config.devices)
    if why:
        raise InputError(f"--device gpu: {why}; {DEVICE_FIX}")


DEVICE_FIX = "run with --device cpu, or --device auto (the GPU where the framework sees one, else the CPU)"


def check_gpu_build(config, support: Support) -> None:
    """--device gpu with a framework whose installed build has no GPU support (a CPU-only
    wheel), read without loading it: one line."""
    why = support.gpu_build() if config.device == "gpu" and support.gpu_build else None
    if why:
        raise InputError(f"--device gpu: {why}; {DEVICE_FIX}")


def place_device(config, support: Support) -> None:
    """Before anything starts or loads (probes, torchrun's ranks, workers inherit it):
    under --device cpu no process of the run sees a GPU; the framework's own switch
    (Support.device_environment) for the device asked."""
    if config.device == "cpu":
        hide_gpus()
    if support.device_environment is not None:
        support.device_environment(config.device)


def check_placed(config, runtime) -> None:
    """Once the framework is loaded: --device gpu where it found none (a driver it cannot
    use, a library missing), one line, before any row is written."""
    if config.device == "gpu" and runtime.device.kind != "gpu":
        raise InputError(
            f"--device gpu: {runtime.framework}/{runtime.backend} loaded and sees no GPU ({runtime.devices}); "
            + DEVICE_FIX
        )


def check_batch_fits(config, train_rows: int) -> None:
    """A step of more samples than the training rows would train on all of them and
    record the larger batch. The preset's own batch is let through (every step then
    takes the whole training set): small test files run at the preset settings."""
    for epoch, batch in config.batch_schedule:
        if batch * config.accumulate > train_rows:
            raise InputError(
                f"--batch_schedule {epoch}:{batch}: more than the {train_rows} training rows of {config.train}; "
                f"use {epoch}:{train_rows // config.accumulate} or less"
            )
    if config.effective_batch <= train_rows:
        return
    rows = f"the {train_rows} training rows of {config.train} (after --validation_split {config.validation_split:g})"
    if config.accumulate > 1:
        most = max(1, train_rows // config.batch_size)
        raise InputError(
            f"--batch_size {config.batch_size} x --accumulate {config.accumulate} = {config.effective_batch} "
            f"samples per optimizer step, more than {rows}; use --accumulate {most} or less"
        )
    if config.batch_size != config.network.training.batch_size:
        raise InputError(f"--batch_size {config.batch_size}: more than {rows}; use --batch_size {train_rows} or less")


def run_entry_point(wrapper_module: str, prog: str, description: str, argv: Optional[list] = None) -> int:
    try:
        wrapper, session = start_run(wrapper_module, prog, description, sys.argv[1:] if argv is None else list(argv))
    except (InputError, ResourceError) as error:  # ResourceError: also a process of the run that could not start
        return refused(error)
    return train_session(wrapper, session)


def start_run(wrapper_module: str, prog: str, description: str, argv: list) -> tuple:
    """Everything before the first step: flags and data checked, the wrapper's refusals,
    the memory its processes and devices will need against what is free, --batch_size
    auto's trials and its launch, this process's environment, the framework loaded;
    returns (the wrapper's train module, the RunSession). A problem the user can fix
    raises InputError, one the machine cannot meet ResourceError, before any row is written."""
    support = support_of(wrapper_module)  # the wrapper package: no framework loads
    config, dataset = prepare(argv, prog, description, support)
    check_supported(config, wrapper_module, prog)
    check_gpu_build(config, support)
    place_device(config, support)
    config = resolve_tuned(config, support.tuning)
    notes = check_resources(config, support.footprint, dataset_mb(dataset)) if support.footprint else []
    if config.batch_size_auto:  # trial processes, before this one loads the framework
        config = find_batch_size(config, wrapper_module.split(".")[0], argv, len(dataset.train_x))
    package = importlib.import_module(wrapper_module.split(".")[0])
    package.prepare_process(config, dataset)
    for note in notes if not config.quiet else ():  # the run goes ahead: said once, before anything starts
        print(note, flush=True)
    package.launch(config, argv)
    # before the framework loads its BLAS / OpenMP
    set_thread_environment(process_threads(config.threads), support.thread_environment)
    set_malloc(config.malloc)
    apply_tuned(config)  # compilers read their flags at import
    with startup_notices_dropped():  # the framework loads here (its determinism switches first)
        parity_notes = with_precision(enable_parity(wrapper_module), config.precision) if config.parity else None
        wrapper = importlib.import_module(wrapper_module)
    runtime = wrapper.describe_runtime()
    check_placed(config, runtime)
    if config.epoch_check and not config.resume:
        run_epoch_check(wrapper, config, dataset, parity_notes, runtime)
    note, twin = (None, None) if config.resume else run_yardstick(wrapper, config, dataset, parity_notes, runtime)
    session = RunSession(config, dataset, runtime, parity_notes, wrapper.records(config))
    session.yardstick_note, session.twin = note, twin
    return wrapper, session


def run_yardstick(wrapper, config, dataset, parity_notes, runtime) -> tuple:
    """The run's own drift yardstick where it needs one (run/yardstick.py): (its line, said
    once before the run unless --quiet and kept for results.log; the twin measured, for
    yardstick.finish once the run has its rows, or None). A twin that fails is said in one
    line and the run goes on; its compare then has only what else covers it."""
    records = wrapper.records(config)
    settings = yardstick.run_settings(config, runtime.device)
    steps = yardstick.twin_steps(config, dataset)
    resolved = yardstick.resolve(config, settings, steps)
    measured = None
    if resolved == "measure":

        def session_of(twin_config, twin_dataset):
            return RunSession(twin_config, twin_dataset, runtime, parity_notes, records)

        csv_path = yardstick.csv_path_of(config, runtime.framework, runtime.backend)
        try:
            measured = yardstick.measure(
                wrapper.train, config, dataset, settings, csv_path, check_run, session_of, records
            )
        except (InputError, ResourceError):  # the run itself would meet it (a disk full, an unwritable folder)
            raise
        except Exception as error:  # noqa: BLE001 (the run itself may still work)
            if records:
                print(f"warning: the yardstick's twin failed ({type(error).__name__}: {error}); the run goes on")
            return f"none: its twin failed ({type(error).__name__})", None
    line = yardstick.note(resolved, config, settings, measured.seconds if measured else None, steps)
    if records and not config.quiet and resolved in ("measure", "reuse"):
        print(f"yardstick: {line}", flush=True)
    return line, measured if records else None


def run_epoch_check(wrapper, config, dataset, parity_notes, runtime) -> None:
    """The epoch check (run/epoch_check.py), before the run's own session starts its clock.
    A check that fails is said in one line and the run goes on: its compare then has no
    epoch check to judge."""
    records = wrapper.records(config)
    if config.strategy in ASYNCHRONOUS:
        if records and not config.quiet:
            print(
                f"epoch check: not run with --strategy {config.strategy} (its workers and servers start once a "
                "process); the compare judges this run's own rows only",
                flush=True,
            )
        return
    check_config, check_dataset = check_run(config, dataset)
    session = RunSession(check_config, check_dataset, runtime, parity_notes, records)
    if records and not config.quiet:
        print(
            f"epoch check: {check_config.num_epochs} epochs of {CHECK_STEPS} steps on the first "
            f"{len(check_dataset.train_x)} training rows (rows in {session.csv_path})",
            flush=True,
        )
    try:
        wrapper.train(session)
    except Exception as error:  # noqa: BLE001 (the run itself may still work; the compare will say no check)
        if records:
            print(f"warning: the epoch check failed ({type(error).__name__}: {error}); the run goes on", flush=True)


def refused(error: Exception) -> int:
    """The user's mistake (status 2) or what the machine cannot do (status 3), in one line."""
    print(f"error: {error}", file=sys.stderr)
    return EXIT_INPUT_ERROR if isinstance(error, InputError) else EXIT_RESOURCE_ERROR


def enable_parity(wrapper_module: str) -> tuple:
    """The wrapper's deterministic-kernel switches, before it builds anything;
    returns (what was set, what still is not deterministic) for results.log."""
    return importlib.import_module(wrapper_module.split(".")[0] + ".determinism").enable()


def with_precision(notes: tuple, precision: str) -> tuple:
    """Parity mode keeps --precision as asked (float32 unless told otherwise) and says so
    in its notes: a bf16 / fp16 parity run compares frameworks at that precision."""
    applied, caveats = notes
    if precision == "fp32":
        return [*applied, "precision fp32 (float32 weights and compute)"], caveats
    return (
        [*applied, f"precision {precision} kept as asked (float32 master weights, {precision} compute)"],
        [
            *caveats,
            f"{precision} compute: each framework casts at its own ops, so frameworks agree only to "
            f"{precision}'s ~{'2-3' if precision == 'bf16' else 3} significant digits, not float32's",
        ],
    )


def check_supported(config, wrapper_module: str, prog: str) -> None:
    support = support_of(wrapper_module)
    if config.strategy not in support.strategies:
        raise InputError(
            f"--strategy {config.strategy}: "
            + (
                support.advice.get(config.strategy)
                or (
                    f"{prog} runs {', '.join(support.strategies)}; "
                    "`python -m algorithms.registry.capabilities` lists the frameworks that run it"
                )
            )
        )
    for index, layer in enumerate(config.network.layers):
        kind = type(layer).__name__
        if kind in support.layers_refused:
            raise InputError(f"{kind} (layer {index} of {config.network.name}): {support.layers_refused[kind]}")
    missing = [flag for flag, used in config.uses().items() if used and flag not in support.flags]
    advised = [flag for flag in missing if flag in support.advice]
    if advised:  # the wrapper's own one line (e.g. which execution modes it has)
        raise InputError(f"{advised[0]}: {support.advice[advised[0]]}")
    if missing:
        raise InputError(
            f"{', '.join(missing)}: not available in {prog}; drop the flag "
            "or see `python -m algorithms.registry.capabilities` for the frameworks that have it"
        )


def train_session(wrapper, session: RunSession) -> int:
    """Trains; a signal or an out-of-memory ends the run with its rows kept, a
    results.log block saying why, one line on stderr and a non-zero status."""
    install_signal_handlers()
    try:
        wrapper.train(session)
        yardstick.finish(session.twin, session.config, session.csv_path, session.run_id)
    except KeyboardInterrupt as interruption:  # Ctrl-C, or SIGTERM (faults.Terminated)
        name = interruption_name(interruption)
        session.finish(None, None, None, status=f"interrupted by {name}")
        print(
            f"\ninterrupted by {name} after {session.step} steps: the rows of every finished step are in "
            f"{session.csv_path}",
            file=sys.stderr,
        )
        return exit_status(interruption)
    except ResourceError as error:  # a worker process could not be started
        session.finish(None, None, None, status=f"failed: {error}")
        print(f"\nerror: {error}", file=sys.stderr)
        return EXIT_RESOURCE_ERROR
    except PeerLost as lost:
        session.finish(None, None, None, status=f"failed: {lost}")
        print(
            f"\nerror: {lost}; the rows of the {session.step} finished steps are in {session.csv_path}",
            file=sys.stderr,
        )
        return EXIT_PEER_LOST
    except BaseException as error:
        if is_out_of_space(error):
            return out_of_space(session, error)
        if is_out_of_processes(error):
            return out_of_processes(session, error)
        if not is_out_of_memory(error):
            session.finish(None, None, None, status=f"failed: {type(error).__name__}: {error}")
            raise
        config = session.config
        advice = out_of_memory_advice(config.batch_size, "--accumulate" in support_of(wrapper.__name__).flags)
        session.finish(None, None, None, status=f"out of memory at step {session.step + 1}: {advice}")
        print(
            f"\nerror: out of memory at step {session.step + 1} with --batch_size {config.batch_size} "
            f"({type(error).__name__}); {advice}. The rows of the {session.step} finished steps are in "
            f"{session.csv_path}",
            file=sys.stderr,
        )
        return EXIT_RESOURCE_ERROR
    return 0


def out_of_processes(session: RunSession, error: BaseException) -> int:
    """A thread or process the kernel refused mid-run (a limit on processes, or memory): one line."""
    why = f"this machine refused the run another thread or process ({str(error).splitlines()[0][:120]})"
    session.finish(None, None, None, status=f"failed: {why}")
    print(
        f"\nerror: {why}: a limit on processes (ulimit -u counts threads too) or memory; run fewer --devices. "
        f"The rows of the {session.step} finished steps are in {session.csv_path}",
        file=sys.stderr,
    )
    return EXIT_RESOURCE_ERROR


def out_of_space(session: RunSession, error: BaseException) -> int:
    """A write the disk refused mid-run: every finished row kept (a cut row is taken
    back), a results.log block saying why if that can still be written, one line."""
    where = getattr(error, "filename", None) or "a results file"
    reason = getattr(error, "strerror", None) or str(error).splitlines()[0][:120]
    step = session.recorded_step
    logged = session.fail(f"failed: cannot write {where} after step {step} ({reason})")
    print(
        f"\nerror: cannot write {where} after step {step} ({reason}); the rows of the {step} finished steps "
        f"are in {session.csv_path}"
        + ("" if logged else f" (no results.log block: {session.config.results_log} cannot be written either)")
        + "; free some space or pass --results_dir on another disk",
        file=sys.stderr,
    )
    return EXIT_RESOURCE_ERROR


def support_of(module_name: str) -> Support:
    """The Support of the wrapper package that `module_name` belongs to (no framework loads)."""
    return importlib.import_module(module_name.split(".")[0]).supported()
