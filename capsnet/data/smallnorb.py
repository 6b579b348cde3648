"""smallNORB, the EM paper's dataset, read from the official binary files where a user has them.

LeCun, Huang & Bottou (2004), "Learning methods for generic object recognition with invariance to pose and
lighting", CVPR. https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/

Toy figures of five categories (animal, human, airplane, truck, car), photographed by two cameras at 9 elevations,
18 azimuths and 6 lightings: 24,300 stereo pairs of 96x96 grey images for training (instances 4, 6, 7, 8, 9 of each
category) and 24,300 for testing (instances 0, 1, 2, 3, 5). Nothing of it ships with the project and it cannot be
downloaded at run time here: put the files, as published (`.mat`, or `.mat.gz` as they come), in
`<data dir>/smallNORB/raw/`. The EM paper (Hinton, Sabour & Frosst 2018, section 5) reaches 1.8% test error on it.

How the networks read it, as in the EM paper: the first camera's image, downsampled to 48x48 (`STORED_SIZE`, 2x2
averages); a random 32x32 crop in training (`capsnet.training.train_data`: a shift of up to 8 pixels, then the
centre crop), the centre 32x32 for testing (`capsnet.data.datasets.as_tensors`). The paper's random brightness
and contrast are not applied.

The file format (the "binary matrix" of the NORB page): little-endian int32 magic number, which says the element
type; int32 number of dimensions n; max(n, 3) int32 sizes (only the first n count); the elements, row-major.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

URL = "https://cs.nyu.edu/~ylclab/data/norb-v1.0-small/"
CLASSES = ("animal", "human", "airplane", "truck", "car")
PHOTO_SIZE = 96  # the published images
STORED_SIZE = 48  # what is kept: the EM paper's downsampling
INPUT_SIZE = 32  # what the networks read: a crop of it
SPLITS = {True: "smallnorb-5x46789x9x18x6x2x96x96-training", False: "smallnorb-5x01235x9x18x6x2x96x96-testing"}
# the magic number of each element type (the NORB page's "binary matrix" format)
ELEMENT_TYPES: dict[int, np.dtype] = {
    0x1E3D4C51: np.dtype("<f4"),
    0x1E3D4C53: np.dtype("<f8"),
    0x1E3D4C54: np.dtype("<i4"),
    0x1E3D4C55: np.dtype("u1"),
    0x1E3D4C56: np.dtype("<i2"),
}


class NorbFormatError(ValueError):
    """A file is not a NORB binary matrix, or ends before its header says it should."""


def read_matrix(path: str | os.PathLike) -> np.ndarray:
    """A NORB binary matrix file (`.mat`, or gzipped `.mat.gz`) as a numpy array of its stored shape and type."""
    path = Path(path)
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as error:  # a truncated or damaged gzip stream
        raise NorbFormatError(f"{path.name} cannot be read: {error}") from None
    if len(raw) < 8:
        raise NorbFormatError(f"{path.name} is too short to be a NORB matrix ({len(raw)} bytes)")
    magic, ndim = np.frombuffer(raw, "<i4", count=2)
    if int(magic) not in ELEMENT_TYPES:
        raise NorbFormatError(f"{path.name} is not a NORB matrix (magic number {int(magic) & 0xFFFFFFFF:#x})")
    if not 1 <= ndim <= 16:
        raise NorbFormatError(f"{path.name} says it has {int(ndim)} dimensions")
    header = 8 + 4 * max(int(ndim), 3)
    if len(raw) < header:
        raise NorbFormatError(f"{path.name} ends inside its header")
    shape = tuple(int(s) for s in np.frombuffer(raw, "<i4", count=int(ndim), offset=8))
    dtype = ELEMENT_TYPES[int(magic)]
    count = int(np.prod(shape))
    if any(s < 0 for s in shape) or len(raw) - header < count * dtype.itemsize:
        raise NorbFormatError(
            f"{path.name} is truncated: its header says {shape} ({count * dtype.itemsize} bytes of data), "
            f"it holds {len(raw) - header}"
        )
    return np.frombuffer(raw, dtype, count=count, offset=header).reshape(shape)


def _find(raw: Path, name: str) -> Path:
    """`name` in `raw`, or its gzipped copy as published; FileNotFoundError when neither is there."""
    for candidate in (raw / name, raw / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{name} (or {name}.gz) not in {raw}")


def downsample(photos: np.ndarray) -> Tensor:
    """(N, 96, 96) uint8 photos -> (N, 48, 48) uint8, each pixel the rounded mean of a 2x2 block."""
    n = photos.shape[0]
    blocks = torch.from_numpy(np.ascontiguousarray(photos)).view(n, STORED_SIZE, 2, STORED_SIZE, 2)
    return blocks.float().mean(dim=(2, 4)).round().to(torch.uint8)  # (N, 48, 48)


class SmallNORB(Dataset):
    """smallNORB as a torchvision-style dataset: `data` (N, 48, 48) uint8, `targets` (N,) long, and for each item
    the transformed 48x48 image (a PIL image handed to `transform`) and its category.

    `root` holds `smallNORB/raw/` with the split's `-dat.mat` and `-cat.mat` files. Raises FileNotFoundError when
    they are absent, NorbFormatError when they cannot be read, and RuntimeError when asked to download (the files
    are published at `URL`, but this package never fetches them).
    """

    folder = "smallNORB"
    # the files a split needs, as torchvision lists its downloads (URL, checksum): names only are read from it
    resources = [(f"{URL}{SPLITS[train]}-{part}.mat.gz", None) for train in (True, False) for part in ("dat", "cat")]

    def __init__(
        self, root: str | os.PathLike, train: bool = True, transform: Callable | None = None, download: bool = False
    ) -> None:
        if download:
            raise RuntimeError(f"smallNORB is not downloaded by this package: fetch it from {URL}")
        self.train, self.transform = train, transform
        raw = Path(root) / self.folder / "raw"
        stem = SPLITS[train]
        photos = read_matrix(_find(raw, f"{stem}-dat.mat"))  # (N, 2, 96, 96) uint8: both cameras
        categories = read_matrix(_find(raw, f"{stem}-cat.mat"))  # (N,) int32
        if photos.ndim != 4 or photos.shape[1:] != (2, PHOTO_SIZE, PHOTO_SIZE) or photos.dtype != np.uint8:
            raise NorbFormatError(f"{stem}-dat.mat holds {photos.dtype} {photos.shape}, not (N, 2, 96, 96) bytes")
        if categories.shape != (photos.shape[0],):
            raise NorbFormatError(f"{stem}-cat.mat holds {categories.shape} labels for {photos.shape[0]} images")
        if categories.size and not 0 <= int(categories.min()) <= int(categories.max()) < len(CLASSES):
            raise NorbFormatError(f"{stem}-cat.mat holds categories outside 0..{len(CLASSES) - 1}")
        self.data = downsample(photos[:, 0])  # the first camera: (N, 48, 48)
        self.targets = torch.from_numpy(categories.astype(np.int64))  # (N,)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        image = Image.fromarray(self.data[index].numpy(), mode="L")
        return (self.transform(image) if self.transform else image), int(self.targets[index])
