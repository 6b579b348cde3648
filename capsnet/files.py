"""Atomic file writes and JSON-lines logs, so a reader never sees half a file.

A write that fails (a missing or read-only folder, a full disk) raises FileWriteError, a
user-facing error naming the file, so the CLIs print it as one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from capsnet.errors import CapsNetError


class FileWriteError(CapsNetError):
    """A file could not be written."""


def _file_in_the_way(path: Path) -> Path | None:
    """The nearest ancestor of `path` that exists and is not a folder (a file where a folder should be)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _read_only(path: Path) -> bool:
    """Whether the nearest existing folder above `path` lies on a read-only file system."""
    for parent in path.parents:
        if parent.is_dir():
            try:
                return bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
            except (OSError, AttributeError):
                return False
    return False


def _cannot_write(path: Path, error: OSError) -> FileWriteError:
    blocker = _file_in_the_way(path) if isinstance(error, (FileExistsError, NotADirectoryError)) else None
    if blocker is not None:
        return FileWriteError(f"cannot write {path}: {blocker} is a file, not a folder")
    if _read_only(path):
        return FileWriteError(f"cannot write {path}: read-only file system")
    return FileWriteError(f"cannot write {path}: {error.strerror or error}")


def write_failure(path: str | os.PathLike, error: BaseException) -> FileWriteError:
    """A writer's own error (safetensors', torch.save's) as a FileWriteError that names the real cause.

    A full disk is named as such, whatever words the writer used for it.
    """
    path = Path(path)
    text = " ".join(str(error).split())
    try:
        full = shutil.disk_usage(path.parent if path.parent.exists() else ".").free < 1_000_000
    except OSError:
        full = False
    if full or any(s in text for s in ("No space left", "StorageFull", "ENOSPC", "errno 28", "os error 28")):
        return FileWriteError(f"cannot write {path}: no space left on device")
    return FileWriteError(f"cannot write {path}: {text[:200] or type(error).__name__}")


def writable(path: str | os.PathLike) -> None:
    """Raise FileWriteError now if `path` could not be written (its folder cannot be made or written to)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _cannot_write(path, error) from None
    if path.is_dir():
        raise FileWriteError(f"cannot write {path}: it is a folder")
    if not os.access(path.parent, os.W_OK):
        reason = "read-only file system" if _read_only(path) else "permission denied"
        raise FileWriteError(f"cannot write {path}: {reason}")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise _cannot_write(path, error) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp (and some writers, safetensors among them) make 0600 files; the result should read like any other
        os.chmod(tmp_path, 0o644)
        with open(tmp_path, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except OSError as error:
        raise _cannot_write(path, error) from None
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], Any]) -> None:
    """Call `write(handle)` on a temporary file, then rename it over `path`."""
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        write(handle)


def write_json(path: str | os.PathLike, data: Any, indent: int | None = 2) -> None:
    """Write `data` as JSON, atomically: indented for a reader, or on one line (`indent=None`) for a program."""
    atomic_write(path, lambda handle: handle.write(json.dumps(data, indent=indent).encode()))


class FileReadError(CapsNetError):
    """A file that is not to be read: not a regular file, or too large."""


def read_regular_file(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes.

    A FIFO, a device (/dev/zero) or a folder is refused before it is opened (so nothing blocks or
    grows without bound), and so is a longer file; OSError for a missing or unreadable one.
    """
    path = Path(path)
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise FileReadError(f"{path}: not a regular file")
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit or info.st_size > limit:
        raise FileReadError(
            f"{path}: too large ({max(info.st_size, len(data)) / 1e6:.0f} MB; at most {limit / 1e6:.0f} MB)"
        )
    return data


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def append_jsonl(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Append one JSON object as one line (a single write, flushed)."""
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise _cannot_write(Path(path), error) from None


def read_jsonl(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """The complete JSON lines of `path` (a line being written is skipped), at most `limit` of them, read lazily
    (a huge file costs only the lines taken); [] if absent."""
    records: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:  # damaged bytes cost their line only
            for line in handle:
                if limit is not None and len(records) >= limit:
                    break
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        return []
    return records


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes: what a kept summary is keyed by."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
