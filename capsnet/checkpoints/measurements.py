"""What is measured from a checkpoint, kept once: one store, keyed by the file's SHA-256.

Some readings of a checkpoint take minutes on a CPU and depend only on its bytes (and the fixed test
sets): where routing matters (r = 1..5 on the whole test set), the not-like-any-class calibration of an
older checkpoint, the robustness curves of the Transform lens. Each is kept as one JSON entry of a kind
("routing", "novelty", "robustness"), in one of two places:
- beside the checkpoint, `<name>.<kind>.json`: what ships with a checkpoint (`checkpoints/mnist.routing.json`),
  written by the command-line tools;
- in the user's store, `$CAPSNET_CACHE_DIR/measurements/<sha256>.<kind>.json` (default `~/.cache/capsnet`):
  what the dashboard and the tools measure on a machine, and whatever cannot be written beside its checkpoint.
Every entry names the checkpoint it was measured on (`checkpoint_sha256`); the one reader, `read`, treats an
entry that is missing, unreadable, damaged, too large or another file's as absent, so a stale entry is
measured again rather than believed.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from capsnet.errors import CapsNetError
from capsnet.files import (
    CACHE_ENV as CACHE_ENV,
)
from capsnet.files import (
    FileReadError,
    cache_dir,
    file_sha256,
    loads_json,
    read_regular_file,
    write_failure,
    write_json,
)

MAX_ENTRY_BYTES = 16 * 1024 * 1024  # a routing entry of 10,000 images is about 1 MB


def store_dir() -> Path:
    """The user's store: $CAPSNET_CACHE_DIR/measurements, else ~/.cache/capsnet/measurements."""
    return cache_dir() / "measurements"


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def checkpoint_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of the checkpoint's bytes, hashed once per file version (its size and modification time)."""
    found = os.stat(path)
    return _sha256(str(Path(path).resolve()), found.st_size, found.st_mtime_ns)


def beside(checkpoint: str | os.PathLike, kind: str) -> Path:
    """Where an entry of `kind` ships with its checkpoint: `mnist.safetensors` -> `mnist.<kind>.json`."""
    return Path(checkpoint).with_suffix(f".{kind}.json")


def in_store(sha256: str, kind: str) -> Path:
    return store_dir() / f"{sha256}.{kind}.json"


def read(checkpoint: str | os.PathLike, kind: str) -> dict[str, Any] | None:
    """The entry of `kind` measured on this checkpoint's bytes (beside it, else in the store), or None."""
    found = _found(checkpoint, kind)
    return None if found is None else found[1]


def where(checkpoint: str | os.PathLike, kind: str) -> Path | None:
    """The file holding this checkpoint's entry of `kind` (beside it, else in the store), or None: what a command
    names as where it kept a measurement (a stale file beside the checkpoint is not it)."""
    found = _found(checkpoint, kind)
    return None if found is None else found[0]


def _found(checkpoint: str | os.PathLike, kind: str) -> tuple[Path, dict[str, Any]] | None:
    sha256 = checkpoint_sha256(checkpoint)
    for place in (beside(checkpoint, kind), in_store(sha256, kind)):
        try:
            data = loads_json(read_regular_file(place, MAX_ENTRY_BYTES), str(place))
        except (OSError, FileReadError, ValueError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("checkpoint_sha256") == sha256:
            return place, data
    return None


def write(checkpoint: str | os.PathLike, kind: str, data: dict[str, Any], ship: bool = False) -> Path:
    """Keep `data` as this checkpoint's entry of `kind`, atomically: beside it when `ship`, else in the store; on one
    line, since programs read it and a whole test set's summary runs to megabytes.

    A place that cannot be written (a read-only checkpoints folder) falls back to the store; FileWriteError
    (one line) when neither can be.
    """
    sha256 = checkpoint_sha256(checkpoint)
    entry = {**data, "checkpoint_sha256": sha256}
    if ship:
        try:
            write_json(beside(checkpoint, kind), entry, indent=None)
            return beside(checkpoint, kind)
        except CapsNetError:
            pass
    place = in_store(sha256, kind)
    try:
        place.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_failure(place, error) from None
    write_json(place, entry, indent=None)
    return place
