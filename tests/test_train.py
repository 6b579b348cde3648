"""Training and evaluation for real: the CLIs, resume, Ctrl-C/SIGTERM, torchrun, bad arguments."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_support import capsnet

from capsnet.checkpoints.checkpoint import load_checkpoint, read_checkpoint_info
from capsnet.checkpoints.header import trained_epochs
from capsnet.data.datasets import as_tensors, load_dataset
from capsnet.evaluation import evaluate
from capsnet.files import read_json, read_jsonl

pytestmark = pytest.mark.slow
TINY = ["--preset", "tiny", "--device", "cpu", "--no-progress"]


TORCHRUN = ["-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone", "-m", "capsnet", "train"]


def run(
    *args: str, check: bool = True, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python ARGS`; a `-m capsnet` command with the test's own environment runs in this process."""
    if args[:2] == ("-m", "capsnet") and env is None:
        result = capsnet(*args[2:])
    else:
        result = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env or os.environ.copy()
        )
    if check:
        assert result.returncode == 0, result.stderr[-2000:]
    return result


def test_short_real_training_run_reaches_90_percent(tiny_run: Path, tiny_checkpoint: Path) -> None:
    records = read_jsonl(tiny_run / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2]
    assert set(records[0]) == {
        "epoch",
        "train_loss",
        "train_accuracy",
        "train_images",
        "test_loss",
        "test_accuracy",
        "lr",
        "seconds",
        "images_per_s",
    }
    assert all(r["train_images"] == 5000 for r in records)
    assert records[1]["lr"] == pytest.approx(records[0]["lr"] * 0.96)
    assert records[-1]["test_accuracy"] >= 0.90, records
    checkpoint = load_checkpoint(tiny_checkpoint)
    info = checkpoint.info
    assert info.dataset == "mnist" and info.epochs == info.best_epoch == 2
    assert len(info.per_class_accuracy) == 10 and len(info.dimension_mean) == 10 and len(info.dimension_std[0]) == 16
    assert info.test_accuracy == pytest.approx(records[-1]["test_accuracy"])
    # the stored accuracy is reproducible from the file on 1,000 real test images
    images, labels = as_tensors(load_dataset("mnist", train=False))
    result = evaluate(checkpoint.model, images[:1000], labels[:1000])
    assert result.accuracy >= 0.90
    assert read_json(tiny_run / "progress.json")["status"] == "finished"


def test_train_resume_and_evaluate_clis(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run(
        "-m", "capsnet", "train", *TINY, "--epochs", "1", "--train-size", "600", "--test-size", "200", "--out", str(out)
    )
    assert json.loads(first.stdout.strip().splitlines()[-1])["epoch"] == 1
    assert {
        "metrics.jsonl",
        "progress.json",
        "last.safetensors",
        "best.safetensors",
        "train_state.pt",
        "args.json",
    } <= {p.name for p in out.iterdir()}
    run("-m", "capsnet", "train", "--epochs", "2", "--out", str(out), "--resume", "--no-progress")
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1, 2] and records[1]["lr"] < records[0]["lr"]
    assert load_checkpoint(out / "last.safetensors").info.epochs == 2
    assert read_json(out / "args.json")["epochs"] == 2  # a later resume (the dashboard's) continues to 2

    (out / "train_state.pt").write_bytes(b"not a training state")
    damaged = run("-m", "capsnet", "train", "--epochs", "3", "--out", str(out), "--resume", check=False, timeout=60)
    assert damaged.returncode == 2 and "Traceback" not in damaged.stderr, damaged.stderr
    assert "train_state.pt is damaged or not a training state" in damaged.stderr
    assert len(damaged.stderr.strip().splitlines()) == 1

    report = run("-m", "capsnet", "evaluate", str(out / "last.safetensors"), "--limit", "300", "--device", "cpu").stdout
    lines = [line for line in report.splitlines() if line.startswith("Class ")]
    assert len(lines) == 10 and "Accuracy:" in report and "Confusion matrix" in report
    import re

    assert all(re.fullmatch(r"Class \d: \d+\.\d\d% \(\d+/\d+\)", line) for line in lines), lines
    summary = json.loads(
        run("-m", "capsnet", "evaluate", str(out / "last.safetensors"), "--limit", "300", "--json").stdout
    )
    assert summary["total"] == 300 and len(summary["per_class"]) == 10 and len(summary["confusion"]) == 10
    assert sum(c["total"] for c in summary["per_class"]) == 300


@pytest.mark.parametrize("every_s, count", [(0.0, 6), (3600.0, 1)])
def test_progress_reports_end_with_the_epochs_numbers(
    monkeypatch: pytest.MonkeyPatch, every_s: float, count: int
) -> None:
    """Each batch reports while reports are due; else only the last one does, with the epoch's own numbers."""
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig
    from capsnet.training import epoch
    from capsnet.training.distributed import Distributed

    torch.manual_seed(0)
    config = CapsNetConfig.preset("tiny")
    model = CapsNet(config)
    batches = [(x, torch.randint(0, 10, (8,)), x) for x in (torch.rand(8, 1, 28, 28) for _ in range(6))]
    reports: list[tuple[int, float, float, float]] = []
    monkeypatch.setattr(epoch, "REPORT_EVERY_S", every_s)
    context = epoch.EpochContext(
        model,
        torch.optim.Adam(model.parameters()),
        config,
        torch.device("cpu"),
        False,
        epoch.StopFlag(),
        Distributed(),
        lambda *report: reports.append(report),
        None,
    )
    stats = epoch.train_one_epoch(context, batches)
    assert stats.batches == 6 and stats.seen == 48
    assert [r[0] for r in reports] == list(range(7 - count, 7))
    assert reports[-1][1:3] == (pytest.approx(stats.loss), pytest.approx(stats.accuracy))


def test_progress_bar_on_stderr(data_dir: Path, tmp_path: Path) -> None:
    result = run(
        "-m",
        "capsnet",
        "train",
        "--preset",
        "tiny",
        "--epochs",
        "1",
        "--train-size",
        "300",
        "--test-size",
        "100",
        "--out",
        str(tmp_path / "r"),
    )
    assert "epoch 1/1" in result.stderr and "img_s=" in result.stderr and "loss=" in result.stderr


SHIPPED_MNIST = Path(__file__).resolve().parents[1] / "checkpoints" / "mnist.safetensors"


@pytest.mark.parametrize(
    "args, message",
    [
        (["-m", "capsnet", "train", "--epochs", "-1"], "--epochs: must be at least 1"),
        (["-m", "capsnet", "train", "--dataset", "cifar"], "unknown --dataset 'cifar'"),
        (["-m", "capsnet", "train", "--lr", "zero"], "is not a number"),
        (["-m", "capsnet", "train", "--resume"], "--resume needs --out"),
        (["-m", "capsnet", "evaluate", "/nonexistent.safetensors"], "no such checkpoint"),
        (["-m", "capsnet", "train", "--out", "/proc/version", "--epochs", "1"], "/proc/version"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run(*args, check=False, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr


def test_missing_dataset_is_one_line(tmp_path: Path) -> None:
    result = run(
        "-m",
        "capsnet",
        "train",
        *TINY,
        "--data-dir",
        str(tmp_path),
        "--no-download",
        "--out",
        str(tmp_path / "r"),
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    error = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and str(tmp_path / "MNIST" / "raw") in error[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP (a closed terminal)"])
def test_a_stop_signal_stops_at_a_batch_and_resume_finishes(data_dir: Path, tmp_path: Path, stop) -> None:
    out = tmp_path / "run"
    args = [
        *TINY,
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--train-size",
        "2000",
        "--test-size",
        "100",
        "--out",
        str(out),
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "capsnet", "train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        progress = out / "progress.json"
        if progress.is_file() and read_json(progress).get("batch", 0) >= 3:
            break
        time.sleep(0.2)
    process.send_signal(stop)
    assert process.wait(timeout=60) == 0, process.stderr.read()
    state = torch.load(out / "train_state.pt", weights_only=True)
    assert state["epoch"] == 0 and 3 <= state["batch"] < 63
    assert read_json(out / "progress.json")["status"] == "stopped"
    assert read_jsonl(out / "metrics.jsonl") == []
    assert state["partial"]["seen"] == 32 * state["batch"]  # the part of the epoch run before the stop
    run("-m", "capsnet", "train", "--out", str(out), "--resume", "--epochs", "1", "--no-progress")
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1]
    assert records[0]["train_images"] == 2000  # the record covers the whole epoch, not the part after the resume
    assert read_json(out / "progress.json")["status"] == "finished"


def test_a_long_epoch_saves_a_resumable_state_on_the_way(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill without warning (no handler runs: a closed terminal, the OOM killer) loses at most SAVE_EVERY_S of an
    epoch: the trainer saves a resumable state that often, also in an epoch it resumed, and a resume finishes it."""
    import dataclasses

    from capsnet.training import epoch
    from capsnet.training import trainer as training
    from capsnet.training.options import TrainOptions

    class PowerCut(BaseException):
        pass

    real_step, steps, cut_at = epoch.training_step, [], [8, 10]  # the 8th and the 10th step never finish

    def step(*args, **kwargs):
        steps.append(1)
        if cut_at and len(steps) == cut_at[0]:
            cut_at.pop(0)
            raise PowerCut
        return real_step(*args, **kwargs)

    monkeypatch.setattr(epoch, "SAVE_EVERY_S", 0.0)  # a save after every batch
    monkeypatch.setattr(epoch, "training_step", step)
    out = tmp_path / "run"
    options = TrainOptions(preset="tiny", epochs=1, batch_size=32, train_size=320, test_size=100, out=str(out),
                           data_dir=str(data_dir), progress=False, device="cpu")  # fmt: skip
    with pytest.raises(PowerCut):
        training.train(options)
    first = torch.load(out / "train_state.pt", weights_only=True)
    assert (first["epoch"], first["batch"], first["partial"]["seen"]) == (0, 7, 7 * 32)  # the batches before the cut
    assert 0 < first["partial"]["seconds"] <= first["elapsed"]
    assert read_jsonl(out / "metrics.jsonl") == []
    resumed = dataclasses.replace(options, resume=True)
    with pytest.raises(PowerCut):  # cut again, one batch into the resumed epoch
        training.train(resumed)
    second = torch.load(out / "train_state.pt", weights_only=True)
    assert (second["epoch"], second["batch"], second["partial"]["seen"]) == (0, 8, 8 * 32)  # with the part before
    assert second["partial"]["seconds"] > first["partial"]["seconds"] and second["elapsed"] > first["elapsed"]
    records = training.train(resumed)
    assert len(steps) == 8 + 2 + 2  # each resume starts after the last saved batch: 7 + 1 + the epoch's last 2
    assert [r["epoch"] for r in records] == [1] and records[0]["train_images"] == 320  # the whole epoch


def test_torchrun_with_two_processes_makes_one_run_folder(data_dir: Path, tmp_path: Path) -> None:
    """Two CPU processes (gloo): each trains on its half of the data; the numbers are summed over both. Without
    --out, rank 0 names the run folder and tells the others: one folder, not one per process."""
    root = tmp_path / "runs"
    args = [*TINY, "--epochs", "1", "--train-size", "400", "--test-size", "100", "--batch-size", "50"]
    # torchrun's own log folder (tempfile's torchelastic_*) goes to the test's folder, not to /tmp for good
    run(*TORCHRUN, *args, env=dict(os.environ, CAPSNET_RUNS_DIR=str(root), TMPDIR=str(tmp_path)))
    (out,) = [p for p in root.iterdir() if p.is_dir()]
    assert out.name.endswith("-mnist")
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["epoch"] for r in records] == [1]
    assert records[0]["train_images"] == 400  # both halves counted, each once
    assert read_json(out / "progress.json")["batches"] == 4  # 200 images per process, in batches of 50
    assert load_checkpoint(out / "best.safetensors").info.epochs == 1
    assert sorted(p.name for p in out.iterdir() if p.name != ".lock") == sorted(
        [
            "args.json",
            "best.safetensors",
            "last.safetensors",
            "metrics.jsonl",
            "progress.json",
            "train_state.pt",
            "watch.safetensors",
        ]  # fmt: skip
    )  # the run's files and nothing else: no copy per process


def test_export_stores_float16_and_the_accuracy_of_the_exported_file(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from capsnet.runs.export import export_checkpoint

    target = tmp_path / "mnist.safetensors"
    info = export_checkpoint(tiny_checkpoint, target, device="cpu", first=2000)  # (the whole set: a shipped file's)
    assert target.stat().st_size < 0.6 * tiny_checkpoint.stat().st_size
    run_log = read_jsonl(tiny_checkpoint.parent / "metrics.jsonl")
    assert read_jsonl(target.with_suffix(".metrics.jsonl")) == [
        r | {"run": tiny_checkpoint.parent.name} for r in run_log
    ]
    loaded = load_checkpoint(target)
    assert loaded.info == info and info.weights_dtype == "float16" and info.test_examples == 2000
    assert abs(info.test_accuracy - info.test_accuracy_before_export) <= 0.002
    images, labels = (t[:2000] for t in as_tensors(load_dataset("mnist", train=False)))
    assert evaluate(loaded.model, images, labels).accuracy == pytest.approx(info.test_accuracy, abs=1e-9)
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnist.metrics.jsonl", "mnist.safetensors"]  # no staging


def test_init_starts_from_a_checkpoints_weights(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from capsnet.data.datasets import subset
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    options = dict(dataset="mnist", preset="tiny", epochs=1, train_size=64, test_size=300, progress=False)
    records = train(TrainOptions(**options, init=str(tiny_checkpoint), lr=1e-12, out=str(tmp_path / "a")))
    images, labels = as_tensors(subset(load_dataset("mnist", train=False), 300, seed=0))
    expected = evaluate(load_checkpoint(tiny_checkpoint).model, images, labels).accuracy
    assert records[0]["test_accuracy"] == pytest.approx(expected, abs=0.004)
    assert expected >= 0.85  # far above what one step from random weights reaches

    # the new run's checkpoints say where it started from, also after a resume
    _, origin_info = read_checkpoint_info(tiny_checkpoint)
    train(TrainOptions(**(options | {"epochs": 2}), resume=True, out=str(tmp_path / "a")))
    for epoch in (1, 2):
        _, info = read_checkpoint_info(tmp_path / "a" / f"{'best' if epoch == 1 else 'last'}.safetensors")
        origin = info.started_from
        assert origin["checkpoint"] == tiny_checkpoint.as_posix() and origin["epochs"] == origin_info.epochs
        assert origin["test_accuracy"] == origin_info.test_accuracy and origin["recipe"] == origin_info.recipe
    assert info.recipe["init"] == tiny_checkpoint.as_posix()  # the command that made it, also after the resume
    assert info.epochs == 2 and origin_info.started_from is None and "started_from" not in origin_info.to_dict()
    assert info.total_epochs == 2 + origin_info.epochs == trained_epochs(info)
    assert info.total_training_seconds > origin_info.training_seconds

    result = run("-m", "capsnet", "train", "--init", str(tiny_checkpoint), "--out", str(tmp_path / "b"), check=False)
    assert (
        result.returncode == 2
        and "differs from this run's in more than its input size" in result.stderr
        and len(result.stderr.strip().splitlines()) == 1
    )


def _batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(images, labels, reconstruction targets), as `Data.epoch` yields them."""
    return [(x, torch.randint(0, 10, (2,)), x) for x in (torch.rand(2, 1, 28, 28) for _ in range(count))]


@pytest.mark.parametrize("world", [1, 2])
def test_processes_sync_only_every_few_dozen_batches(monkeypatch: pytest.MonkeyPatch, world: int) -> None:
    """The stop flag (and the collapse watch) are checked across processes every SYNC_EVERY batches, not per batch."""
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig
    from capsnet.training import epoch
    from capsnet.training.distributed import Distributed

    calls: list[list[float]] = []
    monkeypatch.setattr(epoch, "reduce_sum", lambda values, env, device: calls.append(values) or values)
    monkeypatch.setattr(epoch, "REPORT_EVERY_S", 0.0)
    config = CapsNetConfig.preset("tiny")
    model = CapsNet(config)
    stop = epoch.StopFlag()

    def on_batch(done: int, *_: float) -> None:
        stop.stop = done >= 10  # Ctrl-C during batch 10

    context = epoch.EpochContext(
        model, torch.optim.Adam(model.parameters()), config, torch.device("cpu"), False, stop, Distributed(world=world),
        on_batch,
    )  # fmt: skip
    stats = epoch.train_one_epoch(context, _batches(120))
    if world == 1:
        assert stats.batches == 10  # one process stops at once
    else:
        assert stats.batches == epoch.SYNC_EVERY  # several stop together, at the next sync point
    assert stats.stopped  # and every process knows the epoch was stopped
    assert len(calls) <= stats.batches // epoch.SYNC_EVERY + 2  # the sync points, the end's agreement and totals


def _single_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name, value in dict(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    ).items():
        monkeypatch.setenv(name, value)


def test_the_process_group_is_left_on_early_return_and_on_error(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    import torch.distributed as dist

    from capsnet.data.datasets import DatasetNotFoundError
    from capsnet.training.options import TrainOptions
    from capsnet.training.trainer import train

    _single_process_group(monkeypatch)
    done = tmp_path / "done"
    shutil.copytree(tiny_run, done)
    assert train(TrainOptions(out=str(done), resume=True, epochs=2, progress=False, device="cpu")) == []  # nothing left
    assert not dist.is_initialized()
    with pytest.raises(DatasetNotFoundError):
        train(
            TrainOptions(preset="tiny", data_dir=str(tmp_path), download=False, out=str(tmp_path / "r"), device="cpu")
        )
    assert not dist.is_initialized()


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyError("a bug")])
def test_a_programming_error_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, error) -> None:
    """Only user errors (CapsNetError) become one line with exit code 2; a bug is raised as it is."""
    from capsnet.cli import train as train_cli
    from capsnet.training import trainer as training

    def broken(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(training, "fit", broken)
    with pytest.raises(type(error), match="a bug"):
        train_cli.main([*TINY, "--out", str(tmp_path / "r")])


def test_an_epoch_shorter_than_the_sync_interval_is_still_watched(data_dir: Path, tmp_path: Path) -> None:
    """With 5,000 images at batch 128 (40 batches, under SYNC_EVERY) a diverged run is still stopped."""
    result = run(
        "-m", "capsnet", "train", *TINY, "--epochs", "2", "--train-size", "640", "--test-size", "100",
        "--batch-size", "32", "--lr", "1e37", "--out", str(tmp_path / "r"), check=False,
    )  # fmt: skip
    assert result.returncode == 3 and "the loss became NaN or infinite" in result.stderr, result.stderr[-2000:]
    assert read_jsonl(tmp_path / "r" / "metrics.jsonl") == []  # stopped at the end of its first epoch


@pytest.mark.parametrize(
    "args, message",
    [
        (["-m", "capsnet", "train", *TINY, "--epochs", "1", "--out", "/proc/self"], "cannot write /proc/self/"),
        (
            ["-m", "capsnet", "export", str(SHIPPED_MNIST), "/proc/self/x.safetensors"],  # the source read first
            "cannot write /proc/self",
        ),
    ],
)
def test_an_unwritable_place_is_one_line(data_dir: Path, args: list[str], message: str) -> None:
    result = run(*args, check=False, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("lr", "reason"),
    # lr 1: judged at the first sync point past the lowered threshold (20 batches, or 30 with another thread count's
    # rounding): the message says how many
    [("1.0", "training collapsed: after "), ("1e37", "the loss became NaN or infinite")],
)
def test_a_collapsed_run_stops_with_its_reason(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, lr: str, reason: str
) -> None:
    """At lr 1 the tiny model's capsules all saturate at chance accuracy; at 1e37 the loss overflows.

    The thresholds are lowered so that a CPU sees it within seconds (the defaults wait for 100 batches)."""
    from capsnet.cli import train as train_cli
    from capsnet.runs import processes
    from capsnet.training import collapse, epoch
    from capsnet.training.folder import RunFolder

    monkeypatch.setattr(collapse, "AFTER_BATCHES", 20)
    monkeypatch.setattr(collapse, "AFTER_IMAGES", 640)
    monkeypatch.setattr(epoch, "SYNC_EVERY", 10)
    out = tmp_path / "run"
    # float32 on every CPU: with bf16 autocast (a CPU with AVX512-BF16 picks it) lr 1 leaves the capsules between
    # m- and m+ at chance, neither dead nor saturated, which the watch does not call a collapse
    args = [*TINY, "--epochs", "3", "--train-size", "2000", "--test-size", "100", "--batch-size", "32", "--lr", lr,
            "--no-amp"]  # fmt: skip
    assert train_cli.main([*args, "--out", str(out)]) == 3
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and reason in error and "--lr" in error
    progress = RunFolder(out).read_progress()
    assert progress.status == "failed" and reason in progress.reason
    summary = processes.read_run(out)  # what the dashboard shows: failed, with the reason
    assert summary.status == "failed" and reason in summary.reason
    assert read_jsonl(out / "metrics.jsonl") == []  # stopped in its first epoch, long before its end


def test_the_best_epoch_is_chosen_on_a_validation_split(data_dir: Path, tmp_path: Path) -> None:
    """--val-size holds training images out (never trained on) and picks the best epoch on them, not on the test set."""
    import torch as th

    from capsnet.training.distributed import Distributed
    from capsnet.training.options import TrainOptions
    from capsnet.training.train_data import load_data
    from capsnet.training.trainer import train

    options = TrainOptions(preset="tiny", epochs=3, train_size=600, val_size=400, test_size=200, lr=3e-3,
                           out=str(tmp_path / "r"), progress=False, device="cpu")  # fmt: skip
    data = load_data(options, th.device("cpu"), Distributed())
    assert len(data.val) == 400 and len(data.train_labels) == 600 and len(data.test) == 200
    held_out = {bytes(image.numpy()) for image in (data.val.images * 255).round().to(th.uint8)}
    assert not held_out & {bytes(image.numpy()) for image in data.train_images}  # disjoint
    images, labels, targets = next(data.epoch(32, seed=0))  # a single digit is redrawn as it was read
    assert images.shape == (32, 1, 28, 28) and labels.shape == (32,) and targets is images and data.present == 1
    records = train(options)
    assert all({"val_loss", "val_accuracy"} <= set(r) for r in records)
    info = load_checkpoint(tmp_path / "r" / "best.safetensors").info
    best = max(records, key=lambda r: r["val_accuracy"])
    assert info.best_epoch == best["epoch"] and info.extra["val_examples"] == 400 and "val_loss" in info.extra
    state = th.load(tmp_path / "r" / "train_state.pt", weights_only=True)
    assert state["best_accuracy"] == pytest.approx(best["val_accuracy"])  # chosen on validation, whatever test says
    from capsnet.runs.processes import read_run

    assert read_run(tmp_path / "r").best_accuracy == best["test_accuracy"]  # reported: that epoch's test figure


def test_multimnist_validation_pairs_are_made_of_held_out_digits(data_dir: Path, tmp_path: Path) -> None:
    """--val-size for MultiMNIST: one fixed pair per held-out training digit, both digits held out, seeded."""
    import torch as th

    from capsnet.training.distributed import Distributed
    from capsnet.training.options import TrainOptions
    from capsnet.training.train_data import load_data
    from capsnet.training.trainer import train

    options = TrainOptions(dataset="multimnist", preset="tiny", epochs=2, train_size=400, val_size=300, test_size=100,
                           out=str(tmp_path / "r"), progress=False, device="cpu")  # fmt: skip
    data = load_data(options, th.device("cpu"), Distributed())
    pairs = data.val.pairs
    assert data.val.images.dtype == th.uint8 and len(data.val.labels) == 300 and len(data.val) == 300
    assert pairs.second.max() < 300 and (data.val.labels[pairs.first] != data.val.labels[pairs.second]).all()
    assert data.pairs and len(data.test) == 100  # a seeded subset of the fixed test pairs
    held_out = {bytes(image.numpy()) for image in data.val.images}
    assert not held_out & {bytes(image.numpy()) for image in data.train_images.cpu()}  # never trained on
    images, labels, targets = next(data.epoch(16, seed=1))  # the overlay, both classes, each digit alone
    assert images.shape == (16, 1, 36, 36) and labels.shape == (16, 2) and targets.shape == (16, 2, 1, 36, 36)
    assert data.present == 2
    third = list(data.epoch(16, seed=1))[2]
    assert all(th.equal(a, b) for a, b in zip(third, next(data.epoch(16, seed=1, start_batch=2))))  # resumes exactly
    again = load_data(options, th.device("cpu"), Distributed()).val.pairs
    assert th.equal(again.second, pairs.second) and th.equal(again.offsets, pairs.offsets)  # fixed for the run
    records = train(options)
    assert all({"val_loss", "val_accuracy"} <= set(r) for r in records)
    info = load_checkpoint(tmp_path / "r" / "best.safetensors").info
    assert (
        info.best_epoch == max(records, key=lambda r: r["val_accuracy"])["epoch"] and info.extra["val_examples"] == 300
    )


def test_nested_subsets_are_read_as_their_examples(data_dir: Path) -> None:
    from torch.utils.data import Subset

    from capsnet.data.datasets import stored_tensors

    dataset = load_dataset("mnist", train=False)
    nested = Subset(Subset(dataset, list(range(100, 200))), [5, 0, 42])
    images, labels = stored_tensors(nested)
    assert labels.tolist() == [dataset.targets[i].item() for i in (105, 100, 142)]
    assert torch.equal(images[2, 0], dataset.data[142])
