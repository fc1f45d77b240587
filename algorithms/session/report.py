"""What a run reports when it ends, from its session (session.RunSession): the summary
(`summarize`, what finish() returns), the results.log block (`write_log_block`) and
the table printed last (`print_summary`); `report_run`, the three in the one call the
session makes when the run ends."""

from __future__ import annotations

import os
import platform
import socket
from datetime import datetime, timezone
from typing import Optional

from algorithms.records import WARMUP_STEPS, steady_state_ms
from algorithms.session.recorder import append_log_block
from algorithms.machine.threads import (
    MALLOC_VARIABLES,
    THREAD_VARIABLES,
    environment_text,
    peak_rss_mb,
    process_threads,
)
from algorithms.machine.tuning import log_line as tuned_log_line


def report_run(session, status: str, test: Optional[tuple], predictions_path: Optional[str], recorded: bool) -> dict:
    """The summary; where this process records the run (`recorded`), its results.log block
    and the printed table too."""
    summary = summarize(session, test, predictions_path)
    if recorded:
        write_log_block(session, status, summary)
        print_summary(session, summary)
    return summary


def summarize(session, test: Optional[tuple], predictions_path: Optional[str]) -> dict:
    """`test`: (loss, accuracy) on the test set, None without labels or a test set."""
    median_ms = steady_state_ms(session.step_times_ms)
    return {
        "framework": session.framework,
        "backend": session.backend,
        "steps": session.step,
        "train": session.last_train,
        "val": session.last_val,
        "test": test,
        "test_predictions": predictions_path,
        "median_ms": median_ms,
        "samples_per_sec": session.config.effective_batch * 1000.0 / median_ms if median_ms else None,
    }


def _test_set_text(config, data) -> str:
    if data.test_x is None:
        return "none"
    scored = f"scored with {config.test_labels})" if data.test_y is not None else "no labels: predictions only)"
    return f"{config.test} ({len(data.test_x)} images, " + scored


def _parity_text(parity) -> str:
    """results.log's parity line from the session's (set, not deterministic) notes, or None: off."""
    if parity is None:
        return "off (dropout on, framework-default kernels)"
    return (
        "dropout off; set: "
        + "; ".join(parity[0])
        + "; not deterministic: "
        + ("; ".join(parity[1]) or "nothing known")
    )


def write_log_block(session, status: str, summary: dict) -> None:
    """The run's results.log block; `session.logged` says it is written (a later failure writes no second one)."""
    config, data, step = session.config, session.dataset, session.step

    def pair(values, empty="n/a"):
        return empty if values is None or values[1] is None else f"loss {values[0]:.4f}  accuracy {values[1]:.4f}"

    median = summary["median_ms"]
    warm = f"steps {WARMUP_STEPS + 1}-{step}" if step > WARMUP_STEPS else f"all {step} steps"
    append_log_block(
        config.results_log,
        f"{session.run_id} · {config.network.name} · {session.framework}/{session.backend} · {status}",
        [
            ("status", status),
            ("start", session.start_time.strftime("%Y-%m-%d %H:%M:%S UTC")),
            ("end", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
            ("command", config.command_line),
            ("host", f"{socket.gethostname()} ({platform.platform()}, {os.cpu_count()} CPUs)"),
            ("python", platform.python_version()),
            ("versions", ", ".join(f"{name} {version}" for name, version in session.versions.items())),
            (
                "device",
                f"{session.device.kind} ({session.device.name}): {session.device.detail}; --device {config.device}",
            ),
            ("devices", session.devices),
            ("config", config.describe()),
            *([("batch size auto", config.batch_search)] if config.batch_search else []),
            ("parity", _parity_text(session.parity_notes)),
            (
                "network",
                f"{config.network.param_count():,} parameters, "
                f"{config.network.train_flops_per_sample() / 1e6:.1f} MFLOP/sample forward+backward",
            ),
            (
                "data",
                f"train {config.train} ({len(data.train_x) + len(data.val_x)} rows: {len(data.train_x)} to train on, "
                f"{len(data.val_x)} held out for validation)",
            ),
            ("test data", _test_set_text(config, data)),
            ("steps", f"{step}" + (f" (resumed from {session.resume_from})" if session.resume_from else "")),
            ("diagnostics", " | ".join(session.diagnostics) or "none"),
            *([("yardstick", session.yardstick_note)] if session.yardstick_note else []),
            *([("step check", session.step_check_note)] if session.step_check_note else []),
            *([("noise scale", session.noise_scale.describe())] if session.noise_scale is not None else []),
            ("final train", pair(summary["train"]) + "  (mean over the last epoch's steps)"),
            ("final val", pair(summary["val"])),
            ("final test", pair(summary["test"])),
            (
                "median step",
                "n/a"
                if median is None
                else f"{median:.2f} ms/step ({warm}), {summary['samples_per_sec']:.0f} samples/s",
            ),
            ("execution", session.execution_note),
            ("precision", session.precision_note + _loss_scale_text(session.loss_scales, session.skipped_steps, step)),
            ("threads", _threads_text(config.threads)),
            ("malloc", f"--malloc {config.malloc}; {environment_text(MALLOC_VARIABLES)}"),
            ("tuned", tuned_log_line(config)),
            ("peak rss", f"{peak_rss_mb():.0f} MB (ru_maxrss of this process)"),
            ("csv", session.csv_path),
            ("predictions", summary["test_predictions"] or "none"),
        ]
        + _schedule_lines(session),
    )
    session.logged = True


def _threads_text(threads: int) -> str:
    """--threads (the run's) and, where the ranks on this machine share them, this process's part."""
    mine = process_threads(threads)
    share = f" ({mine} in this process: the run's processes on this machine share them)" if mine != threads else ""
    return f"--threads {threads}{share}; {environment_text(THREAD_VARIABLES)}"


def _schedule_lines(session) -> list:
    """--batch_schedule's phases and --target_accuracy's time to accuracy, when asked for."""
    config, lines = session.config, []
    if config.batch_schedule:
        lines.append(
            (
                "batch schedule",
                "; ".join(
                    f"epoch {epoch + 1}: batch {batch}"
                    + ("" if ms is None else f", re-trace/compile/reshape {ms:.0f} ms (outside step_time_ms)")
                    for epoch, batch, ms in session.batch_phases
                ),
            )
        )
    target = config.target_accuracy
    if target is not None:
        reached = session.stopping.target_reached  # the part that knows, not the session asked back
        lines.append(
            (
                "time to accuracy",
                f"{target:g} not reached in {session.step} steps, {session.samples_seen:,} samples"
                if reached is None
                else f"{target:g} reached at epoch {reached['epoch']}, step {reached['step']}: "
                f"{reached['wall_s']:.2f} s, {reached['samples']:,} samples "
                f"(val accuracy {reached['accuracy']:.4f})",
            )
        )
    return lines


def _loss_scale_text(loss_scales: list, skipped_steps: int, steps: int) -> str:
    """fp16's loss scale over the run ((step, scale used) of every step) and the steps it skipped."""
    if not loss_scales:
        return ""
    (first_step, first), (last_step, last) = loss_scales[0], loss_scales[-1]
    return (
        f"; loss scale {first:g} at step {first_step}, {last:g} at step {last_step} "
        f"(min {min(scale for _, scale in loss_scales):g}); skipped steps (overflowed gradients): "
        f"{skipped_steps} of {steps}"
    )


def print_summary(session, summary: dict) -> None:
    say = session.progress.say

    def fmt(values, index):
        return "n/a" if values is None or values[index] is None else f"{values[index]:.4f}"

    say(f"\n{'':8}{'loss':>10}{'accuracy':>10}")
    for name in ("train", "val", "test"):
        say(f"{name:8}{fmt(summary[name], 0):>10}{fmt(summary[name], 1):>10}")
    if summary["median_ms"] is not None:
        say(
            f"median {summary['median_ms']:.2f} ms/step, {summary['samples_per_sec']:.0f} samples/s "
            f"over {session.step} steps · rows in {session.csv_path} · run {session.run_id}"
        )
    if session.noise_scale is not None:
        say(
            f"gradient noise scale: {session.noise_scale.critical_batch_text()} samples "
            f"(B_simple at the end, global batch {session.config.effective_batch})"
        )
