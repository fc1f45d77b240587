"""One training run's bookkeeping, the same for every framework: the CSV rows,
the Keras-like progress lines, `--max_steps`, the test row, the predictions file,
the results.log block and the final summary table."""

from __future__ import annotations

import os
import platform
import secrets
import socket
import statistics
import sys
import time
from datetime import datetime, timezone
from typing import Optional

import numpy as np

from algorithms.run.config import RunConfig
from algorithms.run.contract import Runtime
from algorithms.run.checkpoint import (
    checkpoint_root,
    find_resume_point,
    prune,
    shared_settings,
    step_folder,
    write_state,
)
from algorithms.spec.data import Dataset, batch_order, steps_per_epoch
from algorithms.run.noise_scale import NoiseScale
from algorithms.run.faults import EpochEvidence, first_loss_problem, raise_if_stop_requested, stuck_loss_problem
from algorithms.run.tuning import log_line as tuned_log_line
from algorithms.run.threads import MALLOC_VARIABLES, THREAD_VARIABLES, environment_text, peak_rss_mb
from algorithms.run.recorder import (
    WARMUP_STEPS,
    ResultsCsv,
    append_log_block,
    results_csv_name,
    steady_state_ms,
    write_predictions,
)

NON_TTY_PROGRESS_EVERY_S = 15.0


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


class _NoCsv:
    """Stands in for the CSV in a worker process that leaves the records to its chief."""

    def write(self, **values) -> None:
        pass

    def close(self) -> None:
        pass


class RunSession:
    """`record=False` is a worker process of a multi-process run (a rank other than
    0): it steps through the same schedule, stopping rules and epochs as the chief,
    but writes no CSV, log or predictions and prints nothing."""

    def __init__(
        self,
        config: RunConfig,
        dataset: Dataset,
        runtime: Runtime,
        parity_notes: Optional[tuple] = None,
        record: bool = True,
    ):
        self.config, self.dataset = config, dataset
        self.parity_notes = parity_notes  # (what was set, what is not deterministic) in --parity runs
        self.record = record
        framework, backend = runtime.framework, runtime.backend
        self.framework, self.backend = framework, backend
        self.versions, self.devices = runtime.versions, runtime.devices
        self.run_id = config.run_id or new_run_id()
        self.steps_per_epoch = steps_per_epoch(len(dataset.train_x), config.effective_batch)
        if config.strategy in ("ps", "async") and not config.ps_sync:  # each worker's share is one update
            self.steps_per_epoch *= config.plan.replicas
        csv_name = results_csv_name(config.network.name, framework, backend)
        self.csv_path = os.path.join(config.results_dir, csv_name)
        self.checkpoint_root = checkpoint_root(config.results_dir, self.run_id, csv_name)
        self.resume_from: Optional[str] = None  # the checkpoint folder a --resume run starts from
        resume_state = None
        if config.resume:  # before the CSV is opened: a bad --resume writes nothing
            self.resume_from, resume_state = find_resume_point(
                self.checkpoint_root, self.run_id, shared_settings(config), config.max_steps
            )
        self.csv = (
            ResultsCsv(
                self.csv_path,
                {
                    "run_id": self.run_id,
                    "framework": framework,
                    "backend": backend,
                    "network": config.network.name,
                    "strategy": config.strategy,
                    "devices": config.devices,
                    "global_batch": config.effective_batch,
                },
            )
            if record
            else _NoCsv()
        )
        self.schedule = config.learning_rate_schedule()
        self.noise_scale = NoiseScale() if config.noise_scale else None  # fed by the loop, step by step
        self._best_val_loss = float("inf")
        self._epochs_without_gain = 0
        self.stopped_early = False
        # a multi-process wrapper sets this (faults.raise_if_stop_requested) so every
        # process stops after the same step when any of them is signalled
        self.signal_of_any_process = None
        self.diagnostics: list = []  # loss sanity warnings, also written to results.log
        # what the wrapper's trainer did with --execution and --precision, in its own
        # words (train() sets them once the trainer is built), for results.log
        self.execution_note = config.execution or "the framework's default"
        self.precision_note = "fp32: float32 weights and compute" if config.precision == "fp32" else config.precision
        self.loss_scales: list = []  # --precision fp16: (step, scale used) of every step
        self.skipped_steps = 0  # fp16 steps whose gradients overflowed (not applied)
        self.start_time = datetime.now(timezone.utc)
        self._t0 = time.perf_counter()
        self.step = 0
        self.recorded_step = 0  # the last step whose train row is in the CSV
        self._logged = False  # this run's results.log block is written
        self.step_times_ms: list = []
        self._epoch_losses: list = []
        self._epoch_accs: list = []
        self._epoch_start = self._t0
        self._last_progress = self._t0
        self.last_val: Optional[tuple] = None
        self.last_train: Optional[tuple] = None
        self._tty = sys.stdout.isatty()
        self.finished = False
        self._say = print if record else (lambda *args, **kwargs: None)
        self.resume_position = (0, 0)  # (epoch, index of the next optimizer step in it)
        self.samples_seen = 0  # training samples stepped on so far (time to accuracy)
        self.target_reached: Optional[dict] = None  # --target_accuracy: where validation first reached it
        self.batch_phases: list = []  # --batch_schedule: (epoch, batch, warm-up ms or None) per phase run
        self._epoch_batch: Optional[int] = None
        if resume_state is not None:
            self._restore(resume_state)
            self.recorded_step = self.step
        if not config.quiet:
            self._say(
                f"{framework}/{backend} · {config.network.name} · {dataset.describe()} · "
                f"batch {config.batch_size} · {config.num_epochs} epochs · run {self.run_id}",
                flush=True,
            )

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_due(self) -> bool:
        every = self.config.checkpoint_every
        return bool(every) and self.step % every == 0

    def save_checkpoint(self, trainer, epoch: int, next_index: int) -> None:
        """`trainer.save_checkpoint(folder)` writes the framework's state (every process
        calls it; it returns once all have written), then this records where the run
        stands. Called after the step's row is written."""
        directory = step_folder(self.checkpoint_root, self.step)
        os.makedirs(directory, exist_ok=True)
        trainer.save_checkpoint(directory)
        if not self.record:
            return
        write_state(
            directory,
            {
                "step": self.step,
                "epoch": epoch,
                "next_index": next_index,
                "schedule": {
                    "multiplier": self.schedule._plateau_multiplier,
                    "best_val": self.schedule._best_val,
                    "epochs_without_gain": self.schedule._epochs_without_gain,
                },
                "best_val_loss": self._best_val_loss,
                "samples_seen": self.samples_seen,
                "epochs_without_gain": self._epochs_without_gain,
                "last_val": self.last_val,
                "last_train": self.last_train,
                "settings": shared_settings(self.config),
            },
        )
        prune(self.checkpoint_root)

    def _restore(self, state: dict) -> None:
        self.step = state["step"]
        self.resume_position = (state["epoch"], state["next_index"])
        schedule = state["schedule"]
        self.schedule._plateau_multiplier = schedule["multiplier"]
        self.schedule._best_val = schedule["best_val"]
        self.schedule._epochs_without_gain = schedule["epochs_without_gain"]
        self._best_val_loss, self._epochs_without_gain = state["best_val_loss"], state["epochs_without_gain"]
        self.samples_seen = state.get("samples_seen", 0)
        self.last_val = tuple(state["last_val"]) if state["last_val"] else None
        self.last_train = tuple(state["last_train"]) if state["last_train"] else None
        self._say(
            f"resuming run {self.run_id} at step {self.step + 1} (epoch {state['epoch'] + 1}) from {self.resume_from}",
            flush=True,
        )

    # ------------------------------------------------------------------ per step
    def wall(self) -> float:
        return time.perf_counter() - self._t0

    @property
    def learning_rate(self) -> float:
        """The lr for the optimizer step about to run (scaling, warm-up and plateau
        applied); a wrapper sets it on its optimizer before each step."""
        return self.schedule.at(self.step)

    def optimizer_batches(self, epoch: int) -> list:
        """One list per optimizer step of `--accumulate` index arrays (the shared
        batch order at batch_size x accumulate, each cut into accumulate parts), so
        accumulating K batches sees exactly the samples of one K x batch step. The
        batch is the epoch's (--batch_schedule)."""
        config = self.config
        batch = config.batch_at(epoch)
        steps = batch_order(len(self.dataset.train_x), batch * config.accumulate, epoch, config.seed)
        return [[indices[start : start + batch] for start in range(0, len(indices), batch)] for indices in steps]

    def begin_epoch(self, epoch: int) -> Optional[int]:
        """Called by the loop before an epoch's first step: the epoch's global batch goes
        into the rows and the lr schedule (--batch_schedule, --lr_schedule). Returns the
        new --batch_size when it differs from the previous epoch this process ran (the
        wrapper then prepares that shape, outside any step's time), else None."""
        config = self.config
        batch = config.batch_at(epoch)
        self.steps_per_epoch = steps_per_epoch(len(self.dataset.train_x), batch * config.accumulate)
        if config.strategy in ("ps", "async") and not config.ps_sync:  # as in __init__: one update per share
            self.steps_per_epoch *= config.plan.replicas
        self.schedule.start_epoch(epoch, batch * config.accumulate)
        if self.record:
            self.csv.identity["global_batch"] = batch * config.accumulate
        changed = self._epoch_batch is not None and batch != self._epoch_batch
        if config.batch_schedule and (changed or self._epoch_batch is None):
            self.batch_phases.append((epoch, batch, None))
        self._epoch_batch = batch
        return batch if changed else None

    def batch_prepared(self, batch: int, warm_up_ms: float) -> None:
        """The wrapper's re-trace / re-compile / reshape for a new batch took this long."""
        epoch = self.batch_phases[-1][0]
        self.batch_phases[-1] = (epoch, batch, warm_up_ms)
        if not self.config.quiet:
            self._say(f"  epoch {epoch + 1}: batch {batch}, prepared in {warm_up_ms:.0f} ms (not in step_time_ms)")

    def _steps_before(self, epoch: int) -> int:
        rows, config = len(self.dataset.train_x), self.config
        return sum(steps_per_epoch(rows, config.effective_batch_at(e)) for e in range(epoch))

    def train_step(
        self,
        epoch: int,
        loss: float,
        accuracy: float,
        step_time_ms: float,
        data_time_ms: float,
        batch_size: int,
        comm_time_ms: Optional[float] = None,
        worker: int = 0,
        staleness: int = 0,
        loss_scale: Optional[float] = None,
        skipped: bool = False,
    ) -> None:
        """Record one finished optimizer step; `epoch` is 0-based here, 1-based in
        the CSV. `comm_time_ms` is the part of step_time_ms spent communicating,
        where the strategy can measure it. `worker` is whose update this is and
        `staleness` how many other updates were applied between its read of the
        parameters and its own (0 for a synchronous strategy, whose rank 0 records)."""
        learning_rate = self.learning_rate
        self.step += 1
        self.samples_seen += batch_size
        self.step_times_ms.append(step_time_ms)
        self._epoch_losses.append(loss)
        self._epoch_accs.append(accuracy)
        self.csv.write(
            epoch=epoch + 1,
            step=self.step,
            phase="train",
            loss=loss,
            accuracy=accuracy,
            learning_rate=learning_rate,
            step_time_ms=step_time_ms,
            data_time_ms=data_time_ms,
            samples_per_sec=batch_size * 1000.0 / step_time_ms,
            wall_time_s=self.wall(),
            comm_time_ms=comm_time_ms,
            worker=worker,
            staleness=staleness,
            loss_scale=loss_scale,
        )
        if loss_scale is not None:
            self.loss_scales.append((self.step, loss_scale))
        self.skipped_steps += bool(skipped)
        self.recorded_step = self.step
        if self.step == 1:
            self.diagnose(first_loss_problem(loss, self.config.network.num_classes))
        self._progress(epoch)
        raise_if_stop_requested(self.signal_of_any_process)  # a Ctrl-C / SIGTERM ends the run here, its row written

    def should_stop(self) -> bool:
        return self.stopped_early or (self.config.max_steps is not None and self.step >= self.config.max_steps)

    def _progress(self, epoch: int) -> None:
        if self.config.quiet:
            return
        now = time.perf_counter()
        in_epoch = len(self._epoch_losses)
        text = (
            f"  {in_epoch}/{self.steps_per_epoch} - loss: {statistics.fmean(self._epoch_losses):.4f} - "
            f"acc: {statistics.fmean(self._epoch_accs):.4f} - {self.step_times_ms[-1]:.0f} ms/step"
        )
        if self._tty:
            self._say("\r" + text, end="", flush=True)
        elif now - self._last_progress >= NON_TTY_PROGRESS_EVERY_S:
            self._say(f"Epoch {epoch + 1}/{self.config.num_epochs} -" + text, flush=True)
            self._last_progress = now

    def end_epoch(self, epoch: int, val_loss: float, val_accuracy: float, val_time_ms: float) -> None:
        count = len(self.dataset.val_x)
        self._val_wall = self.wall()  # the val row's: time to accuracy is read back from it
        previous_losses = (self.last_train[0], self.last_val[0]) if self.last_train and self.last_val else None
        self.csv.write(
            epoch=epoch + 1,
            step=self.step,
            phase="val",
            loss=val_loss,
            accuracy=val_accuracy,
            learning_rate=self.learning_rate,
            step_time_ms=val_time_ms,
            samples_per_sec=count * 1000.0 / val_time_ms if val_time_ms > 0 else None,
            wall_time_s=self._val_wall,
        )
        self.last_val = (val_loss, val_accuracy)
        if self._epoch_losses:
            self.last_train = (statistics.fmean(self._epoch_losses), statistics.fmean(self._epoch_accs))
        now = time.perf_counter()
        epoch_steps = len(self._epoch_losses)
        ms_step = statistics.median(self.step_times_ms[-epoch_steps:]) if epoch_steps else float("nan")
        line = (
            f"Epoch {epoch + 1}/{self.config.num_epochs} - {epoch_steps}/{self.steps_per_epoch} steps - "
            f"{now - self._epoch_start:.1f}s - loss: {self.last_train[0]:.4f} - acc: {self.last_train[1]:.4f} - "
            f"val_loss: {val_loss:.4f} - val_acc: {val_accuracy:.4f} - {ms_step:.1f} ms/step"
        )
        if self.noise_scale is not None:
            self.noise_scale.end_epoch(epoch)
            b_simple = self.noise_scale.b_simple
            line += f" - B_simple: {'n/a' if b_simple is None else f'{b_simple:.0f}'}"
        self._say(("\r" if self._tty and not self.config.quiet else "") + line, flush=True)
        self._epoch_losses, self._epoch_accs = [], []
        self._epoch_start = self._last_progress = now
        if epoch_steps:
            updates_before, train_count = self._steps_before(epoch), len(self.dataset.train_x)
            self.diagnose(
                stuck_loss_problem(
                    EpochEvidence(
                        epoch=epoch,
                        updates=self.step,
                        updates_before=updates_before,
                        samples=epoch * train_count
                        + min(train_count, (self.step - updates_before) * self.config.effective_batch_at(epoch)),
                        samples_before=epoch * train_count,
                        train_loss=self.last_train[0],
                        val_loss=val_loss,
                        val_accuracy=val_accuracy,
                        val_labels=self.dataset.val_y,
                        previous_losses=previous_losses,
                    ),
                    self.config.network.num_classes,
                    self.learning_rate,
                )
            )
        self._after_validation(epoch, val_loss)
        self._check_target(epoch, val_accuracy)

    def _check_target(self, epoch: int, val_accuracy: float) -> None:
        """--target_accuracy: the first validation at or above it ends the run (DAWNBench's
        time to accuracy: wall time since the session started, validation included)."""
        target = self.config.target_accuracy
        if target is None or self.target_reached or val_accuracy < target:
            return
        self.target_reached = {
            "epoch": epoch + 1,
            "step": self.step,
            "wall_s": self._val_wall,
            "samples": self.samples_seen,
            "accuracy": val_accuracy,
        }
        self.stopped_early = True
        self._say(
            f"  target accuracy {target:g} reached: val_acc {val_accuracy:.4f} at epoch {epoch + 1}, "
            f"step {self.step}, {self.target_reached['wall_s']:.1f} s, {self.samples_seen:,} samples",
            flush=True,
        )

    def diagnose(self, problem: Optional[str]) -> None:
        if problem:
            self.diagnostics.append(problem)
            if self.record:
                print(f"\nwarning: {problem}", file=sys.stderr, flush=True)

    def _after_validation(self, epoch: int, val_loss: float) -> None:
        """Reduce-on-plateau and early stopping, both keyed on the validation loss."""
        if self.schedule.end_epoch(val_loss):
            self._say(
                f"  validation loss has not improved for {self.config.reduce_lr_on_plateau} epoch(s): "
                f"lr now {self.learning_rate:g}",
                flush=True,
            )
        if val_loss < self._best_val_loss:
            self._best_val_loss, self._epochs_without_gain = val_loss, 0
            return
        self._epochs_without_gain += 1
        patience = self.config.early_stopping
        if patience and self._epochs_without_gain >= patience and epoch + 1 < self.config.num_epochs:
            self.stopped_early = True
            self._say(
                f"  early stopping: validation loss has not improved for {patience} epoch(s) "
                f"(best {self._best_val_loss:.4f})",
                flush=True,
            )

    # ------------------------------------------------------------------ end of run
    def finish(
        self,
        test_loss: Optional[float],
        test_accuracy: Optional[float],
        test_predictions: Optional[np.ndarray],
        status: str = "completed",
    ) -> Optional[dict]:
        if self.finished:  # a failure inside finish() must not write a second block
            return None
        self.finished = True
        if test_loss is not None:
            self.csv.write(
                epoch=None,
                step=self.step,
                phase="test",
                loss=test_loss,
                accuracy=test_accuracy,
                learning_rate=None,
                wall_time_s=self.wall(),
            )
        self.csv.close()
        predictions_path = None
        if test_predictions is not None and self.record:
            predictions_path = os.path.join(
                self.config.results_dir,
                "predictions",
                f"{os.path.splitext(os.path.basename(self.csv_path))[0]}_{self.run_id}.csv",
            )
            write_predictions(predictions_path, test_predictions)
        summary = self._summary(None if test_loss is None else (test_loss, test_accuracy), predictions_path)
        if self.record:
            self._write_log(status, summary)
            self._print_summary(summary)
        return summary

    def fail(self, status: str) -> bool:
        """After a write failed (the disk full, read-only): the CSV closed, and the
        results.log block saying why, unless one is written already; returns False
        when that block cannot be written either."""
        self.finished = True
        self.csv.close()
        if not self.record or self._logged:
            return True
        try:
            self._write_log(status, self._summary(None, None))
        except OSError:
            return False
        return True

    def _summary(self, test: Optional[tuple], predictions_path: Optional[str]) -> dict:
        median_ms = steady_state_ms(self.step_times_ms)
        return {
            "framework": self.framework,
            "backend": self.backend,
            "steps": self.step,
            "train": self.last_train,
            "val": self.last_val,
            "test": test,
            "test_predictions": predictions_path,
            "median_ms": median_ms,
            "samples_per_sec": self.config.effective_batch * 1000.0 / median_ms if median_ms else None,
        }

    def _write_log(self, status: str, summary: dict) -> None:
        config, data = self.config, self.dataset

        def pair(values, empty="n/a"):
            return empty if values is None or values[1] is None else f"loss {values[0]:.4f}  accuracy {values[1]:.4f}"

        median = summary["median_ms"]
        warm = f"steps {WARMUP_STEPS + 1}-{self.step}" if self.step > WARMUP_STEPS else f"all {self.step} steps"
        test_set = (
            "none"
            if data.test_x is None
            else (
                f"{config.test} ({len(data.test_x)} images, "
                + (f"scored with {config.test_labels})" if data.test_y is not None else "no labels: predictions only)")
            )
        )
        append_log_block(
            config.results_log,
            f"{self.run_id} · {config.network.name} · {self.framework}/{self.backend} · {status}",
            [
                ("status", status),
                ("start", self.start_time.strftime("%Y-%m-%d %H:%M:%S UTC")),
                ("end", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")),
                ("command", config.command_line),
                ("host", f"{socket.gethostname()} ({platform.platform()}, {os.cpu_count()} CPUs)"),
                ("python", platform.python_version()),
                ("versions", ", ".join(f"{name} {version}" for name, version in self.versions.items())),
                ("devices", self.devices),
                ("config", config.describe()),
                *([("batch size auto", config.batch_search)] if config.batch_search else []),
                (
                    "parity",
                    "off (dropout on, framework-default kernels)"
                    if self.parity_notes is None
                    else "dropout off; set: "
                    + "; ".join(self.parity_notes[0])
                    + "; not deterministic: "
                    + ("; ".join(self.parity_notes[1]) or "nothing known"),
                ),
                (
                    "network",
                    f"{config.network.param_count():,} parameters, "
                    f"{config.network.train_flops_per_sample() / 1e6:.1f} MFLOP/sample forward+backward",
                ),
                ("data", f"train {config.train} ({len(data.train_x)} rows, {len(data.val_x)} held out for validation)"),
                ("test data", test_set),
                ("steps", f"{self.step}" + (f" (resumed from {self.resume_from})" if self.resume_from else "")),
                ("diagnostics", " | ".join(self.diagnostics) or "none"),
                *([("noise scale", self.noise_scale.describe())] if self.noise_scale is not None else []),
                ("final train", pair(summary["train"]) + "  (mean over the last epoch's steps)"),
                ("final val", pair(summary["val"])),
                ("final test", pair(summary["test"])),
                (
                    "median step",
                    "n/a"
                    if median is None
                    else f"{median:.2f} ms/step ({warm}), {summary['samples_per_sec']:.0f} samples/s",
                ),
                ("execution", self.execution_note),
                ("precision", self.precision_note + self._loss_scale_text()),
                ("threads", f"--threads {config.threads}; {environment_text(THREAD_VARIABLES)}"),
                ("malloc", f"--malloc {config.malloc}; {environment_text(MALLOC_VARIABLES)}"),
                ("tuned", tuned_log_line(config)),
                ("peak rss", f"{peak_rss_mb():.0f} MB (ru_maxrss of this process)"),
                ("csv", self.csv_path),
                ("predictions", summary["test_predictions"] or "none"),
            ]
            + self._schedule_log_lines(),
        )
        self._logged = True

    def _schedule_log_lines(self) -> list:
        lines = []
        if self.config.batch_schedule:
            lines.append(
                (
                    "batch schedule",
                    "; ".join(
                        f"epoch {epoch + 1}: batch {batch}"
                        + ("" if ms is None else f", re-trace/compile/reshape {ms:.0f} ms (outside step_time_ms)")
                        for epoch, batch, ms in self.batch_phases
                    ),
                )
            )
        target = self.config.target_accuracy
        if target is not None:
            reached = self.target_reached
            lines.append(
                (
                    "time to accuracy",
                    f"{target:g} not reached in {self.step} steps, {self.samples_seen:,} samples"
                    if reached is None
                    else f"{target:g} reached at epoch {reached['epoch']}, step {reached['step']}: "
                    f"{reached['wall_s']:.2f} s, {reached['samples']:,} samples "
                    f"(val accuracy {reached['accuracy']:.4f})",
                )
            )
        return lines

    def _loss_scale_text(self) -> str:
        """fp16's loss scale over the run and the steps it skipped, for results.log."""
        if not self.loss_scales:
            return ""
        (first_step, first), (last_step, last) = self.loss_scales[0], self.loss_scales[-1]
        return (
            f"; loss scale {first:g} at step {first_step}, {last:g} at step {last_step} "
            f"(min {min(scale for _, scale in self.loss_scales):g}); skipped steps (overflowed gradients): "
            f"{self.skipped_steps} of {self.step}"
        )

    def _print_summary(self, summary: dict) -> None:
        def fmt(values, index):
            return "n/a" if values is None or values[index] is None else f"{values[index]:.4f}"

        rows = [("train", summary["train"]), ("val", summary["val"]), ("test", summary["test"])]
        self._say(f"\n{'':8}{'loss':>10}{'accuracy':>10}")
        for name, values in rows:
            self._say(f"{name:8}{fmt(values, 0):>10}{fmt(values, 1):>10}")
        if summary["median_ms"] is not None:
            self._say(
                f"median {summary['median_ms']:.2f} ms/step, {summary['samples_per_sec']:.0f} samples/s "
                f"over {self.step} steps · rows in {self.csv_path} · run {self.run_id}"
            )
        if self.noise_scale is not None:
            self._say(
                f"gradient noise scale: {self.noise_scale.critical_batch_text()} samples "
                f"(B_simple at the end, global batch {self.config.effective_batch})"
            )
