"""The one exception for problems the user can fix (bad file, bad flag).

Entry scripts print its message as one line, `error: ...`, and exit with status 2,
before any result row is written.
"""


class InputError(Exception):
    """A problem in the user's input; the message names the file/line and the fix."""


EXIT_INPUT_ERROR = 2
EXIT_RESOURCE_ERROR = 3  # the machine ran out of something (memory): rows kept, advice printed
