"""The command-line tools run inside the test process: what a user's `python -m capsnet ...` does, without starting
an interpreter and importing torch again for every call (about 5 s each on 2 cores).

Tests that need a process of their own (signals, locks held by another process, torchrun, a kill -9) start one.
"""

from __future__ import annotations

import contextlib
import io
import subprocess

from capsnet.__main__ import main


def capsnet(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m capsnet ARGS` in this process: its exit code and what it printed, as a finished process would."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as stop:  # argparse's exit on a bad argument, --help
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    return subprocess.CompletedProcess(["python", "-m", "capsnet", *args], code, out.getvalue(), err.getvalue())
