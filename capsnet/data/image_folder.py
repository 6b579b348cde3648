"""Your own images: a folder of labelled pictures in torchvision's `ImageFolder` layout, read as a dataset.

    photos/                      photos/
        cats/  a.png b.jpg ...       train/ cats/ ... dogs/ ...
        dogs/  ...                   test/  cats/ ... dogs/ ...

One sub-folder per class (2 to 100), its name the class's name; PNG, JPEG, BMP or WebP files, grey or colour, any
size. With `train/` and `test/` sub-folders those are the splits; otherwise a seeded fifth of each class is held out
for testing (`TEST_SHARE`, `SPLIT_SEED`: the same files every time). Every picture is resized, its shorter side to
the dataset's side, then cropped to the centre square; the side is `--image-size` (the `@N` of a dataset name such as
`photos@48`), or else the median of the pictures' shorter sides, kept within `DEFAULT_SIDES`. The model reads colour
if any picture is stored in colour, else grey. Files are read through the regular-file check, each at most
`MAX_FILE_BYTES` and `MAX_PIXELS` (a decompression bomb is refused before it is decoded); hidden files are skipped,
anything else that is not a picture is one line naming it, before any training.
"""

from __future__ import annotations

import functools
import io
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset
from torchvision.transforms import v2

from capsnet.data.pictures import eight_bit
from capsnet.errors import CapsNetError
from capsnet.files import read_regular_file

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
MAX_CLASSES = 100
TEST_SHARE, SPLIT_SEED = 0.2, 0  # without train/ and test/: a fifth of each class held out, the same every time
DEFAULT_SIDES = (28, 64)  # the default side, the pictures' median shorter side, kept within these
MAX_SIDE = 256  # --image-size at most this
MAX_FILE_BYTES = 20_000_000
MAX_PIXELS = 40_000_000  # a picture larger than this (in its header) is refused before it is decoded
MAX_ASPECT = 16  # nor one whose longer side is more than this many times its shorter (a panorama is 4-6)
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


class ImageFolderError(CapsNetError, ValueError):
    """A folder that is not a dataset of labelled pictures, or a file in it that cannot be read: one line naming it."""


@dataclass(frozen=True)
class FolderSpec:
    """A folder dataset as a name says it: the folder, and the side its pictures are read at (None: the default)."""

    path: Path
    side: int | None = None

    @property
    def name(self) -> str:
        return f"{self.path}@{self.side}" if self.side else str(self.path)


def parse(name: str) -> FolderSpec | None:
    """The folder a dataset name names (`photos`, `photos@48`), or None when it names no folder."""
    stem, at, side = name.rpartition("@")
    if at and side.isdigit() and Path(stem).is_dir():
        return FolderSpec(Path(stem), int(side))
    return FolderSpec(Path(name)) if name and Path(name).is_dir() else None


def shift_for(side: int) -> int:
    """The training shifts, in pixels per axis, of pictures read at `side`: a tenth of the side (3 at 32, 4 at 48, 6 at
    64), at least the paper's 2 pixels of 28: a few hundred pictures need more variety than MNIST's 60,000."""
    return max(2, side // 10)


def with_side(name: str, side: int) -> str:
    """`name` (a folder, with or without a side) read at `side`: `photos@48`. A name only: whether the folder is
    there is the reader's to say."""
    if not 8 <= side <= MAX_SIDE:
        raise ImageFolderError(f"--image-size must lie in 8..{MAX_SIDE}, got {side}")
    stem, at, old = name.rpartition("@")
    return f"{stem if at and old.isdigit() else name}@{side}"


@dataclass(frozen=True)
class Scan:
    """What a folder holds: its classes, each split's files and labels, whether any picture is in colour, the side."""

    classes: tuple[str, ...]
    files: dict[bool, tuple[Path, ...]]  # by split (True: training)
    labels: dict[bool, tuple[int, ...]]
    colour: bool
    side: int
    held_out: bool  # the test split is a seeded share of each class (no train/ and test/ folders)


def _pictures(folder: Path) -> list[Path]:
    """The picture files of a class folder, sorted; ImageFolderError for anything else in it."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue  # .DS_Store and the like
        if entry.is_dir():
            raise ImageFolderError(
                f"{entry} is a folder inside a class folder: put each class's pictures directly in it"
            )
        if entry.suffix.lower() not in EXTENSIONS:
            raise ImageFolderError(f"{entry} is not a picture ({', '.join(e[1:].upper() for e in EXTENSIONS[:3])}, "
                                   "BMP or WebP)")  # fmt: skip
        found.append(entry)
    if not found:
        raise ImageFolderError(f"{folder} holds no pictures: each class needs at least two")
    return found


def _classes(root: Path) -> dict[str, list[Path]]:
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    loose = sorted(p.name for p in root.iterdir() if p.is_file() and not p.name.startswith("."))
    if not folders:
        raise ImageFolderError(
            f"{root} holds no class folders: put each class's pictures in a sub-folder named after it"
        )
    if loose:
        raise ImageFolderError(f"{root / loose[0]} lies outside the class folders: every picture goes in its class's")
    if len(folders) < 2:
        raise ImageFolderError(f"{root} holds one class ({folders[0].name}): at least two are needed")
    if len(folders) > MAX_CLASSES:
        raise ImageFolderError(f"{root} holds {len(folders)} classes: at most {MAX_CLASSES} are read")
    return {p.name: _pictures(p) for p in folders}


def _header(path: Path) -> tuple[tuple[int, int], str]:
    """A picture's size and mode from its header (nothing decoded); ImageFolderError naming it when unreadable."""
    try:
        data = read_regular_file(path, MAX_FILE_BYTES)
        with Image.open(io.BytesIO(data)) as image:
            size, mode = image.size, image.mode
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as error:
        raise ImageFolderError(f"{path} cannot be read as a picture ({error})") from None
    check_size(size, str(path))
    return size, mode


def check_size(size: tuple[int, int], name: str) -> None:
    """Refuse, from its header and before it is decoded, a picture past `MAX_PIXELS` or longer than `MAX_ASPECT`
    times its width: its shorter side is resized to the network's, so a 40,000,000 x 1 picture under the pixel bound
    would ask for billions of pixels there."""
    width, height = size
    if width * height > MAX_PIXELS:
        raise ImageFolderError(f"{name} is {width}x{height} pixels: at most {MAX_PIXELS:,} are read")
    if min(width, height) < 1 or max(width, height) > MAX_ASPECT * min(width, height):
        raise ImageFolderError(
            f"{name} is {width}x{height} pixels: a picture's sides may differ {MAX_ASPECT} times at most"
        )


@functools.lru_cache(maxsize=8)
def _scan(root: Path, side: int | None, stamp: float) -> Scan:
    del stamp  # part of the cache's key only: a folder changed since is scanned again
    split = (root / "train").is_dir() and (root / "test").is_dir()
    if split:
        train, test = _classes(root / "train"), _classes(root / "test")
        if set(train) != set(test):
            raise ImageFolderError(f"{root}: train/ and test/ hold different classes "
                                   f"({', '.join(sorted(set(train) ^ set(test)))} in one only)")  # fmt: skip
    else:
        every = _classes(root)
        train, test = {}, {}
        generator = np.random.default_rng(SPLIT_SEED)
        for name, pictures in every.items():
            if len(pictures) < 2:
                raise ImageFolderError(f"{root / name} holds one picture: each class needs two, one held out to test")
            order = generator.permutation(len(pictures))
            held = max(1, round(TEST_SHARE * len(pictures)))
            test[name] = [pictures[i] for i in sorted(order[:held])]
            train[name] = [pictures[i] for i in sorted(order[held:])]
    classes = tuple(sorted(train))
    files: dict[bool, list[Path]] = {True: [], False: []}
    labels: dict[bool, list[int]] = {True: [], False: []}
    for is_train, split_classes in ((True, train), (False, test)):
        for k, name in enumerate(classes):
            files[is_train] += split_classes[name]
            labels[is_train] += [k] * len(split_classes[name])
    headers = [_header(p) for p in files[True] + files[False]]
    colour = any(mode not in GREY_MODES for _, mode in headers)
    median = statistics.median_low(min(size) for size, _ in headers)  # a side some pictures have
    chosen = side or min(max(median, DEFAULT_SIDES[0]), DEFAULT_SIDES[1])
    return Scan(classes, {k: tuple(v) for k, v in files.items()}, {k: tuple(v) for k, v in labels.items()}, colour,
                chosen, held_out=not split)  # fmt: skip


def scan(spec: FolderSpec) -> Scan:
    """The folder's classes, splits and side (cached until the folder changes); ImageFolderError naming what is wrong."""
    root = spec.path.resolve()
    try:
        folders = [p for p in root.iterdir() if p.is_dir()]  # the class folders, or train/ and test/ and theirs
        folders += [q for p in folders if p.name in ("train", "test") for q in p.iterdir() if q.is_dir()]
        stamp = max([root.stat().st_mtime] + [p.stat().st_mtime for p in folders])
    except OSError as error:
        raise ImageFolderError(f"{spec.path} cannot be read: {error.strerror or error}") from None
    return _scan(root, spec.side, stamp)


def read_picture(path: Path, side: int, colour: bool) -> torch.Tensor:
    """One picture file as the networks read it: (C, side, side) uint8 (`picture_from_bytes`, which refuses a bomb);
    the file is read once."""
    try:
        data = read_regular_file(path, MAX_FILE_BYTES)  # a FIFO, a device or a folder is refused before it is opened
    except OSError as error:
        raise ImageFolderError(f"{path} cannot be read as a picture ({error})") from None
    return picture_from_bytes(data, side, colour, str(path))


def picture_from_bytes(data: bytes, side: int, colour: bool, name: str = "the picture") -> torch.Tensor:
    """A picture's bytes as the networks read them: (C, side, side) uint8, its shorter side resized to `side`, then
    cropped to the centre square (an upload made like a folder's pictures); ImageFolderError naming it otherwise."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            check_size(image.size, name)
            picture = eight_bit(image).convert("RGB" if colour else "L")  # a truncated file fails as it is decoded
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError) as error:
        if isinstance(error, ImageFolderError):
            raise
        raise ImageFolderError(f"{name} cannot be read as a picture ({error})") from None
    tensor = torch.from_numpy(np.asarray(picture, dtype=np.uint8).copy())  # (H, W) or (H, W, 3)
    tensor = tensor[None] if tensor.dim() == 2 else tensor.permute(2, 0, 1)  # (C, H, W)
    tensor = v2.functional.resize(tensor, [side], antialias=True)  # the shorter side to `side`
    return v2.functional.center_crop(tensor, [side, side])  # (C, side, side)


class FolderImages(Dataset):
    """A folder's split as a torchvision-style dataset: `data` (N, C, S, S) uint8 and `targets` (N,) long, every
    picture decoded once; each item is the transformed picture (a PIL image) and its class."""

    def __init__(self, spec: FolderSpec, train: bool = True, transform: Callable | None = None) -> None:
        found = scan(spec)
        self.transform, self.classes = transform, list(found.classes)
        pictures = [read_picture(p, found.side, found.colour) for p in found.files[train]]
        self.data = torch.stack(pictures)  # (N, C, S, S)
        self.targets = torch.tensor(found.labels[train], dtype=torch.long)  # (N,)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        picture = self.data[index]
        image = Image.fromarray(picture[0].numpy() if len(picture) == 1 else picture.permute(1, 2, 0).numpy())
        return (self.transform(image) if self.transform else image), int(self.targets[index])
