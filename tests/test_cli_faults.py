"""The command-line tools facing bad arguments and a failing machine: every argument checked before anything is
built, and each fault one line naming what to do, with an exit code other than 0 and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import capsnet
from conftest import REPO

from capsnet import memory
from capsnet.cli import evaluate as evaluate_cli

MNIST = REPO / "checkpoints" / "mnist.safetensors"


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
