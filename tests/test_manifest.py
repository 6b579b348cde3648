"""The shipped checkpoints' manifest: an entry proves a file's bytes and how today's code reads them."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from dashboard_fixtures import app_run  # noqa: F401

from capsnet.checkpoints import manifest
from capsnet.nn.capsnet import CapsNet


@pytest.fixture
def shipped(app_run: Path, tmp_path: Path, data_dir: Path) -> Path:  # noqa: F811
    """A checkpoints folder holding one file in a subfolder, with its manifest entry: a tiny CapsNet trained on real
    digits (the app tests' quick run, not the 40 s `tiny_run`: its answers vary from digit to digit, as a check needs)."""
    (tmp_path / "baselines").mkdir()
    path = tmp_path / "baselines" / "tiny.safetensors"
    shutil.copy(app_run / "best.safetensors", path)
    manifest.record(path, tmp_path)
    return path


def test_an_entry_records_the_bytes_and_the_first_answers(shipped: Path) -> None:
    entry = manifest.read_manifest(shipped.parents[1])["baselines/tiny.safetensors"]
    assert entry.bytes == shipped.stat().st_size and len(entry.sha256) == 64
    assert entry.network == "capsnet" and entry.dataset == "mnist"
    assert len(entry.answers) == manifest.FIRST and set(entry.answers) <= set("0123456789")
    assert manifest.check(shipped, shipped.parents[1]) == entry
    assert manifest.check(shipped, shipped.parents[1], examples=100) == entry  # a quicker look: the first 100
    for wrong in (0, manifest.FIRST + 1):
        with pytest.raises(ValueError, match="examples must be in 1..1000"):
            manifest.check(shipped, shipped.parents[1], examples=wrong)


def test_changed_bytes_are_refused(shipped: Path) -> None:
    data = bytearray(shipped.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    shipped.write_bytes(bytes(data))
    with pytest.raises(manifest.ManifestError, match="SHA-256 differs.*export it again"):
        manifest.check(shipped, shipped.parents[1])


def test_code_that_reads_the_weights_differently_is_caught(shipped: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change in the forward pass (here: the capsules' order reversed) changes the answers: the check fails."""
    forward = CapsNet.forward

    def reversed_classes(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        flipped = torch.flip(out.lengths, dims=[1])
        return dataclasses.replace(out, lengths=flipped, prediction=flipped.argmax(dim=1))

    monkeypatch.setattr(CapsNet, "forward", reversed_classes)
    with pytest.raises(manifest.ManifestError, match="changes .* of its answers on the first 1000"):
        manifest.check(shipped, shipped.parents[1])
    with pytest.raises(manifest.ManifestError, match="changes .* of its answers on the first 100 "):
        manifest.check(shipped, shipped.parents[1], examples=100)


def test_a_missing_entry_and_a_damaged_manifest_are_one_line(shipped: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.safetensors"
    shutil.copy(shipped, other)
    with pytest.raises(manifest.ManifestError, match="other.safetensors has no entry"):
        manifest.check(other, tmp_path)
    (tmp_path / manifest.MANIFEST_NAME).write_text(json.dumps({"files": {"x": {"sha256": 1}}}))
    with pytest.raises(manifest.ManifestError, match="is damaged"):
        manifest.read_manifest(tmp_path)


def test_rewriting_a_shipped_files_header_keeps_its_entry_true(
    shipped: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export --lr-search` rewrites the header of a shipped file: its manifest entry is written anew with it (an
    entry with the old SHA-256 would make CI refuse the file)."""
    from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint
    from capsnet.runs.export import record_lr_search

    monkeypatch.setenv("CAPSNET_CHECKPOINTS_DIR", str(shipped.parents[1]))
    checkpoint = load_checkpoint(shipped)
    extra = {**checkpoint.info.extra, "val_accuracy": 0.9}
    save_checkpoint(shipped, checkpoint.model, checkpoint.info.replace(extra=extra))  # a run with a validation split
    lr = checkpoint.info.recipe["lr"]
    record_lr_search(shipped, [lr, lr / 3], str(data_dir))
    assert manifest.check(shipped, shipped.parents[1]).sha256 == manifest.file_sha256(shipped)
