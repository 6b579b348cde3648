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
import math
import os
import zlib
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
MAX_MATRIX_BYTES = 1 << 29  # the largest official file (the training photos) holds 447,897,600 bytes of data
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


def read_matrix(path: str | os.PathLike, max_bytes: int = MAX_MATRIX_BYTES) -> np.ndarray:
    """A NORB binary matrix file (`.mat`, or gzipped `.mat.gz`) as a numpy array of its stored shape and type.

    The header is read first and the data after it only up to the size it declares (at most `max_bytes`): a small
    archive that inflates to gigabytes is read no further than a real file's size.
    """
    path = Path(path)
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            start = f.read(8)
            if len(start) < 8:
                raise NorbFormatError(f"{path.name} is too short to be a NORB matrix ({len(start)} bytes)")
            magic, ndim = (int(v) for v in np.frombuffer(start, "<i4", count=2))
            if magic not in ELEMENT_TYPES:
                raise NorbFormatError(f"{path.name} is not a NORB matrix (magic number {magic & 0xFFFFFFFF:#x})")
            if not 1 <= ndim <= 16:
                raise NorbFormatError(f"{path.name} says it has {ndim} dimensions")
            sizes = f.read(4 * max(ndim, 3))
            if len(sizes) < 4 * max(ndim, 3):
                raise NorbFormatError(f"{path.name} ends inside its header")
            shape = tuple(int(s) for s in np.frombuffer(sizes, "<i4", count=ndim))
            dtype = ELEMENT_TYPES[magic]
            if any(s < 0 for s in shape):
                raise NorbFormatError(f"{path.name} says its shape is {shape}")
            count = math.prod(shape)  # Python's integers: a product of large sizes cannot wrap round
            size = count * dtype.itemsize
            if size > max_bytes:
                raise NorbFormatError(
                    f"{path.name} says it holds {shape} ({size:,} bytes), more than a smallNORB file does "
                    f"({max_bytes:,} bytes at most)"
                )
            data = f.read(size)  # no more than declared, however far the stream would go on
    except (OSError, EOFError, zlib.error) as error:  # a truncated or damaged gzip stream
        raise NorbFormatError(f"{path.name} cannot be read: {error}") from None
    if len(data) < size:
        raise NorbFormatError(
            f"{path.name} is truncated: its header says {shape} ({size} bytes of data), it holds {len(data)}"
        )
    return np.frombuffer(data, dtype, count=count).reshape(shape)


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
        if photos.shape[0] == 0:
            raise NorbFormatError(f"{stem}-dat.mat holds no images")
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
