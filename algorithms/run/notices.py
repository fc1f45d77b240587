"""The frameworks' start-up notices: what TensorFlow, XLA and Caffe log through absl /
glog while they load (INFO records such as `I0000 00:00:1796222749.757553 18358
port.cc:153] oneDNN custom operations are on...`, absl's and glog's line about messages
logged before their initialisation, and the warning records in KNOWN_WARNINGS). TensorFlow
2.21 writes its oneDNN notice before absl reads TF_CPP_MIN_LOG_LEVEL, so no setting hides
it: an entry script drops these lines itself while the framework loads
(`startup_notices_dropped`), and run_all.py from its children's console output
(algorithms/studies/child_output.py). Anything else (other warnings and errors, the
harness's own lines, tracebacks) shows."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager

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


# set by run_all.py for its children: their stderr reaches it whole (it logs every line, and filters the console)
KEEP_NOTICES_VARIABLE = "CNN_PARALLEL_KEEP_NOTICES"


@contextmanager
def startup_notices_dropped():
    """While the block runs (the framework's import), stderr (file descriptor 2, where
    absl and glog write) goes to a temporary file; then every line of it but the known
    notices goes to stderr, every line if the block raised. Unchanged when
    KEEP_NOTICES_VARIABLE is set."""
    if os.environ.get(KEEP_NOTICES_VARIABLE):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        raised = True
        try:
            yield
            raised = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            notices = StartupNotices()
            lines = capture.read().decode(errors="replace").splitlines()
            kept = [line for line in lines if raised or not notices.is_notice(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()
