"""The studies' child runs: an entry script run in a process of its own (so timings do
not compete) and the rows it wrote read back, and the command line every study shares
(a --help that also lists the entry scripts' flags it passes on)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from algorithms.paths import REPO_ROOT
from algorithms.registry.frameworks import get
from algorithms.config.parser import OneLineErrorParser
from algorithms.run.entry import prepare
from algorithms.records import read_rows, results_csv_name
from algorithms.tables import last_line
from algorithms.studies.child_output import run_logged

# with a log file, the frameworks log everything there; the console filters (child_output.py)
FRAMEWORK_LOGS_IN_FULL = {"TF_CPP_MIN_LOG_LEVEL": "0", "GLOG_minloglevel": "0"}


def run_framework(
    name: str,
    flags: list,
    label: str = "",
    env: dict = None,
    quiet: bool = False,
    log: str = None,
    verbose=False,
    python: str = None,
) -> tuple:
    """The entry script of registry name `name` with `flags`, after the line
    `LABEL: python SCRIPT FLAGS` (LABEL: the name); `env` over this process's
    environment and under the framework's own. Its output is shown as it comes, or with
    `quiet` captured, and only a failure's last line shown. With `log`, its stderr goes
    whole to that file and to the console less the frameworks' start-up notices (every
    line with `verbose`; child_output.py). `python`: another environment's interpreter
    (another release's: registry/release_env.py; default this one). Returns (exit status,
    wall seconds)."""
    framework = get(name)
    print(f"{label or name}: python {framework.script} {' '.join(flags)}", flush=True)
    command = [python or sys.executable, os.path.join(REPO_ROOT, framework.script), *flags]
    started = time.perf_counter()
    if log is not None:
        print(f"    log: {log}", flush=True)
        logged_env = {**FRAMEWORK_LOGS_IN_FULL, **os.environ, **(env or {}), **framework.env}
        code = run_logged(command, logged_env, log, verbose)
        print(flush=True)
        return code, time.perf_counter() - started
    proc = subprocess.run(
        command,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {}), **framework.env},
        capture_output=quiet,
        text=quiet,
    )
    if not quiet:
        print(flush=True)
    elif proc.returncode != 0:
        print(f"    failed (exit {proc.returncode}): {last_line(proc.stderr, '(no message)')[:200]}", flush=True)
    return proc.returncode, time.perf_counter() - started


def last_error(log: str) -> str:
    """A failed run's error: the last line of its log that names one ('' where none does)."""
    try:
        with open(log, errors="replace") as handle:
            lines = [line.strip() for line in handle if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if re.match(r"^(\w+\.)*\w*(Error|Exception)\b|^error: ", line)]
    return errors[-1][:240] if errors else ""


def results_csv(results_dir: str, network: str, name: str) -> str:
    """Where the entry script of registry name `name` writes its rows for `network`."""
    framework = get(name)
    return os.path.join(results_dir, results_csv_name(network, framework.framework, framework.backend))


def run_rows(path: str, run_id: str) -> list:
    """The rows run `run_id` wrote to `path`; none when it failed before the file was made."""
    return read_rows(path, run_id) if os.path.exists(path) else []


def study_parser(prog: str, description: str = None, **options) -> OneLineErrorParser:
    """A study's parser: one-line errors, and no help flag of argparse's own
    (parse_study_flags adds the one that also lists the entry scripts' flags)."""
    return OneLineErrorParser(prog=prog, description=description, add_help=False, **options)


def parse_study_flags(parser, argv: list, note: str = "") -> tuple:
    """(the study's own flags, the rest: passed on to every entry script); -h/--help,
    added after the study's flags, prints both and exits."""
    parser.add_argument("-h", "--help", action="store_true")
    args, forwarded = parser.parse_known_args(argv)
    if args.help:
        print_help_with_entry_flags(parser, note)
    return args, forwarded


def print_help_with_entry_flags(parser, note: str = "") -> None:
    """The command's own help, then the entry scripts' flags it passes on; exits."""
    parser.print_help()
    print(f"\nflags passed to every entry script{note}:")
    prepare(["--help"], parser.prog, "")  # prints the shared flags and exits
