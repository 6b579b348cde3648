"""A run folder's lock: one trainer writes a folder at a time (`flock` on its .lock file, released by the OS however
the process ends)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Any

from capsnet.errors import CapsNetError
from capsnet.files import write_failure


class RunFolderError(CapsNetError):
    """A run folder could not be created."""


def exclusive_lock(path: Path) -> IO[str] | str:
    """`path` opened and `flock`ed (exclusive, not waiting): the open file, which holds the lock until it is closed
    (by the OS, however the process ends); or, when another process holds it, what the file says (its holder).
    RunFolderError (one line) when it cannot be opened. Without flock (Windows) the file is returned unlocked."""
    try:
        handle = open(path, "a+", encoding="utf-8")
    except OSError as error:
        raise RunFolderError(f"cannot write {path}: {error.strerror or error}") from None
    try:
        import fcntl
    except ImportError:
        return handle
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        said = handle.read().strip()
        handle.close()
        return said
    return handle


class FolderLock:
    """An exclusive lock on a run folder: `flock` on its .lock file (released by the OS with the process)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @classmethod
    def take(cls, path: Path) -> FolderLock:
        handle = exclusive_lock(path)
        if isinstance(handle, str):  # another trainer holds it; the file says which
            holder = handle[:20]
            raise RunFolderError(
                f"{path.parent} is in use by another training process{f' (pid {holder})' if holder else ''}: "
                "wait for it to finish or stop it, or choose another --out"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
        except OSError as error:  # a full disk at the run's start: one line, and no empty lock file left behind
            with contextlib.suppress(OSError):
                handle.close()  # it tries the unwritten bytes once more, and fails alike
            path.unlink(missing_ok=True)
            raise write_failure(path, error) from None
        return cls(handle)

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file releases the flock
            self._handle = None

    @staticmethod
    def held(path: Path) -> bool:
        """Whether some process holds the `flock` on `path` (False for a missing file, and where flock does not exist)."""
        try:
            import fcntl
        except ImportError:
            return False
        try:
            handle = open(path, "rb")
        except OSError:
            return False
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: two readers never refuse each other
            except OSError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False
