"""Datasets: MNIST and Fashion-MNIST through `torchvision.datasets`.

The data root is `--data-dir`, else the environment variable CAPSNET_DATA_DIR,
else `./data`. Training images are shifted by up to 2 pixels in each direction
with zero padding, as in section 5 of the paper; pixels stay in [0, 1].
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset, Subset
from torchvision import datasets
from torchvision.transforms import v2

from capsnet.errors import CapsNetError


class DatasetNotFoundError(CapsNetError):
    """The dataset is not on disk and could not be downloaded."""


@dataclass(frozen=True)
class DatasetInfo:
    """What the package knows about a dataset it can train on."""

    name: str  # the CLI name
    title: str
    folder: str  # torchvision's folder under the root
    classes: tuple[str, ...]
    hflip: bool  # horizontal flips are label-preserving for this dataset
    tv_class: type

    @property
    def num_classes(self) -> int:
        return len(self.classes)


DATASETS: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo(
        "mnist", "MNIST", "MNIST", tuple(str(d) for d in range(10)), hflip=False, tv_class=datasets.MNIST
    ),
    "fashion-mnist": DatasetInfo(
        "fashion-mnist",
        "Fashion-MNIST",
        "FashionMNIST",
        (
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ),
        hflip=True,
        tv_class=datasets.FashionMNIST,
    ),
}


def dataset_info(name: str) -> DatasetInfo:
    """The `DatasetInfo` of `name`, or a ValueError that lists the known ones."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    return DATASETS[name]


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """`data_dir` if given, else $CAPSNET_DATA_DIR, else ./data."""
    if data_dir:
        return Path(data_dir)
    return Path(os.environ.get("CAPSNET_DATA_DIR") or "data")


def build_transform(train: bool, shift: int = 2, hflip: bool = False) -> v2.Compose:
    """PIL image to a (1, 28, 28) float tensor in [0, 1]; random shifts (and flips) when training."""
    steps: list[v2.Transform] = [v2.ToImage()]
    if train and shift > 0:
        steps.append(v2.RandomCrop(28, padding=shift))  # shift by up to `shift` px, zero fill
    if train and hflip:
        steps.append(v2.RandomHorizontalFlip())
    steps.append(v2.ToDtype(torch.float32, scale=True))
    return v2.Compose(steps)


def load_dataset(
    name: str,
    train: bool,
    data_dir: str | os.PathLike | None = None,
    augment: bool | None = None,
    hflip: bool | None = None,
    download: bool = True,
) -> Dataset:
    """A torchvision dataset with the package's transform.

    `augment` defaults to `train`; `hflip` to what the dataset allows (Fashion-MNIST).
    Raises DatasetNotFoundError, with the folder searched and how to fix it, if the
    files are absent and cannot be downloaded.
    """
    info = dataset_info(name)
    root = resolve_data_dir(data_dir)
    augment = train if augment is None else augment
    hflip = info.hflip if hflip is None else hflip
    transform = build_transform(augment, hflip=augment and hflip)
    try:
        return info.tv_class(root=str(root), train=train, transform=transform, download=False)
    except RuntimeError:
        pass  # not on disk
    if download:
        try:
            return info.tv_class(root=str(root), train=train, transform=transform, download=True)
        except Exception as error:  # network errors come in many types
            reason = f"download failed: {type(error).__name__}"
    else:
        reason = "download disabled"
    raise DatasetNotFoundError(
        f"{info.title} not found in {(root / info.folder / 'raw').resolve()} ({reason}); "
        f"pass --data-dir or set CAPSNET_DATA_DIR to a folder that holds {info.folder}/raw"
    )


def subset(dataset: Dataset, size: int | None, seed: int = 0) -> Dataset:
    """A seeded random subset of `size` examples (the whole set when size is None or larger)."""
    total = len(dataset)  # type: ignore[arg-type]
    if size is None or size >= total:
        return dataset
    if size < 1:
        raise ValueError(f"subset size must be >= 1, got {size}")
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randperm(total, generator=generator)[:size]
    return Subset(dataset, indices.tolist())


def as_tensors(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """All images (N, 1, 28, 28) in [0, 1] and labels (N,) of an un-augmented torchvision set or its Subset.

    Fast path for evaluation: reads the dataset's uint8 array instead of going
    through PIL one image at a time.
    """
    indices = None
    if isinstance(dataset, Subset):
        dataset, indices = dataset.dataset, torch.as_tensor(dataset.indices)
    images = dataset.data  # type: ignore[attr-defined]  # (N, 28, 28) uint8
    labels = torch.as_tensor(dataset.targets)  # type: ignore[attr-defined]
    if indices is not None:
        images, labels = images[indices], labels[indices]
    images = v2.functional.to_dtype(images.unsqueeze(1), torch.float32, scale=True)  # (N, 1, 28, 28), as ToDtype does
    return images, labels.long()
