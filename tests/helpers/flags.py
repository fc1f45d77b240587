"""The entry scripts' command lines, as the tests build them: keywords become flags,
so a test names only what its run sets."""

from __future__ import annotations


def flags(**values) -> list:
    """`name=value` gives `--name value`, `name=True` a bare `--name`; None and False
    leave the flag out. Keyword order is flag order."""
    argv = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        argv.append(f"--{name}")
        if value is not True:
            argv.append(str(value))
    return argv


def run_flags(train, results_dir=None, *, test="none", quiet=True, **values) -> list:
    """A run on `train` (no test file unless given) writing into `results_dir`,
    without its per-epoch progress lines unless `quiet=False`; `values` as in flags()."""
    return flags(train=train, test=test, **values, results_dir=results_dir, quiet=quiet)
