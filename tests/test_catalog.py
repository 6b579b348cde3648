"""The checkpoint catalogue: shipped models first, then each run's best; broken files named, not hidden."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from capsnet.checkpoints.checkpoint import save_checkpoint
from capsnet.files import write_json
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.runs import catalog
from capsnet.training.folder import run_folders

INFO = {"dataset": "mnist", "dataset_title": "MNIST", "test_accuracy": 0.991, "epochs": 30}


def finished_run(root: Path, name: str, model: CapsNet) -> Path:
    """A run folder as the trainer leaves it after one epoch."""
    run_dir = root / name
    run_dir.mkdir(parents=True)
    write_json(run_dir / "args.json", {"dataset": "mnist", "epochs": 1, "preset": "tiny"})
    write_json(run_dir / "progress.json", {"status": "finished", "pid": 0, "epochs": 1, "dataset": "mnist"})
    (run_dir / "metrics.jsonl").write_text(json.dumps({"epoch": 1, "test_accuracy": 0.5}) + "\n")
    save_checkpoint(run_dir / "best.safetensors", model, {**INFO, "test_accuracy": 0.5, "epochs": 1})
    return run_dir


def test_checkpoint_list_names_broken_files(tmp_path: Path) -> None:
    shipped, root = tmp_path / "checkpoints", tmp_path / "runs"
    shipped.mkdir()
    model = CapsNet(CapsNetConfig.preset("tiny"))
    (shipped / "a-custom.safetensors").write_bytes(b"")  # sorted after the two known names despite its name
    save_checkpoint(shipped / "mnist.safetensors", model, INFO, dtype=torch.float16)
    (shipped / "fashion-mnist.safetensors").write_bytes(b"garbage")
    finished_run(root, "20250101-000000-mnist", model)
    entries = catalog.list_checkpoints(shipped, root)
    names = [e.path.name for e in entries]
    assert names == ["mnist.safetensors", "fashion-mnist.safetensors", "a-custom.safetensors", "best.safetensors"]
    assert entries[0].label == "MNIST · 99.10% · shipped" and not entries[0].error  # short: the sidebar is narrow
    assert entries[1].error and "fashion-mnist.safetensors" in entries[1].error
    assert entries[3].source == "run" and "run 20250101-000000-mnist, 1 epoch" in entries[3].label
    assert entries[3].label.endswith("1 epoch")  # singular
    assert catalog.default_checkpoint(entries) is entries[0]
    assert catalog.default_checkpoint(entries[1:]) is entries[3]
    assert catalog.default_checkpoint([entries[1]]) is None


def test_the_runs_of_a_comparison_are_listed_under_its_folder(tmp_path: Path) -> None:
    """A comparison of routings keeps a run per routing and seed in its own folder: each is listed (so every page
    can open it), named by both folders; a folder of runs inside a run is not looked into."""
    model = CapsNet(CapsNetConfig.preset("tiny"))
    root = tmp_path / "runs"
    finished_run(root, "20250101-000000-mnist", model)
    for name in ("none-seed0", "dynamic-seed0"):
        finished_run(root / "compare-mnist", name, model)
    (root / "compare-mnist" / "comparison.json").write_text("{}")
    finished_run(root / "20250101-000000-mnist", "inner", model)  # a run's own folders are its own
    entries = catalog.list_checkpoints(tmp_path / "absent", root)
    assert [e.run for e in entries] == [
        "20250101-000000-mnist",
        "compare-mnist/dynamic-seed0",
        "compare-mnist/none-seed0",
    ]
    assert entries[1].name == "compare-mnist/dynamic-seed0/best.safetensors" and not entries[1].error
    assert "run compare-mnist/dynamic-seed0" in entries[1].label


def test_a_missing_folder_lists_only_runs(tmp_path: Path) -> None:
    model = CapsNet(CapsNetConfig.preset("tiny"))
    finished_run(tmp_path / "runs", "20250101-000000-mnist", model)
    entries = catalog.list_checkpoints(tmp_path / "absent", tmp_path / "runs")
    assert [e.source for e in entries] == ["run"]


def test_checkpoints_dir_argument_then_environment_then_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(catalog.CHECKPOINTS_ENV, str(tmp_path / "env"))
    assert catalog.checkpoints_dir(tmp_path / "arg") == tmp_path / "arg"
    assert catalog.checkpoints_dir() == tmp_path / "env"
    monkeypatch.delenv(catalog.CHECKPOINTS_ENV)
    assert catalog.checkpoints_dir() == Path(__file__).resolve().parents[1] / "checkpoints"


def test_the_shipped_checkpoints_are_found_without_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no CAPSNET_CHECKPOINTS_DIR, the shipped models are the repository's checkpoints/ folder."""
    monkeypatch.delenv(catalog.CHECKPOINTS_ENV, raising=False)
    assert (catalog.checkpoints_dir() / "mnist.safetensors").is_file()


def test_a_warm_started_model_says_its_epochs_on_each_dataset() -> None:
    """The sidebar's figure and the pages' agree: 107 on MNIST + 8 on MultiMNIST, not 115."""
    from capsnet.checkpoints.checkpoint import read_checkpoint_info

    shipped = Path(__file__).resolve().parents[1] / "checkpoints"
    _, info = read_checkpoint_info(shipped / "multimnist.safetensors")
    assert info.epochs_said({"mnist": "MNIST", "multimnist": "MultiMNIST"}) == "107 on MNIST + 8 on MultiMNIST"
    _, info = read_checkpoint_info(shipped / "mnist.safetensors")
    assert info.epochs_said() == "107 epochs"
    entry = next(
        e for e in catalog.list_checkpoints(shipped, shipped / "none") if e.path.name == "multimnist.safetensors"
    )
    assert entry.epochs_said == "107 on MNIST + 8 on MultiMNIST"


def test_links_out_of_the_folders_are_not_listed(tmp_path: Path) -> None:
    """A link in the checkpoints or a run folder that leads outside them (or to a device) is never listed or opened;
    a link that stays inside is."""
    shipped, runs = tmp_path / "checkpoints", tmp_path / "runs"
    shipped.mkdir()
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(b"not for the app")
    (shipped / "mnist.safetensors").symlink_to(outside)
    (shipped / "zero.safetensors").symlink_to("/dev/zero")
    run = runs / "20250101-000000-mnist"
    run.mkdir(parents=True)
    (run / "args.json").write_text("{}")
    (run / "best.safetensors").symlink_to(outside)
    assert [f.name for f in run_folders(runs)] == [run.name]  # a run, whose checkpoint is a link out
    assert catalog.list_checkpoints(shipped, runs) == []
    (shipped / "inside.safetensors").write_bytes(b"x")
    (shipped / "alias.safetensors").symlink_to(shipped / "inside.safetensors")
    assert sorted(e.path.name for e in catalog.list_checkpoints(shipped, runs)) == [
        "alias.safetensors",
        "inside.safetensors",
    ]


def test_a_runs_label_gives_the_epochs_it_ran_and_its_best_apart(tmp_path: Path) -> None:
    """A 3-epoch run whose best model is its first epoch's was labelled "1 epoch", as if the run had been that long."""
    torch.manual_seed(0)
    run_dir = finished_run(tmp_path / "runs", "20250101-000000-mnist", CapsNet(CapsNetConfig.preset("tiny")))
    lines = [json.dumps({"epoch": n, "test_accuracy": a}) for n, a in ((1, 0.5), (2, 0.4), (3, 0.45))]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    [entry] = catalog.list_checkpoints(tmp_path / "none", tmp_path / "runs")
    assert entry.label.endswith("run 20250101-000000-mnist, 3 epochs, the best at epoch 1"), entry.label
    (run_dir / "metrics.jsonl").write_text(lines[0] + "\n")  # a run of one epoch: said once
    [entry] = catalog.list_checkpoints(tmp_path / "none", tmp_path / "runs")
    assert entry.label.endswith("run 20250101-000000-mnist, 1 epoch"), entry.label
