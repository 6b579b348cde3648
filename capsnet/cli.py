"""Command-line plumbing: argument errors and user errors as one line, exit code 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from capsnet.errors import CapsNetError


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (`prog: error: ...`) instead of the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    @staticmethod
    def positive_int(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
        return value

    @staticmethod
    def positive_float(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value


def run_cli(body: Callable[[], int], prog: str | None = None) -> int:
    """Run `body`; a CapsNetError or ValueError from user input, or an OSError from a file the user named
    (unwritable, a folder, missing), becomes one line on stderr and exit code 2."""
    try:
        return body()
    except (CapsNetError, ValueError, OSError) as error:
        name = prog or argparse.ArgumentParser().prog
        message = " ".join(str(error).split())  # one line, whatever the error's text
        print(f"{name}: error: {message}", file=sys.stderr)
        return 2
