"""CIFAR-10, read from its official binary version where a user has it: never from the pickled Python version.

Krizhevsky (2009), "Learning Multiple Layers of Features from Tiny Images". https://www.cs.toronto.edu/~kriz/cifar.html

60,000 colour images of 32x32 in ten classes, 50,000 for training (five batch files) and 10,000 for testing. The
CapsNet paper (Sabour, Frosst & Hinton 2017, section 7) reaches 10.6% test error on it with an ensemble of seven
models, each with 64 primary capsule types and a "none-of-the-above" class. Nothing of it ships with the project and
it is not downloaded here: unpack `cifar-10-binary.tar.gz` into the data folder, which gives
`<data dir>/cifar-10-batches-bin/` (`data_batch_1.bin` .. `data_batch_5.bin`, `test_batch.bin`, `batches.meta.txt`).

The binary format: records of one label byte (0-9) then 3,072 pixel bytes, the red plane, then the green, then the
blue, each 32x32 row-major. Reading it is reading bytes: no file runs code (the Python version's pickles would).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from capsnet.files import read_regular_file

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
FOLDER = "cifar-10-batches-bin"  # as the archive unpacks
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SIDE, CHANNELS = 32, 3
RECORD = 1 + CHANNELS * SIDE * SIDE  # 3,073 bytes: the label, then the pixels
SPLITS = {True: tuple(f"data_batch_{n}.bin" for n in range(1, 6)), False: ("test_batch.bin",)}
MAX_BATCH_BYTES = 10_000 * RECORD  # an official batch file holds 10,000 records: a longer file is not one


class CifarFormatError(ValueError):
    """A file is not a CIFAR-10 binary batch (its length, or a label outside 0-9)."""


def read_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One binary batch file: its images (N, 3, 32, 32) uint8 and labels (N,) uint8; read through the regular-file
    check, no further than an official file's size."""
    path = Path(path)
    try:
        raw = read_regular_file(path, MAX_BATCH_BYTES)
    except OSError as error:  # too large, a FIFO or a device, unreadable
        raise CifarFormatError(f"{path.name} cannot be read: {error}") from None
    if not raw or len(raw) % RECORD:
        raise CifarFormatError(
            f"{path.name} holds {len(raw):,} bytes, not whole records of {RECORD:,} (a label byte and 3,072 pixels)"
        )
    records = np.frombuffer(raw, np.uint8).reshape(-1, RECORD)  # (N, 3073)
    labels = records[:, 0]
    if int(labels.max()) >= len(CLASSES):
        raise CifarFormatError(f"{path.name} holds a label {int(labels.max())}, outside 0..{len(CLASSES) - 1}")
    return records[:, 1:].reshape(-1, CHANNELS, SIDE, SIDE), labels  # (N, 3, 32, 32), (N,)


class CIFAR10(Dataset):
    """CIFAR-10 as a torchvision-style dataset: `data` (N, 3, 32, 32) uint8, `targets` (N,) long, and for each item
    the transformed image (a PIL RGB image handed to `transform`) and its class.

    `root` holds `cifar-10-batches-bin/`. Raises FileNotFoundError when a split's files are absent, CifarFormatError
    when one cannot be read, and RuntimeError when asked to download (this package never fetches it).
    """

    folder = FOLDER
    # the files a split needs, as torchvision lists its downloads (URL, checksum): names only are read from it
    resources = [(name, None) for train in (True, False) for name in SPLITS[train]]

    def __init__(
        self, root: str | os.PathLike, train: bool = True, transform: Callable | None = None, download: bool = False
    ) -> None:
        if download:
            raise RuntimeError(f"CIFAR-10 is not downloaded by this package: fetch its binary version from {URL}")
        self.train, self.transform = train, transform
        folder = Path(root) / FOLDER
        missing = [name for name in SPLITS[train] if not (folder / name).exists()]  # a FIFO there: damaged, below
        if missing:
            raise FileNotFoundError(f"{', '.join(missing)} not in {folder}")
        images, labels = zip(*(read_batch(folder / name) for name in SPLITS[train]), strict=True)
        self.data = torch.from_numpy(np.concatenate(images))  # (N, 3, 32, 32)
        self.targets = torch.from_numpy(np.concatenate(labels).astype(np.int64))  # (N,)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        image = Image.fromarray(self.data[index].permute(1, 2, 0).numpy(), mode="RGB")  # (32, 32, 3)
        return (self.transform(image) if self.transform else image), int(self.targets[index])
