"""Datasets from ../shared/datasets through CAPSNET_DATA_DIR; a missing one is one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from capsnet.data.datasets import (
    DatasetNotFoundError,
    as_tensors,
    load_dataset,
    resolve_data_dir,
    stored_tensors,
    subset,
)


@pytest.mark.parametrize("name, size", [("mnist", 10_000), ("fashion-mnist", 10_000)])
def test_real_test_sets_load(data_dir: Path, name: str, size: int) -> None:
    dataset = load_dataset(name, train=False)
    assert len(dataset) == size
    image, label = dataset[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32
    assert 0.0 <= image.min() and image.max() <= 1.0 and 0 <= label < 10
    images, labels = as_tensors(dataset)
    assert images.shape == (size, 1, 28, 28) and torch.equal(images[0], image)


def test_stored_tensors_are_the_datasets_items(data_dir: Path) -> None:
    dataset = subset(load_dataset("fashion-mnist", train=True), 50, seed=1)
    images, labels = stored_tensors(dataset)
    assert images.shape == (50, 1, 28, 28) and images.dtype == torch.uint8 and labels.dtype == torch.long
    image, label = dataset[7]
    assert torch.equal(as_tensors(dataset)[0][7], image) and labels[7] == label


def test_subset_is_seeded(data_dir: Path) -> None:
    dataset = load_dataset("mnist", train=False)
    a, b = subset(dataset, 100, seed=3), subset(dataset, 100, seed=3)
    assert len(a) == 100 and a.indices == b.indices
    assert subset(dataset, None) is dataset
    images, labels = as_tensors(a)
    assert torch.equal(images[5], dataset[a.indices[5]][0]) and labels[5] == dataset[a.indices[5]][1]


def test_missing_dataset_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as error:
        load_dataset("fashion-mnist", train=False, data_dir=tmp_path, download=False)
    message = str(error.value)
    assert "\n" not in message and str(tmp_path / "FashionMNIST" / "raw") in message and "CAPSNET_DATA_DIR" in message


def test_unknown_dataset() -> None:
    with pytest.raises(ValueError, match="choose from mnist, fashion-mnist"):
        load_dataset("cifar100", train=False)


def test_data_dir_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSNET_DATA_DIR", "/somewhere")
    assert resolve_data_dir("/explicit") == Path("/explicit")
    assert resolve_data_dir() == Path("/somewhere")
    monkeypatch.delenv("CAPSNET_DATA_DIR")
    assert resolve_data_dir() == Path("data")


def test_a_damaged_dataset_is_called_damaged_not_missing(data_dir: Path, tmp_path: Path) -> None:
    import shutil

    from capsnet.data.datasets import DatasetDamagedError

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
    ):
        shutil.copy(data_dir / "MNIST" / "raw" / name, raw / name)
    images = raw / "t10k-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:100_000])  # truncated
    with pytest.raises(DatasetDamagedError) as error:
        load_dataset("mnist", train=False, data_dir=tmp_path, download=False)
    message = str(error.value)
    assert "is damaged: t10k-images-idx3-ubyte or t10k-labels-idx1-ubyte cannot be read" in message
    assert str(raw) in message and "\n" not in message
    images.unlink()  # one file of the two missing: that is missing, not damaged
    with pytest.raises(DatasetNotFoundError):
        load_dataset("mnist", train=False, data_dir=tmp_path, download=False)


def test_a_damaged_gz_only_dataset_is_called_damaged_not_missing(tmp_path: Path) -> None:
    from capsnet.data.datasets import DatasetDamagedError, load_dataset

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (raw / f"{name}.gz").write_bytes(b"\x1f\x8b this is not a whole gzip file")
    with pytest.raises(DatasetDamagedError, match="could not be unpacked"):
        load_dataset("mnist", train=False, data_dir=tmp_path, download=False)
