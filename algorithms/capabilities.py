"""Which framework runs which strategy and optional flag, read from each wrapper
package's `supported()` (no framework is imported), as the README's table.

    python -m algorithms.capabilities      # prints the markdown table
"""
from __future__ import annotations

import importlib
import os
from contextlib import contextmanager

from .parallel import STRATEGIES
from .suite import RUNS

SCRIPT_PACKAGES = {"tensorflow_script.py": "tensorflow_wrapper", "keras_script.py": "keras_wrapper",
                   "keras_theano_backend.py": "keras_wrapper", "torch_script.py": "torch_wrapper",
                   "lasagne_script.py": "lasagne_wrapper", "caffe_script.py": "caffe_wrapper"}
# keras_theano_backend.py runs keras_wrapper with KERAS_BACKEND=theano (in the legacy env)
SCRIPT_ENV = {"keras_theano_backend.py": {"KERAS_BACKEND": "theano"}}
FLAGS = ("--accumulate", "--lr_scaling linear", "--warmup_steps", "--reduce_lr_on_plateau", "--checkpointing",
         "--compile",
         "--checkpoint_every")


@contextmanager
def environment(values: dict):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def capabilities() -> list:
    """(run name, supported dict) for every framework/backend of the main command."""
    table = []
    for name, (script, env, _, _) in RUNS.items():
        with environment({**env, **SCRIPT_ENV.get(script, {})}):
            table.append((name, importlib.import_module(SCRIPT_PACKAGES[script]).supported()))
    return table


def markdown_table() -> str:
    header = ["framework"] + [f"`{s}`" for s in STRATEGIES] + [f"`{flag.split()[0]}`" for flag in FLAGS]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, supported in capabilities():
        cells = ["yes" if s in supported["strategies"] else "-" for s in STRATEGIES]
        cells += ["yes" if flag in supported["flags"] else "-" for flag in FLAGS]
        lines.append("| " + " | ".join([name] + cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
