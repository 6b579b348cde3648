"""The package's user-facing error: a command-line tool prints it as one line."""


class CapsNetError(Exception):
    """An error caused by input (a file, an option, a missing dataset), not by a bug."""
