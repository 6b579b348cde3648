"""The package's user-facing errors, and how a command-line tool reports them: one line, a non-zero exit code.

Only a `CapsNetError` (bad input: a file, an option, a missing dataset) becomes one line; anything else
(a KeyError, a ValueError from deep inside torch) is a bug, and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn


class CapsNetError(Exception):
    """An error caused by input (a file, an option, a missing dataset), not by a bug."""

    exit_code = 2


class InvalidArgumentError(CapsNetError, ValueError):
    """A value the user gave (an option, a name, a range) is not allowed; also a ValueError."""


class OutOfMemoryError(CapsNetError):
    """A batch did not fit the machine's memory: said in one line with the smaller batch to try."""


def out_of_memory(error: BaseException, batch_size: int, option: str = "--batch-size") -> OutOfMemoryError | None:
    """`error` as one line naming the batch and `option`, when it is an allocation failure (Python's MemoryError,
    torch's CPU allocator or CUDA out of memory); None for any other error. The paper's EM network at a batch of
    128 under 6 GiB was an allocator traceback."""
    text = str(error)
    if not (
        isinstance(error, MemoryError)
        or isinstance(error, RuntimeError)
        and ("can't allocate memory" in text or "out of memory" in text.lower())
    ):
        return None
    tried = re.search(r"tried to allocate (\d+) bytes", text)
    size = f" (an allocation of {int(tried.group(1)) / 2**20:,.0f} MiB failed)" if tried else ""
    smaller = f"try {option} {batch_size // 2}" if batch_size > 1 else "this machine has too little memory for it"
    return OutOfMemoryError(f"out of memory with batches of {batch_size}{size}: {smaller}")


@contextlib.contextmanager
def said_out_of_memory(batch_size: int, option: str = "--batch-size") -> Iterator[None]:
    """Run the block; an allocation failure in it becomes `out_of_memory`'s one line."""
    try:
        yield
    except (MemoryError, RuntimeError) as error:
        said = out_of_memory(error, batch_size, option)
        if said is None:
            raise
        raise said from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (`prog: error: ...`) instead of the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def print_help(self, file: Any = None) -> None:
        """--help, written and flushed here: a stdout that takes nothing (`> /dev/full`) is one line and exit 2, not
        a help that vanishes with exit 0; a reader that goes away ends it quietly (141), as a command's output does."""
        out = file or sys.stdout
        if out is None:  # standard output closed (`>&-`)
            self.exit(2, f"{self.prog}: error: cannot write the output: standard output is closed\n")
        try:  # written here: argparse's own printing drops an OSError silently
            out.write(self.format_help())
            out.flush()
        except BrokenPipeError:
            _silence_stdout()
            sys.exit(128 + 13)
        except OSError as error:
            _silence_stdout()
            self.exit(2, f"{self.prog}: error: cannot write the output: {(error.strerror or str(error)).lower()}\n")

    @staticmethod
    def whole_number(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None

    @staticmethod
    def positive_int(text: str) -> int:
        value = ArgumentParser.whole_number(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
        return value

    @staticmethod
    def whole_number_in(low: int, high: int) -> Callable[[str], int]:
        """An argparse type: a whole number from `low` to `high`."""

        def convert(text: str) -> int:
            value = ArgumentParser.whole_number(text)
            if not low <= value <= high:
                raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
            return value

        return convert

    @staticmethod
    def positive_float(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value


class OutputError(CapsNetError):
    """The command's output could not be written (a full disk, a device that takes nothing)."""


class _GuardedOutput:
    """stdout whose write failures (other than a reader going away) are an `OutputError`, not a traceback."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:  # started with its standard output closed (`>&-`): Python leaves sys.stdout None
            raise OutputError("cannot write the output: standard output is closed")
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(f"cannot write the output: {(error.strerror or str(error)).lower()}") from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError(f"cannot write the output: {(error.strerror or str(error)).lower()}") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """Point stdout at /dev/null (Python's advice), so that the interpreter's own flush at exit raises nothing."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # not a real file (a test's StringIO, or
        # None where standard output was closed): nothing to flush
        pass


def run_cli(body: Callable[[], int], prog: str | None = None) -> int:
    """Run `body`; a CapsNetError becomes one line on stderr and its exit code (2, or the error's own). A reader that
    goes away (`predict --json ... | head -c 1`) ends the command quietly with 141, as a shell's own tools do; an
    output that cannot be written (`> /dev/full`) is one line."""
    try:
        with contextlib.redirect_stdout(_GuardedOutput(sys.stdout)):
            try:
                code = body()
            except SystemExit:  # argparse's --help and its usage errors end here: their text is written first
                sys.stdout.flush()
                raise
            sys.stdout.flush()  # a failure to write is found here, not by the interpreter at exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return 128 + 13  # killed by SIGPIPE, as the shell reports it
    except CapsNetError as error:
        if isinstance(error, OutputError):
            _silence_stdout()
        name = prog or argparse.ArgumentParser().prog
        message = " ".join(str(error).split())  # one line, whatever the error's text
        print(f"{name}: error: {message}", file=sys.stderr)
        return error.exit_code
