"""The command-line tools facing bad arguments and a failing machine: every argument checked before anything is
built, and each fault one line naming what to do, with an exit code other than 0 and no traceback."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import capsnet
from conftest import REPO

from capsnet import files, memory
from capsnet.cli import evaluate as evaluate_cli

MNIST = REPO / "checkpoints" / "mnist.safetensors"
FULL = "/dev/full"  # a device whose every write fails with ENOSPC


def test_evaluate_refuses_a_batch_above_its_bound_before_loading_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of a trillion images is one line naming the bound, before the checkpoint is read."""
    monkeypatch.setattr(evaluate_cli, "load_checkpoint", lambda *a, **k: pytest.fail("the checkpoint was read"))
    done = capsnet("evaluate", MNIST, "--batch-size", "1000000000000")
    assert done.returncode == 2 and done.stdout == ""
    said = done.stderr.strip()
    assert "\n" not in said and "--batch-size" in said and "100000" in said, said


def test_evaluate_refuses_a_batch_larger_than_its_test_set(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    """A batch larger than the whole test set (MNIST's 10,000) is one line saying the most that can be read."""
    monkeypatch.setattr(memory, "headroom", lambda: None)  # the memory guard is not what refuses it
    monkeypatch.setattr(evaluate_cli, "evaluate_set", lambda *a, **k: pytest.fail("the set was evaluated"))
    done = capsnet("evaluate", MNIST, "--batch-size", "20000", "--data-dir", data_dir)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "python -m capsnet evaluate: error: --batch-size 20,000 is more than the 10,000 images of the MNIST test "
        "set: at most 10,000"
    )


def test_evaluate_on_an_empty_test_set_is_one_line(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    """A test set that holds nothing (here MNIST's, emptied as it is read) is one line, not a report of 0/0."""
    real = evaluate_cli.read_test_set
    monkeypatch.setattr(evaluate_cli, "read_test_set", lambda *a, **k: real(*a, **k).sample(0, 0))
    done = capsnet("evaluate", MNIST, "--data-dir", data_dir)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr.strip()
        == "python -m capsnet evaluate: error: the MNIST test set holds no images: nothing to evaluate"
    )


def test_evaluate_on_an_empty_dataset_folder_is_one_line(tmp_path: Path) -> None:
    """A dataset folder with nothing in it is one line naming the folder."""
    done = capsnet("evaluate", MNIST, "--dataset", tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    said = done.stderr.strip()
    assert "\n" not in said and said.startswith(f"python -m capsnet evaluate: error: {tmp_path}"), said


# ---------------------------------------------------------------- a full disk


def _full_disk(monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...] | None = None) -> None:
    """Every atomic write of a file named in `names` (of every file for None) goes to a full disk: its temporary file
    is /dev/full behind a link, so the writer's bytes fail with ENOSPC as they are written, as on a full file system;
    the temporary file is removed as a real one is."""
    real = files.scratch_beside

    @contextlib.contextmanager
    def full(path: str | os.PathLike) -> Iterator[Path]:
        with real(path) as tmp:
            if names is None or Path(path).name in names:
                tmp.unlink()
                tmp.symlink_to(FULL)
            yield tmp

    monkeypatch.setattr(files, "scratch_beside", full)
    monkeypatch.setenv(files.CACHE_ENV, str(Path(os.environ[files.CACHE_ENV]) / "full"))


def _half_written(*folders: Path) -> list[str]:
    """The staged checkpoints and temporary files left in `folders` (and below)."""
    left = [p for folder in folders if folder.exists() for p in folder.rglob("*")]
    return sorted(p.name for p in left if ".pending" in p.name or p.name.endswith(".tmp") or p.is_symlink())


def _one_line(done: subprocess.CompletedProcess[str], prog: str, naming: Path, cause: bool = True) -> str:
    """The one line a write on a full disk ends `prog` with, naming the file or folder (and the cause, where the
    writer says it: torch.save's error does not, and the disk only looks full)."""
    said = done.stderr.strip()
    assert done.returncode == 2, (done.returncode, said)
    assert "\n" not in said and "Traceback" not in said, said
    assert said.startswith(f"python -m capsnet {prog}: error: cannot write {naming}"), said
    assert not cause or "no space left on device" in said.lower(), said
    return said


needs_dev_full = pytest.mark.skipif(not Path(FULL).exists(), reason="no /dev/full here")


@needs_dev_full
def test_training_on_a_full_disk_is_one_line_and_leaves_no_staged_checkpoints(
    monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path
) -> None:
    """The disk fills as the epoch's state is saved, after its checkpoints were staged: one line naming the run's
    folder, and the staged checkpoints go with the epoch that was not saved."""
    _full_disk(monkeypatch, ("train_state.pt",))
    run = tmp_path / "run"
    done = capsnet("train", "--preset", "tiny", "--epochs", "1", "--train-size", "64", "--test-size", "32",
                   "--no-compile", "--no-progress", "--data-dir", data_dir, "--out", run)  # fmt: skip
    _one_line(done, "train", run / "train_state.pt", cause=False)
    assert _half_written(run) == []
    assert not (run / "last.safetensors").exists() and not (run / "train_state.pt").exists()


@needs_dev_full
def test_evaluate_keep_on_a_full_disk_is_one_line(
    monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path
) -> None:
    """Neither beside the checkpoint nor in the measurement store can the evaluation be kept: one line."""
    model = Path(shutil.copy(MNIST, tmp_path / "mnist.safetensors"))
    _full_disk(monkeypatch)
    done = capsnet("evaluate", model, "--keep", "--limit", "20", "--data-dir", data_dir)
    _one_line(done, "evaluate", Path(os.environ[files.CACHE_ENV]))
    assert _half_written(tmp_path, Path(os.environ[files.CACHE_ENV])) == []
    assert not (tmp_path / "mnist.evaluation.json").exists()


@needs_dev_full
def test_claims_record_on_a_full_disk_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shipped = REPO / "checkpoints"
    _full_disk(monkeypatch)
    record = tmp_path / "claim.json"
    done = capsnet("claims", "multimnist", shipped / "multimnist.safetensors",
                   shipped / "baselines" / "multimnist-cnn.safetensors", "--record", record)  # fmt: skip
    _one_line(done, "claims", record)
    assert _half_written(tmp_path) == [] and not record.exists()


@needs_dev_full
def test_routing_matters_on_a_full_disk_is_one_line(
    monkeypatch: pytest.MonkeyPatch, data_dir: Path, tmp_path: Path
) -> None:
    """The measure is made (here the shipped model's kept one, handed back at once) but cannot be kept: one line."""
    from capsnet.readings import routing_matters

    kept = routing_matters.RoutingMatters.from_dict(
        json.loads((REPO / "checkpoints" / "mnist.routing.json").read_text())
    )
    monkeypatch.setattr(routing_matters, "measure", lambda *a, **k: kept)
    model = Path(shutil.copy(MNIST, tmp_path / "mnist.safetensors"))
    _full_disk(monkeypatch)
    done = capsnet("routing-matters", model, "--data-dir", data_dir)
    _one_line(done, "routing-matters", Path(os.environ[files.CACHE_ENV]))
    assert _half_written(tmp_path, Path(os.environ[files.CACHE_ENV])) == []
