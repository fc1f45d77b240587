"""The parts of a wrapper's `supported()` (contract.Support) that several wrappers
declare alike, each for the same reason. Imports nothing: a wrapper's __init__.py
reads it before any framework loads."""

from __future__ import annotations

# the session computes every step's lr (scaling, warm-up, plateau, schedule) and the loop
# sets it through Trainer.set_learning_rate: a trainer that takes any lr runs all four
LR_SCHEDULE_FLAGS = ("--lr_scaling linear", "--warmup_steps", "--reduce_lr_on_plateau", "--lr_schedule")
PRECISION_FLAGS = ("--precision bf16", "--precision fp16")


def graph_only_fp32_advice(trainer: str, graph_only: str) -> dict:
    """Support.advice of a framework that trains in float32 only and builds its whole
    step once, then runs it: `trainer` names it ("Caffe"), `graph_only` says so in its
    terms ("Caffe is graph-only (the whole step is built once, then run)")."""
    precision = f"{trainer} trains in float32 only here; drop --precision"
    return {
        "--precision bf16": precision,
        "--precision fp16": precision,
        "--execution eager": f"{graph_only}; drop --execution or pass --execution graph",
        "--compile": f"{graph_only}; drop --compile / --execution compiled or pass --execution graph",
    }
