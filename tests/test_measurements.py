"""The measurement store: one entry per (checkpoint bytes, kind), beside the checkpoint or in the user's store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from capsnet.checkpoints import measurements
from capsnet.files import file_sha256


@pytest.fixture
def checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(measurements.CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "ckpts" / "model.safetensors"
    path.parent.mkdir()
    path.write_bytes(b"weights")
    return path


def test_an_entry_is_read_back_from_the_store_or_from_beside_the_checkpoint(checkpoint: Path) -> None:
    assert measurements.read(checkpoint, "novelty") is None
    kept = measurements.write(checkpoint, "novelty", {"length": 0.5})
    assert kept == measurements.store_dir() / f"{file_sha256(checkpoint)}.novelty.json"
    assert measurements.read(checkpoint, "novelty") == {"length": 0.5, "checkpoint_sha256": file_sha256(checkpoint)}
    shipped = measurements.write(checkpoint, "routing", {"total": 3}, ship=True)
    assert shipped == checkpoint.parent / "model.routing.json"
    assert "\n" not in shipped.read_text() and "\n" not in kept.read_text()  # one line: read by programs
    assert measurements.read(checkpoint, "routing")["total"] == 3
    assert measurements.read(checkpoint, "robustness") is None  # another kind


def test_an_entry_of_other_bytes_or_a_damaged_one_is_absent(checkpoint: Path) -> None:
    measurements.write(checkpoint, "routing", {"total": 3}, ship=True)
    checkpoint.write_bytes(b"other weights")  # the file changed: its old entry is another file's
    os.utime(checkpoint, ns=(1, 1))
    assert measurements.read(checkpoint, "routing") is None
    beside = measurements.beside(checkpoint, "routing")
    for damaged in ("{cut", "[1, 2]", json.dumps({"checkpoint_sha256": 7}), "\x00\xff"):
        beside.write_text(damaged)
        assert measurements.read(checkpoint, "routing") is None, damaged
    beside.unlink()
    beside.mkdir()  # a folder in the file's place: not read, and the entry goes to the store instead
    assert measurements.write(checkpoint, "routing", {"total": 4}, ship=True).parent == measurements.store_dir()
    assert measurements.read(checkpoint, "routing")["total"] == 4
