"""A child run's stderr, for run_all.py: all of it into the run's log file, and on the
console all but the frameworks' known start-up notices (every line with --verbose).

The notices are what TensorFlow, XLA and Caffe log through absl / glog at start-up:
INFO records (`I1201 21:49:16.609638  14533 cpu_feature_guard.cc:227] ...`, Caffe's
solver definition, several lines each), absl's and glog's line about messages logged
before their initialisation, and the warning records listed in KNOWN_WARNINGS. Anything else
(a framework's other warnings and errors, the harness's own lines, tracebacks) shows.
The child's stdout (progress, the summary) is the console's, untouched. The notice
grammar is algorithms/run/notices.py's, which an entry script run alone also applies."""

from __future__ import annotations

import os
import subprocess
import sys

from algorithms.run.notices import KEEP_NOTICES_VARIABLE, StartupNotices


def run_logged(command: list, env: dict, log_path: str, verbose: bool) -> int:
    """Runs `command`, its stderr written whole to `log_path` and, filtered unless
    `verbose`, to this process's stderr; returns its exit status."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    env = {**env, KEEP_NOTICES_VARIABLE: "1"}  # the child writes them all: the log file keeps every line
    notices = StartupNotices()
    with (
        open(log_path, "w") as log,
        subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, errors="replace") as child,
    ):
        try:
            for line in child.stderr:
                log.write(line)
                if verbose or not notices.is_notice(line.rstrip("\n")):
                    sys.stderr.write(line)
                    sys.stderr.flush()
            return child.wait()
        except BaseException:  # Ctrl-C, or this process told to stop: the child goes too
            child.kill()
            raise
