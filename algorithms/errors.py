"""The exceptions for problems the user can fix, and the exit statuses.

InputError (a bad file, a bad flag): entry scripts print its message as one line,
`error: ...`, and exit with status 2, before any result row is written.
ResourceError (the results cannot be written: a read-only or full disk): one line,
status 3.
PeerLost (a worker or server process of the run died): one line, status 4.
"""


class InputError(Exception):
    """A problem in the user's input; the message names the file/line and the fix."""


class ResourceError(Exception):
    """The machine cannot do what the run needs (write its results); the message names the path and the fix."""


class PeerLost(Exception):
    """A process of a multi-process run died (killed, crashed): the message names it.
    The run ends with one line, a results.log block and every finished row kept."""


EXIT_INPUT_ERROR = 2
EXIT_RESOURCE_ERROR = (
    3  # the machine ran out of something (memory, disk space) or cannot write: rows kept, advice printed
)
EXIT_PEER_LOST = 4  # a process of the run died; the rows of every finished step are kept
