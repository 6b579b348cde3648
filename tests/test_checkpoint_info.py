"""A checkpoint's info, typed and read tolerantly in one place."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capsnet.checkpoints.header import CheckpointInfo, trained_epochs


def test_round_trip_keeps_unknown_keys() -> None:
    data = {"dataset": "mnist", "test_accuracy": 0.99, "epochs": 3, "from_the_future": {"a": 1}}
    info = CheckpointInfo.from_dict(data)
    assert info.dataset == "mnist" and info.test_accuracy == 0.99 and info.epochs == 3
    assert info.extra == {"from_the_future": {"a": 1}}
    assert info.to_dict() == data


def test_wrong_types_give_the_defaults() -> None:
    info = CheckpointInfo.from_dict(
        {"dataset": 7, "test_accuracy": "high", "epochs": True, "class_names": "0123", "hardware": None,
         "training_seconds": float("nan"), "recipe": [1], "best_epoch": 2.5}
    )  # fmt: skip
    assert info == CheckpointInfo()
    assert CheckpointInfo.from_dict(None) == CheckpointInfo()
    assert CheckpointInfo.from_dict({"test_accuracy": 1}).test_accuracy == 1.0  # a whole number is a number


def test_what_readers_ask() -> None:
    info = CheckpointInfo.from_dict({"dataset": "mnist", "epochs": 2, "total_epochs": 12, "training_seconds": 5.0})
    assert info.title == "mnist" and info.trained_epochs == 12 and info.all_training_seconds == 5.0
    assert CheckpointInfo(dataset="x", dataset_title="X").title == "X"
    assert trained_epochs({"epochs": 4}) == 4 and trained_epochs(CheckpointInfo()) is None
    assert CheckpointInfo().dimension_stats(0, 16) is None
    mean = np.ones((10, 16)).tolist()
    good = CheckpointInfo(dimension_mean=mean, dimension_std=mean)
    assert good.dimension_stats(3, 16)[0].shape == (16,) and good.dimension_stats(3, 8) is None
    assert good.dimension_stats(10, 16) is None  # no such class


def test_origin_names_the_file_and_nests_its_own_origin() -> None:
    first = CheckpointInfo(dataset="mnist", epochs=5, test_accuracy=0.9, hardware="CPU", recipe={"lr": 1e-3})
    origin = first.as_origin(Path("runs/a/best.safetensors"))
    assert origin == {
        "checkpoint": "runs/a/best.safetensors", "dataset": "mnist", "epochs": 5, "test_accuracy": 0.9,
        "hardware": "CPU", "recipe": {"lr": 1e-3},
    }  # fmt: skip
    second = CheckpointInfo(epochs=2, started_from=origin).as_origin("runs/b/last.safetensors")
    assert second["started_from"] == origin
