"""Training-run management: bounded requests, one run at a time, cancel, resume, status."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capsnet.files import write_json
from capsnet.runs import catalog, processes
from capsnet.runs.processes import RunInProgressError
from capsnet.training.folder import RUNS_ENV, FolderLock, RunFolder, runs_root
from capsnet.training.options import TrainOptions
from dashboard.train_form import form_options


def wait_for(condition, timeout: float = 30.0, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


@pytest.fixture
def fake_python(tmp_path: Path) -> str:
    """An 'interpreter' that ignores its arguments and sleeps: its command line still says `-m capsnet train`."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"epochs": 0}, "epochs"),
        ({"epochs": 201}, "epochs"),
        ({"batch_size": 1025}, "batch size"),
        ({"lr": 0.0}, "learning rate"),
        ({"lr": 1.5}, "learning rate"),
        ({"lr": float("nan")}, "learning rate"),
        ({"routing_iterations": 21}, "routing iterations"),  # the config's bound, as the CLI's
        ({"train_size": 60001}, "train size"),
        ({"test_size": 0}, "test size"),
        ({"dataset": "cifar"}, "dataset"),
        ({"preset": "huge"}, "model"),
        ({"device": "tpu"}, "device"),
        ({"epochs": 2.5}, "epochs"),
    ],
)
def test_requests_are_validated_and_bounded(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        form_options(**changes)


def test_request_command_line() -> None:
    options = form_options(dataset="fashion-mnist", epochs=2, lr=0.01, preset="tiny", train_size=500)
    command = processes.trainer_command(dataclasses.replace(options, out="runs/x", progress=False), python="py")
    assert command[:4] == ["py", "-m", "capsnet", "train"]
    joined = " ".join(command)
    for part in (
        "--dataset fashion-mnist",
        "--epochs 2",
        "--lr 0.01",
        "--train-size 500",
        "--out runs/x",
        "--preset tiny",
        "--no-progress",
    ):
        assert part in joined
    assert "--preset" not in processes.trainer_command(form_options())


def test_runs_root_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(RUNS_ENV, str(tmp_path))
    assert runs_root() == tmp_path
    assert runs_root("elsewhere") == Path("elsewhere")
    monkeypatch.delenv(RUNS_ENV)
    assert runs_root() == Path("runs")


def test_one_run_at_a_time_and_cancel(root: Path, fake_python: str) -> None:
    run = processes.start_run(TrainOptions(epochs=1), root, python=fake_python)
    try:
        assert run.run_dir.parent == root and run.run_dir.name.endswith("-mnist")
        assert (run.run_dir / "train.log").read_text().startswith("$ ")
        lock = json.loads((root / processes.LOCK_NAME).read_text())
        assert lock["pid"] == run.pid and lock["run"] == run.run_dir.name
        active = processes.active_run(root)
        assert active is not None and active.pid == run.pid and active.from_dashboard
        assert processes.read_run(run.run_dir, root).status == "starting"
        with pytest.raises(RunInProgressError, match=run.run_dir.name):
            processes.start_run(TrainOptions(epochs=1), root, python=fake_python)
        assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [run.run_dir.name]  # no second folder
    finally:
        stopped = processes.cancel_run(root)
    assert stopped is not None and stopped.pid == run.pid
    assert wait_for(lambda: processes.active_run(root) is None, 10)
    assert not FolderLock.held(root / processes.LOCK_NAME)  # released by the OS once the process is gone
    assert processes.cancel_run(root) is None


def test_a_killed_trainer_frees_the_machine_at_once(root: Path, fake_python: str) -> None:
    """kill -9 runs no clean-up: the operating system releases the flock, so the next start is not refused."""
    run = processes.start_run(TrainOptions(epochs=1), root, python=fake_python)
    assert FolderLock.held(root / processes.LOCK_NAME)  # the dashboard let go of its copy: the trainer holds it
    os.kill(run.pid, signal.SIGKILL)
    assert wait_for(lambda: processes.active_run(root) is None, 10)
    again = processes.start_run(TrainOptions(epochs=1), root, python=fake_python)
    assert processes.active_run(root).pid == again.pid
    processes.cancel_run(root)
    assert wait_for(lambda: processes.active_run(root) is None, 10)


def test_a_lock_file_that_no_process_holds_is_no_run(root: Path, fake_python: str) -> None:
    """What the file says (a dead trainer's pid, or this live process's: a recycled pid) counts only while a
    process holds the lock."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    root.mkdir()
    for pid in (dead.pid, os.getpid()):
        write_json(root / processes.LOCK_NAME, {"pid": pid, "run": "old", "dataset": "mnist", "started": 0})
        assert processes.active_run(root) is None
    run = processes.start_run(TrainOptions(epochs=1), root, python=fake_python)
    processes.cancel_run(root)
    assert wait_for(lambda: processes.active_run(root) is None, 10), run


def test_a_command_line_run_holds_its_folder(root: Path) -> None:
    """A run started from the command line counts while its trainer holds its folder's lock, and not after."""
    folder = make_run(root, "cli-run", {"status": "running", "pid": os.getpid()})
    assert processes.active_run(root) is None  # progress.json says running, but no trainer holds the folder
    lock = RunFolder(folder).lock()
    try:
        active = processes.active_run(root)
        assert active is not None and active.name == "cli-run" and not active.from_dashboard
        assert processes.read_run(folder, root).status == "running"
        with pytest.raises(RunInProgressError, match="started from the command line"):
            processes.start_run(TrainOptions(epochs=1), root, python=sys.executable)
    finally:
        lock.release()
    assert processes.active_run(root) is None and processes.read_run(folder, root).status == "failed"


def make_run(root: Path, name: str, progress: dict | None, epochs_done: int = 0, log: str = "") -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    write_json(run_dir / "args.json", {"dataset": "mnist", "epochs": 3, "preset": "tiny"})
    if progress is not None:
        write_json(run_dir / "progress.json", {"epochs": 3, "dataset": "mnist", **progress})
    with open(run_dir / "metrics.jsonl", "w") as handle:
        for e in range(1, epochs_done + 1):
            handle.write(json.dumps({"epoch": e, "train_loss": 1 / e, "test_accuracy": 0.5 + e / 10}) + "\n")
    if log:
        (run_dir / "train.log").write_text(log)
    return run_dir


def test_run_status_from_the_folder(root: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    make_run(root, "a-finished", {"status": "finished", "pid": dead.pid}, epochs_done=3)
    make_run(root, "b-stopped", {"status": "stopped", "pid": dead.pid}, epochs_done=1)
    (root / "b-stopped" / "train_state.pt").write_bytes(b"state")
    make_run(root, "c-killed", {"status": "running", "pid": dead.pid}, epochs_done=1, log="epoch 1\nKilled\n")
    make_run(root, "d-never-started", None, log="Traceback...\nDatasetNotFoundError: MNIST not found\n")
    (root / "not-a-run").mkdir()
    by_name = {r.name: r for r in processes.list_runs(root)}
    assert set(by_name) == {"a-finished", "b-stopped", "c-killed", "d-never-started"}
    assert by_name["a-finished"].status == "finished" and by_name["a-finished"].epochs_done == 3
    assert by_name["a-finished"].best_accuracy == pytest.approx(0.8)
    assert by_name["b-stopped"].status == "stopped" and by_name["b-stopped"].resumable
    assert by_name["c-killed"].status == "failed" and "without finishing" in by_name["c-killed"].reason
    assert by_name["d-never-started"].status == "failed"
    assert RunFolder(root / "d-never-started").log_tail(1) == "DatasetNotFoundError: MNIST not found"
    assert RunFolder(root / "a-finished").log_tail() == ""


def test_resume_refuses_what_cannot_be_resumed(root: Path) -> None:
    make_run(root, "a-finished", {"status": "finished", "pid": 0}, epochs_done=3)
    with pytest.raises(processes.RunError, match="cannot be resumed"):
        processes.resume_run("a-finished", root)
    with pytest.raises(processes.RunError, match="no run named"):
        processes.resume_run("../etc", root)


@pytest.mark.slow
def test_a_real_tiny_run_trains_in_the_background(root: Path, data_dir: Path) -> None:
    # data_dir puts the datasets' folder in CAPSNET_DATA_DIR, which the trainer's process inherits
    options = TrainOptions(epochs=1, batch_size=32, preset="tiny", train_size=64, test_size=64, device="cpu")
    run = processes.start_run(options, root)
    assert wait_for(lambda: processes.active_run(root) is None, 240, 0.5), RunFolder(run.run_dir).log_tail()
    summary = processes.read_run(run.run_dir, root)
    assert summary.status == "finished", RunFolder(run.run_dir).log_tail()
    assert summary.epochs_done == 1 and summary.checkpoint is not None
    entries = catalog.list_checkpoints(root / "none", root)
    assert [e.run for e in entries] == [run.run_dir.name] and not entries[0].error


def test_a_huge_metrics_file_is_read_only_as_far_as_the_run_goes(root: Path) -> None:
    """200,000 lines for a run of 2 epochs: "2/2", read in a moment, not "200000/2" in 23 s."""
    run_dir = make_run(root, "huge", {"status": "finished", "pid": 0, "epochs": 2})
    line = json.dumps({"epoch": 1, "train_loss": 0.5, "test_accuracy": 0.5}) + "\n"
    (run_dir / "metrics.jsonl").write_text(line * 200_000)
    start = time.perf_counter()
    summary = processes.read_run(run_dir, root)
    assert summary.epochs_done == 2 and summary.epochs_total == 2 and summary.status == "finished"
    assert time.perf_counter() - start < 5  # generous: it reads 2 lines, not 200,000


@pytest.mark.parametrize(
    ("epochs_done", "state", "status"), [(3, False, "finished"), (2, True, "stopped"), (2, False, "failed")]
)
def test_a_garbage_progress_file_yields_to_the_committed_epochs(
    root: Path, epochs_done: int, state: bool, status: str
) -> None:
    """progress.json unreadable, 2 or 3 of 3 epochs recorded: the committed state says what the run is."""
    run_dir = make_run(root, "r", None, epochs_done=epochs_done)
    (run_dir / "progress.json").write_bytes(b"\x00garbage{")
    if state:
        (run_dir / "train_state.pt").write_bytes(b"state")
    summary = processes.read_run(run_dir, root)
    assert summary.status == status and summary.epochs_done == epochs_done
    if status == "failed":
        assert "progress.json is unreadable; 2 epoch(s) were recorded" in summary.reason
    assert "exited before training started" not in summary.reason
