"""One training run's bookkeeping, the same for every framework (`RunSession`), which
the loops and the wrappers call step by step. It composes the parts that do the work:
the CSV rows (recorder.RunRows), the progress lines (progress.py), the stopping rules
(stopping.py), the learning-rate schedule (config/schedule.py), the clock (clock.py), the
checkpoints (checkpoint.py) and the end-of-run report: summary, results.log block,
printed table (report.py)."""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

import numpy as np

from algorithms.session.checkpoint import Checkpoints
from algorithms.session.clock import RunClock
from algorithms.config.run_config import RunConfig
from algorithms.contract.types import Runtime
from algorithms.session.faults import (
    EpochEvidence,
    first_loss_problem,
    near_chance_problem,
    raise_if_stop_requested,
    stuck_loss_problem,
)
from algorithms.session.noise_scale import NoiseScale
from algorithms.session.progress import Progress
from algorithms.records import results_csv_name
from algorithms.session.recorder import RunRows, write_predictions
from algorithms.session.report import report_run, summarize, write_log_block
from algorithms.session.settings_record import append_settings, device_settings, releases, settings_of
from algorithms.session.stopping import StoppingRules
from algorithms.dataset.data import Dataset, batch_order, steps_per_epoch
from algorithms.machine.network_memory import network_memory
from algorithms.network.dropout import uniforms


@dataclass(frozen=True)
class StepAnswer:
    """The session's answer to a recorded step (record_step): what the loop does next."""

    checkpoint: bool  # save a checkpoint now (--checkpoint_every)
    stop: bool  # stop after this step (--max_steps, a target reached, early stopping)


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


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
        self.framework, self.backend = runtime.framework, runtime.backend
        self.versions, self.devices = releases(runtime.versions), runtime.devices
        self.device = runtime.device  # where the framework placed the run (contract.Device)
        self.run_id = config.run_id or new_run_id()
        self.epoch_steps = config.epoch_steps(len(dataset.train_x))  # read once, before the first step
        self.steps_per_epoch = config.steps_at(len(dataset.train_x), config.batch_size)
        self.planned_steps, self.outputs_per_sample = self._step_check_plan(config)
        csv_name = results_csv_name(config.network.name, self.framework, self.backend)
        self.csv_path = os.path.join(config.results_dir, csv_name)
        # before the CSV is opened: a bad --resume writes nothing
        self.checkpoints = Checkpoints(config, self.run_id, csv_name)
        self.checkpoint_root, self.resume_from = self.checkpoints.root, self.checkpoints.resume_from
        identity = {
            "run_id": self.run_id,
            "framework": self.framework,
            "backend": self.backend,
            "network": config.network.name,
            "strategy": config.strategy,
            "devices": config.devices,
            "global_batch": config.effective_batch,
            "device": self.device.name,
        }
        self.rows = RunRows(self.csv_path, identity, record)
        if record:  # what a fair comparison must hold equal, known before the first step
            settings = {**settings_of(config), **device_settings(self.device), "releases": self.versions}
            append_settings(self.csv_path, self.run_id, self.framework, self.backend, settings)
        self.progress = Progress(config.num_epochs, config.quiet, record and config.part == "run")
        self.schedule = config.learning_rate_schedule()
        self.stopping = StoppingRules(config, self.progress.say)
        self.clock = RunClock()
        self.noise_scale = NoiseScale() if config.noise_scale else None  # fed by the loop, step by step
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
        self.step = 0
        self.recorded_step = 0  # the last step whose train row is in the CSV
        self.step_times_ms: list = []
        self.last_val: Optional[tuple] = None  # (loss, accuracy) of the last validation
        self.last_train: Optional[tuple] = None  # the mean (loss, accuracy) over the last epoch's steps
        self.samples_seen = 0  # training samples stepped on so far (time to accuracy)
        self.resume_position = (0, 0)  # (epoch, index of the next optimizer step in it)
        self.batch_phases: list = []  # --batch_schedule: (epoch, batch, warm-up ms or None) per phase run
        self._epoch_batch: Optional[int] = None
        self._val_wall = 0.0  # the last val row's wall time: time to accuracy is read back from it
        self.finished = False
        self.logged = False  # this run's results.log block is written (report.write_log_block sets it)
        self.last_step: Optional[tuple] = None  # (loss, accuracy) of the last optimizer step recorded
        # the step check's line (run/step_check.py), for results.log; None where no loop ran one
        self.step_check_note: Optional[str] = None
        self.yardstick_note: Optional[str] = None  # the run's drift yardstick and its cost (run/yardstick.py)
        self.twin = None  # the twin this run measured (run/yardstick.Twin): its envelope is written after the run
        # the run's StepCheck where a wrapper's own per-step hook drives it (Keras's fit callback)
        self.step_check = None
        if self.checkpoints.resume_state is not None:
            self._restore(self.checkpoints.resume_state)
        if not config.quiet:
            self.progress.say(
                f"{self.framework}/{self.backend} · {config.network.name} · {dataset.describe()} · "
                f"batch {config.batch_size} · {config.num_epochs} epochs · run {self.run_id}",
                flush=True,
            )

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_due(self) -> bool:
        return self.checkpoints.due(self.step)

    def save_checkpoint(self, trainer, epoch: int, next_index: int) -> None:
        """The framework's state and where the run stands; called after the step's row is written."""
        self.checkpoints.save(trainer, self.step, self._state(epoch, next_index) if self.record else None)

    def _state(self, epoch: int, next_index: int) -> dict:
        return {
            "step": self.step,
            "epoch": epoch,
            "next_index": next_index,
            "schedule": self.schedule.state(),
            **self.stopping.state(),
            **self.clock.state(),
            "samples_seen": self.samples_seen,
            "last_val": self.last_val,
            "last_train": self.last_train,
            **self.progress.state(),
        }

    def _restore(self, state: dict) -> None:
        """`_state()` of the checkpointed run; a key it may not have (older versions did not write it) has a default."""
        self.step = self.recorded_step = state["step"]
        self.resume_position = (state["epoch"], state["next_index"])
        self.schedule.restore(state["schedule"])
        self.stopping.restore(state)
        self.clock.restore(state)
        self.samples_seen = state.get("samples_seen", 0)
        self.last_val = tuple(state["last_val"]) if state["last_val"] else None
        self.last_train = tuple(state["last_train"]) if state["last_train"] else None
        self.progress.restore(state)
        epoch, next_index = self.resume_position
        if epoch < len(self.epoch_steps) and next_index < self.epoch_steps[epoch]:
            where = f"at step {self.step + 1} (epoch {epoch + 1})"
        else:  # checkpointed after an epoch's last step: its validation comes first
            where = f"after epoch {epoch + 1}'s last step (its validation, then step {self.step + 1})"
        self.progress.say(f"resuming run {self.run_id} {where} from {self.resume_from}", flush=True)

    # ------------------------------------------------------------------ per step
    def wall(self) -> float:
        """Seconds the run has trained, carried across --resume (the CSV's wall_time_s)."""
        return self.clock.elapsed_s()

    @property
    def learning_rate(self) -> float:
        """The lr for the optimizer step about to run (scaling, warm-up and plateau
        applied); a wrapper sets it on its optimizer before each step."""
        return self.schedule.at(self.step)

    @property
    def target_reached(self) -> Optional[dict]:
        """--target_accuracy: where validation first reached it (epoch, step, wall_s, samples, accuracy)."""
        return self.stopping.target_reached

    def _step_check_plan(self, config: RunConfig) -> tuple:
        """What the step check spreads over and scales with: the optimizer steps the whole run
        plans (each epoch at its own batch), and the values the network's layers output per
        sample (the memory of its float64 looks), read here, before the run's first step."""
        planned = sum(self.epoch_steps)
        network = config.reference_network or config.network
        return planned, network_memory(network, config.optimizer).outputs_per_sample

    def optimizer_batches(self, epoch: int) -> list:
        """One list per optimizer step of `--accumulate` index arrays (the shared
        batch order at batch_size x accumulate, each cut into accumulate parts), so
        accumulating K batches sees exactly the samples of one K x batch step. The
        batch is the epoch's (--batch_schedule)."""
        config = self.config
        batch = config.batch_at(epoch)
        steps = batch_order(
            len(self.dataset.train_x), batch * config.accumulate, config.order_epoch(epoch), config.order_seed(epoch)
        )
        return [[indices[start : start + batch] for start in range(0, len(indices), batch)] for indices in steps]

    def begin_epoch(self, epoch: int) -> Optional[int]:
        """Called by the loop before an epoch's first step: the epoch's global batch goes
        into the rows and the lr schedule (--batch_schedule, --lr_schedule). Returns the
        new --batch_size when it differs from the previous epoch this process ran (the
        wrapper then prepares that shape, outside any step's time), else None."""
        config = self.config
        batch = config.batch_at(epoch)
        self.steps_per_epoch = self.epoch_steps[epoch]
        self.schedule.start_epoch(epoch, batch * config.accumulate)
        self.rows.set_global_batch(batch * config.accumulate)
        changed = self._epoch_batch is not None and batch != self._epoch_batch
        if config.batch_schedule and (changed or self._epoch_batch is None):
            self.batch_phases.append((epoch, batch, None))
        self._epoch_batch = batch
        return batch if changed else None

    def start_epoch(self, epoch: int) -> tuple:
        """The loop's one call before an epoch's first step: begin_epoch, answered with
        (the epoch's optimizer_batches, the new batch to prepare or None)."""
        new_batch = self.begin_epoch(epoch)
        return self.optimizer_batches(epoch), new_batch

    def batch_prepared(self, batch: int, warm_up_ms: float) -> None:
        """The wrapper's re-trace / re-compile / reshape for a new batch took this long."""
        epoch = self.batch_phases[-1][0]
        self.batch_phases[-1] = (epoch, batch, warm_up_ms)
        if not self.config.quiet:
            self.progress.say(
                f"  epoch {epoch + 1}: batch {batch}, prepared in {warm_up_ms:.0f} ms (not in step_time_ms)"
            )

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
        global_rows: Optional[int] = None,
    ) -> None:
        """Record one finished optimizer step; `epoch` is 0-based here, 1-based in
        the CSV. `batch_size` is the rows it trained on, and the row's global_batch the
        rows of its global batch: the same, or for an asynchronous worker's share of
        one, `global_rows` (an epoch's short last step has its own, smaller count).
        `comm_time_ms` is the part of step_time_ms spent communicating,
        where the strategy can measure it. `worker` is whose update this is and
        `staleness` how many other updates were applied between its read of the
        parameters and its own (0 for a synchronous strategy, whose rank 0 records)."""
        learning_rate = self.learning_rate
        self.step += 1
        self.last_step = (loss, accuracy)
        self.samples_seen += batch_size
        self.step_times_ms.append(step_time_ms)
        self.rows.write(
            "train",
            epoch,
            self.step,
            loss,
            accuracy,
            self.wall(),
            global_batch=global_rows or batch_size,
            learning_rate=learning_rate,
            step_time_ms=step_time_ms,
            data_time_ms=data_time_ms,
            samples_per_sec=batch_size * 1000.0 / step_time_ms,
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
        self.progress.step(epoch, loss, accuracy, step_time_ms, self.steps_per_epoch)
        raise_if_stop_requested(self.signal_of_any_process)  # a Ctrl-C / SIGTERM ends the run here, its row written

    def record_step(self, epoch: int, *measured, **named) -> StepAnswer:
        """The loop's one call after a step: train_step (its arguments), answered with
        whether to save a checkpoint and whether to stop, so the loop asks nothing more."""
        self.train_step(epoch, *measured, **named)
        return StepAnswer(checkpoint=self.checkpoint_due(), stop=self.should_stop())

    def should_stop(self) -> bool:
        return self.stopping.should_stop(self.step)

    def dropout_uniforms(self, epoch: int, rows) -> tuple:
        """The uniforms every Dropout layer of the run's network draws its mask from, for
        these training rows in this epoch (0-based): the same in every framework
        (network/dropout.py)."""
        return uniforms(self.config.network, self.config.seed, epoch, rows)

    def initial_evaluation(self, val_loss: float, val_accuracy: float, val_time_ms: float) -> None:
        """The validation split scored at the shared initial weights, before the first step:
        the CSV's `init` row (step 0), which two same-seed runs share to float32 rounding
        whatever else differs, so an evaluation path that is not the spec's (dropout left
        on, another loss) shows there before training can hide it."""
        count = len(self.dataset.val_x)
        self.rows.write(
            "init",
            -1,
            0,
            val_loss,
            val_accuracy,
            self.wall(),
            learning_rate=self.learning_rate,
            step_time_ms=val_time_ms,
            samples_per_sec=count * 1000.0 / val_time_ms if val_time_ms > 0 else None,
        )

    def end_epoch(self, epoch: int, val_loss: float, val_accuracy: float, val_time_ms: float) -> None:
        count = len(self.dataset.val_x)
        self._val_wall = self.wall()
        previous_losses = (self.last_train[0], self.last_val[0]) if self.last_train and self.last_val else None
        self.rows.write(
            "val",
            epoch,
            self.step,
            val_loss,
            val_accuracy,
            self._val_wall,
            learning_rate=self.learning_rate,
            step_time_ms=val_time_ms,
            samples_per_sec=count * 1000.0 / val_time_ms if val_time_ms > 0 else None,
        )
        self.last_val = (val_loss, val_accuracy)
        extra = ""
        if self.noise_scale is not None:
            self.noise_scale.end_epoch(epoch)
            b_simple = self.noise_scale.b_simple
            extra = f" - B_simple: {'n/a' if b_simple is None else f'{b_simple:.0f}'}"
        epoch_steps, self.last_train = self.progress.end_epoch(
            epoch, self.steps_per_epoch, self.last_train, self.last_val, extra
        )
        if epoch_steps:
            self.diagnose(
                stuck_loss_problem(
                    self._epoch_evidence(epoch, previous_losses), self.config.network.num_classes, self.learning_rate
                )
            )
        if self.schedule.end_epoch(val_loss):  # reduce-on-plateau, keyed on the validation loss as early stopping
            self.progress.say(
                f"  validation loss has not improved for {self.config.reduce_lr_on_plateau} epoch(s): "
                f"lr now {self.learning_rate:g}",
                flush=True,
            )
        where = {"step": self.step, "wall_s": self._val_wall, "samples": self.samples_seen}
        self.stopping.end_epoch(epoch, val_loss, val_accuracy, where)

    def _epoch_evidence(self, epoch: int, previous_losses: Optional[tuple]) -> EpochEvidence:
        """What the loss sanity checks (faults.stuck_loss_problem) judge the epoch just validated by."""
        rows, config = len(self.dataset.train_x), self.config
        updates_before = sum(steps_per_epoch(rows, config.effective_batch_at(e)) for e in range(epoch))
        return EpochEvidence(
            epoch=epoch,
            updates=self.step,
            updates_before=updates_before,
            samples=epoch * rows + min(rows, (self.step - updates_before) * config.effective_batch_at(epoch)),
            samples_before=epoch * rows,
            train_loss=self.last_train[0],
            val_loss=self.last_val[0],
            val_accuracy=self.last_val[1],
            val_labels=self.dataset.val_y,
            previous_losses=previous_losses,
        )

    def diagnose(self, problem: Optional[str]) -> None:
        """A loss sanity warning (or any problem the run absorbed): printed once, and on
        results.log's diagnostics line. None: nothing to say."""
        if problem:
            self.diagnostics.append(problem)
            if self.record and self.config.part == "run":
                print(f"\nwarning: {problem}", file=sys.stderr, flush=True)

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
            self.rows.write("test", None, self.step, test_loss, test_accuracy, self.wall(), learning_rate=None)
        self.rows.close()
        if status == "completed":  # a run stopped early says why on its status line instead
            self.diagnose(self._near_chance(test_accuracy))
        predictions_path = None
        if test_predictions is not None and self.record and self.config.part == "run":
            predictions_path = os.path.join(
                self.config.results_dir,
                "predictions",
                f"{os.path.splitext(os.path.basename(self.csv_path))[0]}_{self.run_id}.csv",
            )
            write_predictions(predictions_path, test_predictions)
        test = None if test_loss is None else (test_loss, test_accuracy)
        # the epoch check's rows are all it leaves
        return report_run(self, status, test, predictions_path, self.record and self.config.part == "run")

    def _near_chance(self, test_accuracy: Optional[float]) -> Optional[str]:
        """Whether the run ends where a net that learned nothing would (faults.near_chance_problem)."""
        scores = [
            ("validation", self.last_val[1] if self.last_val else None, self.dataset.val_y),
            ("test", test_accuracy, self.dataset.test_y),
        ]
        return near_chance_problem(scores, self.config.network.num_classes, self.step)

    def fail(self, status: str) -> bool:
        """After a write failed (the disk full, read-only): the CSV closed, and the
        results.log block saying why, unless one is written already; returns False
        when that block cannot be written either."""
        self.finished = True
        self.rows.close()
        if not self.record or self.logged or self.config.part != "run":
            return True
        try:
            write_log_block(self, status, summarize(self, None, None))
        except OSError:
            return False
        return True
