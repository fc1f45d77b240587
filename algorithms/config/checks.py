"""Flags that cannot run together, checked in one place and one order, before the
parallel plan is made: the first rule broken is one line (an InputError, exit
status 2) naming the flags and the fix. A flag's own value is checked by its argparse
type (flags.py); the plan checks what the batch and the devices allow
(network/parallel.py make_plan)."""

from __future__ import annotations

import argparse
import re
from typing import Iterator

from algorithms.errors import InputError
from algorithms.config.values import schedule_text


def check_flags(flags: argparse.Namespace, preset_epochs: int) -> None:
    """Raises the first rule `flags` (parsed by parser.build_parser) break."""
    broken = next(broken_rules(flags, preset_epochs), None)
    if broken:
        raise InputError(broken)


def broken_rules(flags: argparse.Namespace, preset_epochs: int) -> Iterator[str]:
    """What is wrong with `flags`, rule by rule, in the order they are checked."""
    auto = flags.batch_size == "auto"
    epochs = flags.num_epochs or preset_epochs
    if flags.memory_budget_mb is not None and not auto:
        yield f"--memory_budget_mb {flags.memory_budget_mb:g}: only with --batch_size auto; drop it"
    if auto and flags.strategy != "single":
        yield (
            f"--batch_size auto with --strategy {flags.strategy}: the finder measures one device; "
            "find the batch with --strategy single, then pass --batch_size (that batch x devices)"
        )
    if auto and flags.resume:
        yield (
            f"--batch_size auto with --resume {flags.resume}: a resumed run keeps its batch; pass the "
            "--batch_size it chose (its results.log config line)"
        )
    if auto and flags.batch_schedule:
        yield "--batch_size auto with --batch_schedule: the finder picks one batch for the run; drop one"
    if flags.batch_schedule and flags.batch_size is not None:
        yield "--batch_schedule and --batch_size: the schedule sets the batch of every epoch; give one"
    if flags.lr_schedule and flags.learning_rate is not None:
        yield "--lr_schedule and --learning_rate: the schedule sets the lr of every epoch; give one"
    for flag, schedule in (("--batch_schedule", flags.batch_schedule), ("--lr_schedule", flags.lr_schedule)):
        if schedule and schedule[-1][0] > epochs:
            yield (
                f"{flag} {schedule_text(schedule)}: epoch {schedule[-1][0]} is past the run's {epochs} "
                "epochs; raise --num_epochs or drop that entry"
            )
    if flags.compile and flags.execution not in (None, "compiled"):
        yield f"--compile --execution {flags.execution}: --compile is --execution compiled; drop one of them"
    if flags.resume and flags.run_id and flags.run_id != flags.resume:
        yield f"--run_id {flags.run_id} --resume {flags.resume}: a resumed run keeps its run id; drop --run_id"
    if flags.sync_every is not None and flags.strategy != "localsgd":
        yield f"--sync_every {flags.sync_every}: only --strategy localsgd averages every K steps; drop it"
    if flags.ps_endpoint is not None and flags.strategy != "ps":
        yield f"--ps_endpoint with --strategy {flags.strategy}: only --strategy ps meets there; drop it"
    if flags.ps_endpoint is not None and not re.fullmatch(r"[^:\s]+:\d{1,5}", flags.ps_endpoint):
        yield f"--ps_endpoint {flags.ps_endpoint}: expected HOST:PORT, e.g. 10.0.0.1:29500"
    if flags.remote_workers and flags.ps_endpoint is None:
        yield "--remote_workers without --ps_endpoint: the other hosts' workers need HOST:PORT to join at"
    if flags.remote_workers > flags.devices:
        yield f"--remote_workers {flags.remote_workers}: more than the --devices {flags.devices} workers of the run"
    if flags.ps_sync and flags.strategy != "ps":
        yield f"--ps_sync with --strategy {flags.strategy}: only --strategy ps has a server; drop it"
    if flags.noise_scale and (flags.strategy != "data" or flags.devices < 2):
        yield (
            f"--noise_scale with --strategy {flags.strategy} --devices {flags.devices}: it compares one "
            "replica's gradient with the all-reduced one; use --strategy data --devices 2 or more"
        )
    if flags.noise_scale and flags.precision == "fp16":
        yield (
            "--noise_scale with --precision fp16: the gradient norms would be taken on loss-scaled "
            "gradients; use --precision bf16 or fp32"
        )
