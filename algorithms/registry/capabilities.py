"""Which framework runs which strategy and optional flag, read from each wrapper
package's `supported()` (no framework is imported), as the README's table.

    python -m algorithms.registry.capabilities      # prints the markdown table
"""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager

from algorithms.registry.frameworks import FRAMEWORKS, Framework
from algorithms.config.run_config import OPTIONAL_FLAGS, WITHOUT_TABLE_COLUMN
from algorithms.contract.types import Support
from algorithms.network.parallel import STRATEGIES

# the table's flag columns, in the order of OPTIONAL_FLAGS
FLAGS = tuple(flag for flag in OPTIONAL_FLAGS if flag not in WITHOUT_TABLE_COLUMN)


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


def support(framework: Framework) -> Support:
    """The framework's wrapper's supported(), read with the framework's environment
    (KERAS_BACKEND picks Keras's backend); no framework is imported."""
    before = dict(os.environ)
    try:
        with environment(framework.env):
            return importlib.import_module(framework.package).supported()
    finally:  # a wrapper package may set its framework's defaults (caffe_wrapper: GLOG_minloglevel)
        os.environ.clear()  # for its own processes: never for the one that asked
        os.environ.update(before)


def capabilities() -> list:
    """(name, strategies, flags) for every framework of the registry."""
    table = []
    for framework in FRAMEWORKS:
        found = support(framework)
        table.append((framework.name, found.strategies, found.flags))
    return table


# flags whose value is the capability: every framework runs --device cpu and auto
VALUED_COLUMNS = ("--device gpu",)


def column_name(flag: str) -> str:
    """The flag's name, with its value where several columns share the name (--precision bf16, fp16)
    or the value is what some frameworks lack (--device gpu)."""
    name = flag.split()[0]
    return flag if flag in VALUED_COLUMNS or sum(other.split()[0] == name for other in FLAGS) > 1 else name


def markdown_table() -> str:
    header = ["framework"] + [f"`{s}`" for s in STRATEGIES] + [f"`{column_name(flag)}`" for flag in FLAGS]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, strategies, flags in capabilities():
        cells = ["yes" if s in strategies else "-" for s in STRATEGIES]
        cells += ["yes" if flag in flags else "-" for flag in FLAGS]
        lines.append("| " + " | ".join([name] + cells) + " |")
    return "\n".join(lines)


def without_column() -> list:
    """One line per flag the table has no column for: the frameworks that have it."""
    table = capabilities()
    return [
        f"{flag}: {', '.join(name for name, _, flags in table if flag in flags) or 'none'}"
        for flag in WITHOUT_TABLE_COLUMN
    ]


if __name__ == "__main__":
    print(markdown_table())
    print("\nFlags one framework has (no column):\n" + "\n".join(without_column()))
