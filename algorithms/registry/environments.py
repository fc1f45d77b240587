"""The environments some frameworks need beside the main one: `.venv-legacy` for the
Theano family (`make legacy-setup`) and pycaffe for Caffe (`caffe_wrapper/build_caffe.sh`,
what `make caffe` runs). `run_all.py` asks `not_run(framework)` before each framework:
the environment is built once when it is missing, its output shown and kept in a log,
and a build that fails gives a `NotRun` (the reason, the log, the one command that
fixes it) that takes the table row's place, so the other frameworks still run.
Imports no framework."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from algorithms.registry import legacy_env
from algorithms.paths import LEGACY_PYTHON, REPO_ROOT

LEGACY_FIX = "make legacy-setup"
CAFFE_FIX = "make caffe"
# the lines a build writes when it knows what failed (the Makefile's, build_caffe.sh's die)
OWN_ERROR = re.compile(r"^\[(legacy-setup|caffe)\] (error|ERROR): ")
MAKE_NOISE = re.compile(r"^make(\[\d+\])?: ")


@dataclass(frozen=True)
class NotRun:
    """A framework left out because its environment could not be built here."""

    what: str  # ".venv-legacy could not be built"
    reason: str  # one line of the build's output
    log: str  # the build's whole output
    fix: str  # the one command that fixes it

    def __str__(self) -> str:
        log = f"; log {self.log}" if self.log else ""
        return f"not run: {self.what} ({self.reason}{log}); fix: {self.fix}"


_checked: dict = {}  # environment -> NotRun | None, once per process


def not_run(framework, log_dir: str, prefix: str = "") -> NotRun | None:
    """None when `framework`'s environment is there (built now if it was missing);
    otherwise why not, printed as the run's line."""
    environment = "legacy" if framework.venv == "legacy" else "caffe" if framework.package == "caffe_wrapper" else None
    if environment is None:
        return None
    if environment not in _checked:
        check = check_legacy if environment == "legacy" else check_caffe
        _checked[environment] = check(log_dir)
    missing = _checked[environment]
    if missing:
        print(f"{prefix}{framework.name}: {missing}\n", flush=True)
    return missing


def check_legacy(log_dir: str) -> NotRun | None:
    if shutil.which("make") is None:
        if os.path.exists(LEGACY_PYTHON):
            return None
        return NotRun(".venv-legacy is missing", "`make` is not installed to build it", "", "sudo apt-get install make")
    if legacy_env.up_to_date():
        return None
    return build(
        ".venv-legacy could not be built", [*legacy_env.MAKE, "legacy-setup"], log_dir, "legacy-setup", LEGACY_FIX
    )


def check_caffe(log_dir: str, python: str = sys.executable) -> NotRun | None:
    try:
        if subprocess.run([python, "-c", "import caffe"], capture_output=True).returncode == 0:
            return None
    except OSError:  # no such interpreter: the build says so
        pass
    command = ["bash", os.path.join(REPO_ROOT, "caffe_wrapper", "build_caffe.sh"), python]
    return build("pycaffe could not be built", command, log_dir, "caffe", CAFFE_FIX)


def build(what: str, command: list, log_dir: str, name: str, default_fix: str) -> NotRun | None:
    """Runs a build with its output shown and written to <log_dir>/<name>.log."""
    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"{name}.log")
    output = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
            output.append(line)
        sys.stdout.flush()
        if proc.wait() == 0:
            return None
        log.write(f"exit status {proc.returncode}: {' '.join(command)}\n")
    reason, fix = reason_and_fix("".join(output))
    return NotRun(what, reason, log_path, fix or apt_fix("".join(output), default_fix))


def reason_and_fix(text: str) -> tuple:
    """The line of a failed build's output that says what failed, and the fix it names
    ("...; fix: COMMAND"), if any: the build's own error line, else the last line that
    speaks of an error (make's "***" lines say only which target), else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not MAKE_NOISE.match(line)]
    own = [line for line in lines if OWN_ERROR.match(line)]
    errors = [line for line in lines if re.search(r"error|failed", line, re.I) and "***" not in line]
    line = OWN_ERROR.sub("", (own or errors or lines or ["no output"])[-1]).lstrip("| ").strip()
    reason, _, fix = line.partition("; fix: ")
    return reason, fix


def apt_fix(text: str, default_fix: str) -> str:
    """build_caffe.sh names the apt packages it could not install: install them, then build."""
    found = re.findall(r"(?:install: |installing missing packages: )(.+)$", text, re.M)
    return f"sudo apt-get install {found[-1].strip()} && {default_fix}" if found else default_fix
