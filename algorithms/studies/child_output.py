"""A child run's stderr, for run_all.py: all of it into the run's log file, and on the
console all but the frameworks' known start-up notices (every line with --verbose).

The notices are what TensorFlow, XLA and Caffe log through absl / glog at start-up:
INFO records (`I1201 21:49:16.609638  14533 cpu_feature_guard.cc:227] ...`, Caffe's
solver definition, several lines each), absl's and glog's line about messages logged
before their initialisation, and the warning records listed in KNOWN_WARNINGS. Anything else
(a framework's other warnings and errors, the harness's own lines, tracebacks) shows.
The child's stdout (progress, the summary) is the console's, untouched."""

from __future__ import annotations

import os
import re
import subprocess
import sys

# one absl / glog record: level, date (mmdd, or yyyymmdd in newer glog), time, thread, file:line]
# (absl before its initialisation writes the date as 0000 and the time as 00:00:<epoch seconds>)
LOG_RECORD = re.compile(r"^([IWEF])(?:\d{4}){1,2} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] (.*)$")
# absl's and glog's own line before their first record, when the program did not initialise them
BEFORE_INIT = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "WARNING: Logging before InitGoogleLogging() is written to STDERR",
)
# warning records that are start-up or input-pipeline notices, not problems of the run
KNOWN_WARNINGS = (
    re.compile(r"^Input of GeneratorDatasetOp::Dataset will not be optimized because"),
    re.compile(r"^Local rendezvous is aborting with status: OUT_OF_RANGE: End of sequence"),
)
# lines that always start something new: the harness's own, a Python warning or traceback
OWN_LINE = re.compile(r"^(error|warning|note|Traceback|Epoch )|^\S+:\d+: \w*Warning: ")


class StartupNotices:
    """Tells, line by line, whether a stderr line is (part of) a known notice. A record's
    message may span lines (Caffe prints its net definition after one INFO header): the
    lines after a notice belong to it until a new record or a line of the run's own."""

    def __init__(self):
        self.in_notice = False

    def is_notice(self, line: str) -> bool:
        record = LOG_RECORD.match(line)
        if record:
            level, message = record.groups()
            self.in_notice = level == "I" or (level == "W" and any(p.match(message) for p in KNOWN_WARNINGS))
            return self.in_notice
        if line in BEFORE_INIT:
            return True
        self.in_notice = self.in_notice and bool(line.strip()) and not OWN_LINE.match(line)
        return self.in_notice


def run_logged(command: list, env: dict, log_path: str, verbose: bool) -> int:
    """Runs `command`, its stderr written whole to `log_path` and, filtered unless
    `verbose`, to this process's stderr; returns its exit status."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
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
