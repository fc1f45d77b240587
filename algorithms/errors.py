"""The exceptions for problems the user can fix, and the exit statuses.

InputError (a bad file, a bad flag): entry scripts print its message as one line,
`error: ...`, and exit with status 2, before any result row is written.
ResourceError (the results cannot be written: a read-only or full disk): one line,
status 3.
PeerLost (a worker or server process of the run died): one line, status 4.

Every status a command of the project exits with is an EXIT_ constant here (0 besides);
docs/reliability.md's table lists them all, and tests/test_doc_lists.py holds the two
equal and finds any other number a command exits with.
"""

import signal


class InputError(Exception):
    """A problem in the user's input; the message names the file/line and the fix."""


class ResourceError(Exception):
    """The machine cannot do what the run needs (write its results); the message names the path and the fix."""


class PeerLost(Exception):
    """A process of a multi-process run died (killed, crashed): the message names it.
    The run ends with one line, a results.log block and every finished row kept."""


# run_all.py, a study, the benchmark or a check: a run it started failed or was refused, or
# what it checks does not hold (each named in its output); a script that re-executes itself
# in .venv-legacy could not build it
EXIT_FAILED = 1
EXIT_INPUT_ERROR = 2
EXIT_RESOURCE_ERROR = (
    3  # the machine ran out of something (memory, disk space) or cannot write: rows kept, advice printed
)
EXIT_PEER_LOST = 4  # a process of the run died; the rows of every finished step are kept
# interrupted, by the shell's convention: 128 + the signal number
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM
