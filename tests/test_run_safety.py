"""Nothing lost: a run folder is never overwritten, one trainer per folder, an epoch's records commit
together (a kill anywhere at its end is reconciled on --resume), and a full disk is named as such."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cli_support import capsnet

from capsnet.checkpoints.checkpoint import read_checkpoint_info
from capsnet.cli.train import main
from capsnet.files import read_json, read_jsonl
from capsnet.training.checkpointer import Checkpointer
from capsnet.training.epoch import STOP_SIGNALS
from capsnet.training.folder import RunFolder, RunFolderError
from capsnet.training.options import TrainOptions
from capsnet.training.trainer import train

pytestmark = pytest.mark.slow
T = ["--preset", "tiny", "--train-size", "512", "--test-size", "256", "--device", "cpu", "--no-progress"]


def tiny(out: Path, **changes) -> TrainOptions:
    values = dict(preset="tiny", train_size=512, test_size=256, device="cpu", progress=False, out=str(out), epochs=2)
    return TrainOptions(**(values | changes))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name not in (".lock", "progress.json")}


def test_a_folder_holding_a_run_is_not_overwritten(data_dir: Path, tmp_path: Path, capsys) -> None:
    train(tiny(tmp_path))
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main([*T, "--epochs", "1", "--dataset", "fashion-mnist", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "already holds a run (mnist, 2 epochs)" in err and "--resume" in err
    assert snapshot(tmp_path) == before  # nothing of the first run touched
    # a folder with only the options of a run that never trained (a failed start) can be used
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "args.json").write_text("{}")
    # ... and what a kill -9 in that run's first epoch left half written is removed, as --resume does
    leftovers = [".last.pending.safetensors.k3j2.tmp", ".watch.safetensors.x81q.tmp", "best.pending.safetensors"]
    for name in leftovers:
        (fresh / name).write_bytes(b"half")
    assert [r["epoch"] for r in train(tiny(fresh, epochs=1))] == [1]
    assert not any((fresh / name).exists() for name in leftovers)
    assert not list(fresh.glob(".*.tmp")) and not list(fresh.glob("*.pending.safetensors"))


def test_two_trainers_never_share_a_folder(data_dir: Path, tmp_path: Path) -> None:
    """A second run, or a resume, into a folder a trainer holds is refused naming it (the first is paused while
    they try, so the test does not depend on how fast it trains)."""
    import signal

    out = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-m", "capsnet", "train", *T, "--train-size", "640", "--epochs", "2", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while not (out / "progress.json").is_file() and time.time() < deadline:
        time.sleep(0.1)
    first.send_signal(signal.SIGSTOP)  # holding its lock
    try:  # the two refused commands run in this process: the lock is the other process's
        second = capsnet("train", *T, "--epochs", "1", "--out", str(out))
        resumed = capsnet("train", "--resume", "--epochs", "3", "--out", str(out), "--no-progress")
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr[-2000:]
    for refused in (second, resumed):
        assert refused.returncode == 2, refused.stderr
        assert f"in use by another training process (pid {first.pid})" in refused.stderr
        assert refused.stderr.strip().count("\n") == 0
    assert [r["epoch"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    assert json.loads((out / "args.json").read_text())["train_size"] == 640


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs (it is not an Exception, so nothing catches it)."""


@pytest.mark.parametrize(
    "where",
    ["after the checkpoints, before the state", "after the state, before the checkpoints' names",
     "after the checkpoints' names, before the metrics line"],
)  # fmt: skip
def test_a_kill_at_an_epochs_end_is_reconciled_on_resume(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    train(tiny(tmp_path, epochs=1))
    save_state, append = Checkpointer.save_state, RunFolder.append_metrics

    def die_in_epoch_2(step):
        def wrapped(self, *args, **kwargs):
            epoch = args[0] if args else kwargs.get("epoch")
            if isinstance(epoch, int) and epoch == 2 or isinstance(epoch, dict) and epoch.get("epoch") == 2:
                if where.startswith("after the state"):
                    step(self, *args, **kwargs)  # the state is saved; the kill comes before the rest
                raise Killed
            return step(self, *args, **kwargs)

        return wrapped

    if where.startswith("after the checkpoints,"):
        monkeypatch.setattr(Checkpointer, "save_state", die_in_epoch_2(save_state))
    elif where.startswith("after the state"):
        monkeypatch.setattr(Checkpointer, "save_state", die_in_epoch_2(save_state))
    else:
        monkeypatch.setattr(RunFolder, "append_metrics", die_in_epoch_2(append))
    (tmp_path / ".last.safetensors.x1y2.tmp").write_bytes(b"half a file")  # an interrupted write
    with pytest.raises(Killed):
        train(tiny(tmp_path, resume=True, epochs=2))
    monkeypatch.undo()
    assert read_json(tmp_path / "progress.json")["status"] == "failed"

    records = train(tiny(tmp_path, resume=True, epochs=3))
    epochs = [r["epoch"] for r in read_jsonl(tmp_path / "metrics.jsonl")]
    assert epochs == [1, 2, 3], epochs  # never 1, 2, 2, 3, and never a gap
    saved = torch.load(tmp_path / "train_state.pt", weights_only=True)
    assert saved["epoch"] == 3 and saved["record"]["epoch"] == 3
    assert read_checkpoint_info(tmp_path / "last.safetensors")[1].epochs == 3
    best = read_checkpoint_info(tmp_path / "best.safetensors")[1]
    metrics = {r["epoch"]: r for r in read_jsonl(tmp_path / "metrics.jsonl")}
    assert best.test_accuracy == metrics[best.epochs]["test_accuracy"]  # the best file is an epoch the metrics show
    assert not list(tmp_path.glob("*.pending.*")) and not list(tmp_path.glob(".*.tmp"))
    assert [r["epoch"] for r in records] == ([2, 3] if where.startswith("after the checkpoints,") else [3])


def test_a_full_disk_is_one_line_naming_the_real_failure(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Both writers fail as they do on a full disk: safetensors with its StorageFull error, torch.save with its
    own; the message names the file and the cause, progress says failed, and no unsaved accuracy is claimed."""
    from safetensors import SafetensorError

    import capsnet.checkpoints.checkpoint as checkpoint_module

    def full(*args, **kwargs):
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )

    monkeypatch.setattr(checkpoint_module, "save_file", full)
    assert main([*T, "--epochs", "1", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("last.pending.safetensors: no space left on device"), err
    progress = read_json(tmp_path / "a" / "progress.json")
    assert progress["status"] == "failed" and progress["best_accuracy"] == 0.0  # nothing was saved
    monkeypatch.undo()

    def torch_full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 1024 vs 512")

    monkeypatch.setattr(torch, "save", torch_full)
    monkeypatch.setattr("capsnet.files.shutil.disk_usage", lambda path: SimpleNamespace(free=0))
    assert main([*T, "--epochs", "1", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("train_state.pt: no space left on device"), err  # not progress.json, not a traceback
    progress = read_json(tmp_path / "b" / "progress.json")
    assert progress["status"] == "failed" and progress["best_accuracy"] == 0.0  # best.safetensors staged, not saved


def test_a_folder_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    lock = folder.lock()
    with pytest.raises(RunFolderError, match=f"in use by another training process \\(pid {os.getpid()}\\)"):
        folder.lock()
    lock.release()
    folder.lock().release()
    assert STOP_SIGNALS  # SIGINT, SIGTERM and, where it exists, SIGHUP


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "-1"], "--seed must lie in 0..4294967295"),
        (["--seed", "4294967296"], "--seed must lie in 0..4294967295"),
        (["--routing-iterations", "1000000"], "--routing-iterations must be at most 20"),
    ],
)
def test_out_of_range_options_are_one_line_and_leave_no_folder(tmp_path: Path, capsys, args, message) -> None:
    assert main([*T, "--epochs", "1", "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0
    assert not (tmp_path / "r").exists()


def test_a_resume_with_damaged_options_is_one_line(data_dir: Path, tmp_path: Path, capsys) -> None:
    train(tiny(tmp_path, epochs=1))
    args = json.loads((tmp_path / "args.json").read_text())
    (tmp_path / "args.json").write_text(json.dumps(args | {"preset": ["x"], "lr": "fast"}))
    capsys.readouterr()
    assert main(["--resume", "--out", str(tmp_path), "--epochs", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ("--preset" in err or "--lr" in err), err


def test_a_header_asking_for_a_million_routing_iterations_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    from capsnet.checkpoints.checkpoint import CheckpointError, load_checkpoint

    with safe_open(str(tiny_checkpoint), "pt") as handle:
        metadata = handle.metadata()
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    config = json.loads(metadata["config"]) | {"routing_iterations": 1_000_000}
    save_file(tensors, str(tmp_path / "slow.safetensors"), metadata=metadata | {"config": json.dumps(config)})
    with pytest.raises(CheckpointError, match="routing_iterations must be at most 20"):
        load_checkpoint(tmp_path / "slow.safetensors")


def test_predict_reads_regular_files_only_and_goes_on_without_a_cache(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from PIL import Image

    from capsnet.cli import predict

    digit = tmp_path / "digit.png"
    drawing = Image.new("L", (28, 28))
    drawing.paste(255, (12, 4, 16, 24))  # a bar: a one
    drawing.save(digit)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    big = tmp_path / "big.png"
    with open(big, "wb") as handle:
        handle.truncate(predict.MAX_FILE_BYTES + 1)
    from capsnet.checkpoints.checkpoint import load_checkpoint, save_checkpoint

    old = load_checkpoint(tiny_checkpoint)  # as a checkpoint from before thresholds were stored: computed, then cached
    uncalibrated = save_checkpoint(tmp_path / "old.safetensors", old.model, old.info.replace(novelty=None))
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache folder should be")  # the cache cannot be written
    monkeypatch.setenv("CAPSNET_CACHE_DIR", str(blocked / "capsnet"))
    code = predict.main([str(digit), "/dev/zero", str(fifo), str(big), "--checkpoint", str(uncalibrated)])
    out, err = capsys.readouterr()
    assert code == 2  # some files failed; the digit was still read
    assert "digit.png" in out, err
    lines = err.strip().splitlines()
    assert any("/dev/zero: not a regular file" in line for line in lines)
    assert any(f"{fifo}: not a regular file" in line for line in lines)
    assert any("big.png: too large" in line for line in lines)


def test_export_with_a_damaged_metrics_line_keeps_the_good_lines(tiny_run: Path, tmp_path: Path) -> None:
    from capsnet.runs.export import export_checkpoint

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"epoch": "abc", "test_accuracy": 1}\n{"epoch": true}\n')
    # the first 50 test digits: what is checked is the log, and measuring all 10,000 twice took 20 s of the suite
    export_checkpoint(run / "best.safetensors", tmp_path / "mnist.safetensors", device="cpu", first=50)
    assert [r["epoch"] for r in read_jsonl(tmp_path / "mnist.metrics.jsonl")] == [1, 2]


def test_write_errors_name_their_real_cause(tmp_path: Path) -> None:
    from capsnet.files import FileWriteError, writable, write_json

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for attempt in (lambda: write_json(blocker / "deeper" / "x.json", {}), lambda: writable(blocker / "deeper" / "x")):
        with pytest.raises(FileWriteError, match=f"{blocker} is a file, not a folder"):
            attempt()
    with pytest.raises(FileWriteError, match="it is a folder"):
        writable(tmp_path)
    if os.statvfs("/proc").f_flag & os.ST_RDONLY or not os.access("/proc/self", os.W_OK):
        with pytest.raises(FileWriteError, match="cannot write /proc/self/x.json"):
            write_json("/proc/self/x.json", {})


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 6 MB file system (tmpfs; needs root, as CI has): the paper's model does not fit on it."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the patched test covers it")
    yield where
    subprocess.run(["umount", str(where)], check=False)


def test_a_really_full_disk(data_dir: Path, small_disk: Path) -> None:
    out = small_disk / "run"
    result = capsnet("train", "--preset", "paper", "--train-size", "64", "--test-size", "64", "--epochs", "1",
                     "--device", "cpu", "--no-progress", "--out", str(out))  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"python -m capsnet train: error: cannot write {out}/last.pending.safetensors: " + (
        "no space left on device"
    )
    progress = read_json(out / "progress.json")
    assert progress["status"] == "failed" and progress["best_accuracy"] == 0.0 and "no space" in progress["reason"]


def test_a_disk_full_before_the_run_starts(data_dir: Path, small_disk: Path) -> None:
    """Nothing can be written at all: one line naming the file and the cause, no traceback, no empty lock left."""
    filler = small_disk / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 16))
                handle.flush()
        except OSError:
            pass
    out = small_disk / "run"
    result = capsnet("train", *T, "--epochs", "1", "--out", str(out))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "no space left on device" in result.stderr.lower()
    assert not (out / ".lock").exists()
