"""Datasets: MNIST and Fashion-MNIST through `torchvision.datasets`, the sets made from MNIST, smallNORB and CIFAR-10.

The data root is `--data-dir`, else the environment variable CAPSNET_DATA_DIR,
else `./data`. Pixels are floats in [0, 1]. Training takes the stored uint8 arrays
whole (`stored_tensors`) and augments them a batch at a time (`capsnet.data.augment`).
MultiMNIST overlays two digits on 36x36 (`capsnet.data.multimnist`); "mnist-40" is the paper's
setting for affNIST (section 5.2): each digit anywhere on a 40x40 canvas (`placed`). smallNORB, the EM paper's
dataset, is read from its official files where a user has them (`capsnet.data.smallnorb`): stored 48x48, read
as 32x32 crops. CIFAR-10, colour 32x32 photos, is read from its official binary version (`capsnet.data.cifar10`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import Dataset, Subset
from torchvision import datasets
from torchvision.transforms import v2

from capsnet.data import cifar10, image_folder, smallnorb
from capsnet.data.augment import shift_and_flip
from capsnet.errors import CapsNetError, InvalidArgumentError


class DatasetNotFoundError(CapsNetError):
    """The dataset is not on disk and could not be downloaded."""


class DatasetDamagedError(CapsNetError):
    """The dataset's files are on disk but cannot be read (truncated, or not the dataset)."""


@dataclass(frozen=True)
class DatasetInfo:
    """What the package knows about a dataset it can train on."""

    name: str  # the CLI name
    title: str
    folder: str  # torchvision's folder under the root
    classes: tuple[str, ...]
    hflip: bool  # horizontal flips are label-preserving for this dataset
    # the reader: torchvision's (or, for smallNORB, CIFAR-10's binary version and a folder, this package's)
    tv_class: type[datasets.MNIST] | type[smallnorb.SmallNORB] | type[cifar10.CIFAR10] | None  # None for a folder
    noun: str = "item"  # what one example is called: "Draw a digit", "the predicted item"
    image_size: int = 28  # the side of the network's input
    pairs: bool = False  # MultiMNIST: each example overlays two digits of different classes (capsnet.data.multimnist)
    shift: int = 2  # training shifts in pixels per axis: the paper's 2, or anywhere on a larger canvas
    stored_size: int = 28  # the side of the stored images; larger than image_size: the networks read crops of them
    source: str = ""  # where to get the files when they cannot be downloaded here (named when they are missing)
    channels: int = 1  # 1 grey, 3 colour (RGB)
    subfolder: str = "raw"  # where the files lie under `folder` ("" for CIFAR-10, as its archive unpacks)
    own: image_folder.FolderSpec | None = None  # a folder of the user's own pictures (`capsnet.data.image_folder`)

    @property
    def num_classes(self) -> int:
        return len(self.classes)


DIGITS = tuple(str(d) for d in range(10))
DATASETS: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo("mnist", "MNIST", "MNIST", DIGITS, hflip=False, tv_class=datasets.MNIST, noun="digit"),
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
    # two MNIST digits of different classes overlaid on 36x36, made from MNIST's own files
    "multimnist": DatasetInfo(
        "multimnist",
        "MultiMNIST",
        "MNIST",
        DIGITS,
        hflip=False,
        tv_class=datasets.MNIST,
        noun="pair of digits",
        image_size=36,
        pairs=True,
    ),  # fmt: skip
    # section 5.2: MNIST padded to 40x40 and moved anywhere on it, to be tested on affNIST (capsnet.readings.affnist)
    "mnist-40": DatasetInfo(
        "mnist-40",
        "MNIST on 40x40",
        "MNIST",
        DIGITS,
        hflip=False,
        tv_class=datasets.MNIST,
        noun="digit",
        image_size=40,
        shift=6,
    ),  # fmt: skip
    # the EM paper's dataset (section 5): five categories of toys, 48x48 photos read as 32x32 crops (random in
    # training, the centre in testing); never downloaded, read where a user has the official files
    "smallnorb": DatasetInfo(
        "smallnorb",
        "smallNORB",
        smallnorb.SmallNORB.folder,
        smallnorb.CLASSES,
        hflip=False,
        tv_class=smallnorb.SmallNORB,
        noun="photo",
        image_size=smallnorb.INPUT_SIZE,
        shift=(smallnorb.STORED_SIZE - smallnorb.INPUT_SIZE) // 2,
        stored_size=smallnorb.STORED_SIZE,
        source=smallnorb.URL,
    ),  # fmt: skip
    # colour photos of ten classes (the CapsNet paper, section 7), read from the official binary version only
    "cifar10": DatasetInfo(
        "cifar10",
        "CIFAR-10",
        cifar10.FOLDER,
        cifar10.CLASSES,
        hflip=True,
        tv_class=cifar10.CIFAR10,
        noun="image",
        image_size=cifar10.SIDE,
        stored_size=cifar10.SIDE,
        source=cifar10.URL,
        channels=cifar10.CHANNELS,
        subfolder="",
    ),  # fmt: skip
}


def dataset_info(name: str) -> DatasetInfo:
    """The `DatasetInfo` of `name`, a known dataset or a folder of pictures (`photos`, `photos@48`: its side); a
    ValueError that lists the known ones for another name."""
    if name not in DATASETS:
        spec = image_folder.parse(name)
        if spec is None:
            raise InvalidArgumentError(
                f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}, or name a folder of labelled pictures"
            )
        return _folder_info(spec)
    return DATASETS[name]


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """`data_dir` if given, else $CAPSNET_DATA_DIR, else ./data."""
    if data_dir:
        return Path(data_dir)
    return Path(os.environ.get("CAPSNET_DATA_DIR") or "data")


TO_TENSOR = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])  # PIL -> (1, 28, 28) in [0, 1]


def load_dataset(
    name: str,
    train: bool,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
) -> Dataset:
    """A torchvision dataset whose items are (1, 28, 28) float tensors in [0, 1] and integer labels.

    Raises DatasetNotFoundError, with the folder searched and how to fix it, if the
    files are absent and cannot be downloaded, and DatasetDamagedError if they are there
    but cannot be read.
    """
    info = dataset_info(name)
    if info.own is not None:  # the user's folder: read from where it is named, never from the data folder
        return image_folder.FolderImages(info.own, train=train, transform=TO_TENSOR)
    reader = info.tv_class
    assert reader is not None  # every named dataset has its reader
    root = resolve_data_dir(data_dir)
    raw = root / info.folder / info.subfolder
    files = [raw / f for f in _raw_files(info)]  # torchvision wants all four, whichever split it loads
    try:
        return reader(root=str(root), train=train, transform=TO_TENSOR, download=False)
    except (smallnorb.NorbFormatError, cifar10.CifarFormatError) as error:  # these readers name the file and fault
        raise DatasetDamagedError(f"{info.title} in {raw.resolve()} is damaged: {error}; replace it with an intact "
                                  "copy") from None  # fmt: skip
    except (RuntimeError, AssertionError, ValueError, OSError) as error:
        if all(f.is_file() for f in files):  # torchvision found its files but could not read them
            prefix = "train" if train else "t10k"
            names = " or ".join(f.name for f in files if f.name.startswith(prefix))
            raise DatasetDamagedError(
                f"{info.title} in {raw.resolve()} is damaged: {names} cannot be read "
                f"({type(error).__name__}{': ' + str(error) if str(error) else ''}); "
                "replace the files with intact copies"
            ) from None
    if download and not info.source:  # a dataset with a `source` is never downloaded here: the user fetches it
        try:
            return reader(root=str(root), train=train, transform=TO_TENSOR, download=True)
        except Exception as error:  # network errors come in many types
            reason = f"download failed: {type(error).__name__}"
    else:
        reason = "this package does not download it" if info.source else "download disabled"
    archives = [f.with_name(f.name + ".gz") for f in files]
    if any(a.is_file() for a in archives) and not all(f.is_file() for f in files):  # there, but would not unpack
        present = ", ".join(a.name for a in archives if a.is_file())
        raise DatasetDamagedError(
            f"{info.title} in {raw.resolve()} is damaged: {present} could not be unpacked (incomplete or corrupted "
            f"archives; {reason}); replace them with intact copies"
        )
    fetch = f"; its files are published at {info.source}" if info.source else ""
    where = f"{info.folder}/{info.subfolder}".rstrip("/")
    raise DatasetNotFoundError(
        f"{info.title} not found in {raw.resolve()} ({reason}); "
        f"pass --data-dir or set CAPSNET_DATA_DIR to a folder that holds {where}{fetch}"
    )


def _folder_info(spec: image_folder.FolderSpec) -> DatasetInfo:
    """A folder's `DatasetInfo`: its classes, side and channels from its pictures (ImageFolderError, one line)."""
    found = image_folder.scan(spec)
    return DatasetInfo(
        spec.name, spec.path.resolve().name, str(spec.path), found.classes, hflip=False,
        tv_class=None, noun="image", image_size=found.side, stored_size=found.side, shift=image_folder.shift_for(found.side),
        channels=3 if found.colour else 1, subfolder="", own=spec,
    )  # fmt: skip


def _raw_files(info: DatasetInfo) -> list[str]:
    """The uncompressed files torchvision looks for, e.g. t10k-images-idx3-ubyte."""
    return [Path(url).name.removesuffix(".gz") for url, _ in getattr(info.tv_class, "resources", [])]


def subset(dataset: Dataset, size: int | None, seed: int = 0) -> Dataset:
    """A seeded random subset of `size` examples (the whole set when size is None or larger)."""
    total = len(dataset)  # type: ignore[arg-type]  # torch's Dataset declares no __len__; every set here has one
    if size is None or size >= total:
        return dataset
    if size < 1:
        raise ValueError(f"subset size must be >= 1, got {size}")
    generator = torch.Generator().manual_seed(seed)
    indices = torch.randperm(total, generator=generator)[:size]
    return Subset(dataset, indices.tolist())


def stored_tensors(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """The stored uint8 images (N, C, H, W) and labels (N,) of a torchvision set or its Subset, read whole.

    Reads the dataset's arrays instead of going through PIL one image at a time.
    """
    indices = None
    while isinstance(dataset, Subset):  # a subset of a subset (a validation split, then --train-size): compose
        inner = torch.as_tensor(dataset.indices)
        indices = inner if indices is None else inner[indices]
        dataset = dataset.dataset
    images = dataset.data  # type: ignore[attr-defined]  # (N, H, W) uint8 grey, or (N, C, H, W) (CIFAR-10's reader)
    labels = torch.as_tensor(dataset.targets)  # type: ignore[attr-defined]  # (torch's Dataset declares neither)
    if indices is not None:
        images, labels = images[indices], labels[indices]
    if images.dim() == 3:
        images = images.unsqueeze(1)  # (N, 1, H, W)
    return images, labels.long()  # (N, C, H, W), (N,)


def as_tensors(dataset: Dataset, image_size: int = 28, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """All images (N, 1, 28, 28) as floats in [0, 1], as TO_TENSOR makes them, and labels (N,).

    With a larger `image_size` (a dataset's `DatasetInfo.image_size`), each image lies at its own
    random position on that canvas, seeded by `seed`: the test set of "mnist-40". With a smaller one, each
    image's centre crop: the test set of smallNORB.
    """
    images, labels = stored_tensors(dataset)
    if image_size < images.shape[-1]:
        images = centre_crop(images, image_size)
    elif image_size != images.shape[-1]:
        images = placed(images, image_size, seed)
    return v2.functional.to_dtype(images, torch.float32, scale=True), labels


def placed(digits: torch.Tensor, size: int, seed: int | None = None) -> torch.Tensor:
    """Images (N, C, h, w) on a size x size canvas of zeros: centred, or each anywhere it fits (seeded by `seed`)."""
    n, _, h, w = digits.shape
    if size < max(h, w):
        raise ValueError(f"cannot place {h}x{w} images on a {size}x{size} canvas")
    top, left = (size - h) // 2, (size - w) // 2
    canvas = torch.nn.functional.pad(digits, (left, size - w - left, top, size - h - top))  # (N, C, size, size)
    if seed is None:
        return canvas
    room = min(top, left)  # the move that keeps a centred image on the canvas
    offsets = torch.randint(-room, room + 1, (n, 2), generator=torch.Generator().manual_seed(seed))
    return shift_and_flip(canvas, offsets, shift=room)


def centre_crop(images: torch.Tensor, size: int) -> torch.Tensor:
    """The centre size x size of images (N, C, H, W): (N, C, size, size)."""
    h, w = images.shape[-2:]
    if size > min(h, w):
        raise ValueError(f"cannot crop {size}x{size} from {h}x{w} images")
    top, left = (h - size) // 2, (w - size) // 2
    return images[..., top : top + size, left : left + size]
