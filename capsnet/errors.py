"""The package's user-facing errors: a command-line tool prints them as one line and exits non-zero.

Anything else (a KeyError, a ValueError from deep inside torch) is a bug, and keeps its traceback.
"""


class CapsNetError(Exception):
    """An error caused by input (a file, an option, a missing dataset), not by a bug."""

    exit_code = 2


class InvalidArgumentError(CapsNetError, ValueError):
    """A value the user gave (an option, a name, a range) is not allowed; also a ValueError."""
