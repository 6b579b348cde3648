"""Atomic file writes and JSON-lines logs, so a reader never sees half a file.

A write that fails (a missing or read-only folder, a full disk) raises FileWriteError, a
user-facing error naming the file, so the CLIs print it as one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from capsnet.errors import CapsNetError

CACHE_ENV = "CAPSNET_CACHE_DIR"  # where the package keeps what it measured or built for this user and machine


def cache_dir() -> Path:
    """The user's cache: $CAPSNET_CACHE_DIR, else ~/.cache/capsnet (measurements, the compiled EM kernel)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "capsnet")


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


KINDS = ("json", "jsonl", "safetensors")  # what a writer may say it writes, so as never to replace a file of another


_KINDS_OF_NODE = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISLNK, "a link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a device node"),
    (stat.S_ISBLK, "a device node"),
    (stat.S_ISSOCK, "a socket"),
)


def _what(mode: int) -> str:
    """What a file-system node that is not a regular file is, in a few words."""
    return next((name for test, name in _KINDS_OF_NODE if test(mode)), "not a regular file")


def _of_kind(path: Path, kind: str) -> bool:
    """Whether the regular file `path` is empty or holds `kind` (its first bytes say so)."""
    with open(path, "rb") as handle:
        head = handle.read(16)
    if not head:
        return True
    if kind == "safetensors":  # an 8-byte little-endian header length, then the header's JSON
        return len(head) > 8 and head[8:9] == b"{"
    first = head.lstrip()[:1]
    return first in (b"{", b"[") if kind == "json" else first in (b"{", b"")


def check_target(path: str | os.PathLike, kind: str | None = None) -> None:
    """FileWriteError (one line) unless `path` is absent or a regular file that a writer of `kind` may replace: a
    device node, a FIFO, a folder or a link is never replaced (as root, `--record /dev/full` once replaced the
    system's /dev/full), and neither is a file of another kind (a claim record over a checkpoint)."""
    path = Path(path)
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise _cannot_write(path, error) from None
    if not stat.S_ISREG(info.st_mode):
        raise FileWriteError(f"cannot write {path}: it is {_what(info.st_mode)}, not a file this writes")
    try:
        ours = kind is None or _of_kind(path, kind)
    except OSError as error:
        raise _cannot_write(path, error) from None
    if not ours:
        raise FileWriteError(f"cannot write {path}: it holds something other than {kind}; choose another name")


def writable(path: str | os.PathLike, kind: str | None = None) -> None:
    """Raise FileWriteError now if `path` could not be written (its folder cannot be made or written to, or something
    not to be replaced is there: `check_target`)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _cannot_write(path, error) from None
    check_target(path, kind)  # a folder, a FIFO, a device, a link or a file of another kind there
    if not os.access(path.parent, os.W_OK):
        reason = "read-only file system" if _read_only(path) else "permission denied"
        raise FileWriteError(f"cannot write {path}: {reason}")


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (True where that cannot be asked)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files in `folder` whose writer is gone (a kill -9 runs no clean-up): those named
    `.<name>.<pid>-<random>.tmp` (`scratch_beside`) for a process that no longer exists."""
    removed = []
    with contextlib.suppress(OSError):
        for stale in Path(folder).glob(".*.tmp"):
            pid = stale.name.removesuffix(".tmp").rpartition(".")[2].partition("-")[0]
            if pid.isdigit() and not _alive(int(pid)) and stale.is_file() and not stale.is_symlink():
                with contextlib.suppress(OSError):
                    stale.unlink()
                    removed.append(stale)
    return removed


@contextmanager
def scratch_beside(path: str | os.PathLike) -> Iterator[Path]:
    """A new empty file beside `path` (`.<name>.<pid>-<random>.tmp`), removed on leaving; what killed writers left
    in that folder is removed first (`remove_stale_temporaries`)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise _cannot_write(path, error) from None
    os.close(fd)
    try:
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | os.PathLike, kind: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`. What is at `path` is
    checked before and again just before the rename (`check_target`): only a regular file of `kind` is replaced."""
    path = Path(path)
    check_target(path, kind)
    with scratch_beside(path) as tmp_path:
        try:
            yield tmp_path  # a write that fails in the caller's block (a full disk) is one line, its file removed
        except CapsNetError:
            raise
        except OSError as error:
            raise _cannot_write(path, error) from None
        try:
            # mkstemp (and some writers, safetensors among them) make 0600 files; the result should read like any other
            os.chmod(tmp_path, 0o644)
            with open(tmp_path, "rb") as handle:
                os.fsync(handle.fileno())
            check_target(path, kind)  # something put there while the file was written is not replaced either
            os.replace(tmp_path, path)
        except OSError as error:
            raise _cannot_write(path, error) from None


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], Any], kind: str | None = None) -> None:
    """Call `write(handle)` on a temporary file, then rename it over `path` (a regular file of `kind` only)."""
    with atomic_path(path, kind) as tmp, open(tmp, "wb") as handle:
        write(handle)


def write_json(path: str | os.PathLike, data: Any, indent: int | None = 2, kind: str | None = None) -> None:
    """Write `data` as JSON, atomically: indented for a reader, or on one line (`indent=None`) for a program; never
    over a device node, FIFO, folder or link, and, with `kind="json"` (a path the user named), over nothing but a
    JSON file (`check_target`). A side file of our own name is replaced even when damaged."""
    atomic_write(path, lambda handle: handle.write(json.dumps(data, indent=indent).encode()), kind)


class FileReadError(CapsNetError, OSError):
    """A file that is not to be read: not a regular file, or too large. An OSError too, so that every reader that
    takes an unreadable file in its stride takes this one."""


def _regular(path: str | os.PathLike) -> os.stat_result:
    """`path`'s stat (through links) when it is a regular file; FileReadError before it is opened when not."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise FileReadError(f"{path}: not a regular file")
    return info


def read_regular_file(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes.

    A FIFO, a device (/dev/zero) or a folder is refused before it is opened (so nothing blocks or
    grows without bound), and so is a longer file; OSError for a missing or unreadable one.
    """
    path = Path(path)
    info = _regular(path)
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit or info.st_size > limit:
        raise FileReadError(
            f"{path}: too large ({max(info.st_size, len(data)) / 1e6:.0f} MB; at most {limit / 1e6:.0f} MB)"
        )
    return data


MAX_JSON_BYTES = 64 * 2**20  # a JSON side file of ours is a few MB at most
MAX_JSON_DEPTH = 64  # ours nest 5 deep; Python's parser recurses once a level (10^5 levels: RecursionError)


def json_depth(text: str | bytes) -> int:
    """How deep `text`'s arrays and objects nest, brackets inside strings not counted: one pass, no recursion."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    unquoted = re.sub(rb'"(?:[^"\\]|\\.)*"', b"", raw)  # every string, escapes and all
    steps = np.frombuffer(unquoted, dtype=np.uint8)
    change = np.isin(steps, (ord("["), ord("{"))).astype(np.int32) - np.isin(steps, (ord("]"), ord("}")))
    return int(np.cumsum(change).max(initial=0))


def loads_json(text: str | bytes, what: str = "JSON") -> Any:
    """`json.loads` of text that may be hostile: ValueError (one line) when it nests deeper than MAX_JSON_DEPTH, where
    the parser would raise RecursionError; and for what is not JSON."""
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels: not a file of ours")
    try:
        return json.loads(text)
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ValueError(f"{what} nests too deep: not a file of ours") from None


def read_json(path: str | os.PathLike, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file's content: a regular file of at most `limit` bytes (`read_regular_file`), nested at most
    MAX_JSON_DEPTH deep (`loads_json`); FileReadError or ValueError (one line), OSError where it cannot be read."""
    return loads_json(read_regular_file(path, limit), str(path))


def append_jsonl(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Append one JSON object as one line (a single write, flushed), to a regular file only (a FIFO would block)."""
    check_target(path)
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise _cannot_write(Path(path), error) from None


MAX_JSONL_LINE = 1 << 20  # a line of ours is a few hundred bytes: a longer one is damage, skipped unread
MAX_JSONL_BYTES = 64 * 2**20  # and a file's lines are read up to this many bytes at most


def read_jsonl(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """The complete JSON lines of `path` (a line being written is skipped), at most `limit` of them, read lazily
    (a huge file costs only the lines taken, and at most MAX_JSONL_BYTES: a 3 GB file of one line is not read into
    memory); [] if absent. FileReadError for a FIFO, a device or a folder, before it is opened."""
    records: list[dict[str, Any]] = []
    read = 0
    try:
        _regular(path)  # a FIFO would block, a folder raise, a device never end
        with open(path, "rb") as handle:
            while (limit is None or len(records) < limit) and read < MAX_JSONL_BYTES:
                line = handle.readline(MAX_JSONL_LINE + 1)
                if not line:
                    break
                read += len(line)
                if len(line) > MAX_JSONL_LINE:  # damage: the rest of this line is skipped a bounded piece at a time
                    while line and not line.endswith(b"\n") and read < MAX_JSONL_BYTES:
                        line = handle.readline(MAX_JSONL_LINE)
                        read += len(line)
                    continue
                try:
                    records.append(loads_json(line.decode("utf-8", errors="replace")))  # damaged bytes: that line
                except ValueError:  # not JSON, or nested past any line of ours
                    continue
    except FileNotFoundError:
        return []
    return records


def read_tail(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The last `max_bytes` of `path`, a regular file (a FIFO or a device is refused before it is opened, so nothing
    blocks); OSError where it cannot be read."""
    info = _regular(path)
    with open(path, "rb") as handle:
        handle.seek(max(0, info.st_size - max_bytes))
        return handle.read(max_bytes)


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes: what a kept summary is keyed by."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
