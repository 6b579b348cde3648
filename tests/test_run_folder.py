"""The run folder: its files' names, the typed progress record, and tolerant reading."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from capsnet.files import write_json
from capsnet.training.folder import Progress, ProgressWriter, RunFolder, RunFolderError, new_run_dir, run_folders


def test_progress_is_read_tolerantly(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    assert folder.read_progress() is None  # absent
    (tmp_path / RunFolder.PROGRESS).write_text('{"status": "runn')  # being written
    assert folder.read_progress() is None
    write_json(tmp_path / RunFolder.PROGRESS, [1, 2])
    assert folder.read_progress() is None  # not an object
    write_json(tmp_path / RunFolder.PROGRESS, {"status": "exploded", "pid": "12", "epoch": 2.0, "loss": None, "x": 1})
    progress = folder.read_progress()
    assert progress == Progress(epoch=2)  # unknown status and wrong types keep their defaults, extra keys ignored
    write_json(tmp_path / RunFolder.PROGRESS, {"status": "failed", "reason": "NaN", "epochs": 4, "batches": 10})
    assert folder.read_progress().reason == "NaN"


def test_progress_fraction() -> None:
    assert Progress(epochs=4, epoch=2, batches=10, batch=5).fraction_done == pytest.approx(15 / 40)
    assert Progress().fraction_done == 0.0
    assert Progress(epochs=1, epoch=3, batches=1, batch=1).fraction_done == 1.0


def test_the_writer_writes_at_most_once_a_second_unless_forced(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    writer = ProgressWriter(folder, Progress(status="running", epochs=2, batches=10))
    writer.update(batch=1)
    first = folder.read_progress()
    writer.update(batch=2)  # within the second: kept, not written
    assert folder.read_progress() == first and writer.progress.batch == 2
    writer.update(force=True, status="stopped")
    assert folder.read_progress().status == "stopped" and folder.read_progress().batch == 2
    writer.batch_done(3, 0.5, 0.9, 100.0, epoch=1, done_before=4, images_left=1000, batch_size=10)
    assert writer.progress.batch == 7 and writer.progress.eta_s == pytest.approx((3 * 10 + 1000) / 100.0)
    silent = ProgressWriter(RunFolder(tmp_path / "other"), Progress(), enabled=False)
    silent.update(force=True, status="failed")
    assert not (tmp_path / "other").exists()  # another process of a distributed run: never writes


def test_metrics_args_and_the_log(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    assert folder.read_metrics() == [] and folder.read_args() == {} and folder.log_tail() == ""
    folder.append_metrics({"epoch": 1, "test_accuracy": 0.5})
    with open(tmp_path / RunFolder.METRICS, "a") as handle:
        handle.write('{"epoch": 2, "test_acc')  # a line being written
    assert folder.read_metrics() == [{"epoch": 1, "test_accuracy": 0.5}]
    folder.write_args({"dataset": "mnist"})
    assert folder.read_args() == {"dataset": "mnist"}
    folder.log_path.write_text("\n".join(f"line {n}" for n in range(100)))
    assert folder.log_tail(2) == "line 98\nline 99"
    assert folder.checkpoint() is None
    (tmp_path / RunFolder.LAST).write_bytes(b"x")
    assert folder.checkpoint() == tmp_path / RunFolder.LAST
    (tmp_path / RunFolder.BEST).write_bytes(b"x")
    assert folder.checkpoint() == tmp_path / RunFolder.BEST


def test_new_run_folders_never_collide(tmp_path: Path) -> None:
    made = [new_run_dir(tmp_path, "mnist") for _ in range(3)]
    assert len(set(made)) == 3 and all(p.is_dir() and p.name.split("-")[-1] in ("mnist", "2", "3") for p in made)
    with pytest.raises(RunFolderError, match="cannot create a run folder"):
        new_run_dir(Path("/proc/version"), "mnist")


def test_run_folders_lists_runs_newest_first(tmp_path: Path) -> None:
    for n, name in enumerate(["old", "new"]):
        (tmp_path / name).mkdir()
        write_json(tmp_path / name / RunFolder.ARGS, {})
        os.utime(tmp_path / name, (time.time() - 100 + n, time.time() - 100 + n))
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "file").write_text(json.dumps({}))
    assert [f.name for f in run_folders(tmp_path)] == ["new", "old"]
    assert run_folders(tmp_path / "absent") == []
