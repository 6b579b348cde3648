"""Your own pictures: folders of real images written by the tests, grey (Fashion-MNIST's test items as PNG
files) and colour (MNIST digits tinted per class on coloured grounds, at several sizes, PNG and JPEG), read as
datasets and trained on by each network family from the command line; every fault one line before any training."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from capsnet.data import image_folder
from capsnet.data.datasets import dataset_info, load_dataset, stored_tensors
from capsnet.data.tasks import read_test_set
from tests.cli_support import capsnet

GROUNDS = [(200, 40, 40), (40, 160, 40), (40, 60, 200), (200, 180, 30)]  # a coloured ground per class


def _digits(data_dir: Path, name: str, per_class: int, classes: int) -> list[tuple[np.ndarray, int]]:
    """The first `per_class` test images of each of the first `classes` classes: (28, 28) uint8 and the class."""
    images, labels = stored_tensors(load_dataset(name, train=False, data_dir=data_dir))
    chosen = []
    for k in range(classes):
        for index in torch.nonzero(labels == k).flatten()[:per_class].tolist():
            chosen.append((images[index, 0].numpy(), k))
    return chosen


@pytest.fixture(scope="module")
def grey_folder(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fashion-MNIST's first 12 test items of each class as PNG files, one folder per class (its name sanitised)."""
    root = tmp_path_factory.mktemp("grey") / "fashion"
    names = dataset_info("fashion-mnist").classes
    for n, (picture, k) in enumerate(_digits(data_dir, "fashion-mnist", 12, 10)):
        folder = root / names[k].replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(picture, mode="L").save(folder / f"{n}.png")
    (root / "Sandal" / ".DS_Store").write_bytes(b"\0\1")  # hidden files are skipped
    return root


@pytest.fixture(scope="module")
def colour_folder(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MNIST's digits 0-3 as colour pictures: each class's ground its own colour, the digit's ink white over it,
    alternately 32x32 PNG and 48x48 JPEG (so the reader resizes), in train/ and test/ folders."""
    root = tmp_path_factory.mktemp("colour") / "tinted"
    for n, (digit, k) in enumerate(_digits(data_dir, "mnist", 30, 4)):
        canvas = np.zeros((32, 32, 3), np.float32) + np.asarray(GROUNDS[k], np.float32)
        ink = np.pad(digit, 2).astype(np.float32)[..., None] / 255  # (32, 32, 1)
        picture = Image.fromarray((canvas * (1 - ink) + 255 * ink).round().astype(np.uint8), mode="RGB")
        split = "test" if n % 30 >= 24 else "train"
        folder = root / split / f"digit {k}"
        folder.mkdir(parents=True, exist_ok=True)
        if n % 2:
            picture.resize((48, 48), Image.Resampling.BILINEAR).save(folder / f"{n}.jpg", quality=95)
        else:
            picture.save(folder / f"{n}.png")
    return root


def test_a_grey_folder_reads_as_its_classes_with_a_seeded_fifth_held_out(grey_folder: Path) -> None:
    info = dataset_info(str(grey_folder))
    assert info.classes == tuple(sorted(n.replace("/", "-") for n in dataset_info("fashion-mnist").classes))
    assert (info.channels, info.image_size, info.title) == (1, 28, "fashion")
    found = image_folder.scan(image_folder.FolderSpec(grey_folder))
    assert found.held_out and len(found.files[False]) == 10 * 2  # round(0.2 x 12) of each class
    assert not set(found.files[True]) & set(found.files[False])  # no picture in both splits
    assert image_folder.scan(image_folder.FolderSpec(grey_folder)).files == found.files  # the same split every time
    test = read_test_set(str(grey_folder))
    assert test.images.shape == (20, 1, 28, 28) and sorted(set(test.labels.tolist())) == list(range(10))
    written = np.asarray(Image.open(found.files[False][0]))  # read back as written: 28x28, no resize
    assert np.array_equal((test.images[0, 0] * 255).round().byte().numpy(), written)


def test_a_colour_folder_is_colour_and_resized_to_its_side(colour_folder: Path) -> None:
    info = dataset_info(f"{colour_folder}@24")
    assert (info.channels, info.image_size, info.classes) == (3, 24, ("digit 0", "digit 1", "digit 2", "digit 3"))
    assert dataset_info(str(colour_folder)).image_size == 32  # the median shorter side of 32s and 48s, kept in 28..64
    test = read_test_set(f"{colour_folder}@24")
    assert test.images.shape == (24, 3, 24, 24)
    ground = test.images[:, :, 1, 1]  # a corner: the class's ground colour
    for k, colour in enumerate(GROUNDS):
        assert torch.allclose(ground[test.labels == k].mean(0), torch.tensor(colour) / 255, atol=0.05)


@pytest.mark.parametrize("network", ["capsnet", "cnn", "em"])
def test_each_family_trains_on_a_colour_folder(colour_folder: Path, tmp_path: Path, network: str) -> None:
    from capsnet.checkpoints.checkpoint import load_checkpoint

    out = tmp_path / "run"
    done = capsnet("train", "--dataset", colour_folder, "--image-size", "32", "--network", network, "--preset",
                   "tiny", "--epochs", "1", "--no-compile", "--no-progress", "--out", out)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    model = load_checkpoint(out / "best.safetensors")
    assert (model.config.in_channels, model.config.image_size, model.config.num_classes) == (3, 32, 4)
    assert model.info.dataset == f"{colour_folder}@32" and model.info.class_names[0] == "digit 0"
    evaluated = capsnet("evaluate", out / "best.safetensors", "--json")
    assert evaluated.returncode == 0 and '"total": 24' in evaluated.stdout, evaluated.stderr


@pytest.mark.parametrize("network", ["capsnet", "cnn", "em"])
def test_a_grey_folder_trains_each_family_at_its_own_side_and_names_it(
    grey_folder: Path, tmp_path: Path, network: str
) -> None:
    out = tmp_path / "run"
    done = capsnet("train", "--dataset", grey_folder, "--network", network, "--preset", "tiny", "--epochs", "1",
                   "--no-progress", "--no-compile", "--out", out)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    from capsnet.checkpoints.checkpoint import read_checkpoint_info

    config, info = read_checkpoint_info(out / "best.safetensors")
    assert (config.in_channels, config.image_size, info.dataset) == (1, 28, f"{grey_folder}@28")


def _broken(root: Path, fault: str) -> str:
    """Make a folder with one fault in it; return what the one line must say."""
    for k in range(2):
        (root / f"c{k}").mkdir(parents=True)
        for n in range(3):
            Image.new("L", (28, 28), 40 * n).save(root / f"c{k}" / f"{n}.png")
    if fault == "one class":
        for p in (root / "c1").iterdir():
            p.unlink()
        (root / "c1").rmdir()
        return "holds one class (c0): at least two are needed"
    if fault == "empty class":
        (root / "c2").mkdir()
        return f"{root / 'c2'} holds no pictures"
    if fault == "not a picture":
        (root / "c0" / "notes.txt").write_text("hello")
        return f"{root / 'c0' / 'notes.txt'} is not a picture"
    if fault == "damaged picture":
        (root / "c1" / "1.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))
        return f"{root / 'c1' / '1.png'} cannot be read as a picture"
    if fault == "a FIFO":
        (root / "c1" / "1.png").unlink()
        os.mkfifo(root / "c1" / "1.png")
        return f"{root / 'c1' / '1.png'} cannot be read as a picture"
    if fault == "nested folder":
        (root / "c0" / "more").mkdir()
        return "is a folder inside a class folder"
    if fault == "loose picture":
        Image.new("L", (28, 28)).save(root / "stray.png")
        return "lies outside the class folders"
    if fault == "splits differ":
        for split, name in (("train", "a"), ("test", "b")):
            (root / split / name).mkdir(parents=True)
            Image.new("L", (28, 28)).save(root / split / name / "0.png")
            (root / split / "c").mkdir()
            Image.new("L", (28, 28)).save(root / split / "c" / "0.png")
        return "train/ and test/ hold different classes (a, b in one only)"
    if fault == "a bomb":
        Image.new("L", (8000, 6000)).save(root / "c0" / "big.png")  # 48 M pixels in a small file
        return "is 8000x6000 pixels"
    raise AssertionError(fault)


@pytest.mark.parametrize(
    "fault",
    ["one class", "empty class", "not a picture", "damaged picture", "a FIFO", "nested folder", "loose picture",
     "splits differ", "a bomb"],
)  # fmt: skip
def test_a_folder_that_is_not_a_dataset_is_one_line_before_any_training(tmp_path: Path, fault: str) -> None:
    root = tmp_path / "pictures"
    said = _broken(root, fault)
    done = capsnet("train", "--dataset", root, "--preset", "tiny", "--epochs", "1", "--out", tmp_path / "run")
    message = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in message and "Traceback" not in message, message
    assert said in message, message
    assert not (tmp_path / "run").exists()


def test_image_size_applies_to_folders_only(tmp_path: Path) -> None:
    done = capsnet("train", "--dataset", "mnist", "--image-size", "32", "--epochs", "1", "--out", tmp_path / "r")
    assert done.returncode == 2 and "--image-size applies to a folder of pictures, not to mnist" in done.stderr
    done = capsnet("train", "--dataset", tmp_path / "nowhere", "--epochs", "1", "--out", tmp_path / "r")
    assert done.returncode == 2 and "or name a folder of labelled pictures" in done.stderr, done.stderr


def test_a_picture_added_to_a_split_is_seen_by_the_next_scan(tmp_path: Path) -> None:
    """The scan is cached until the folder changes, down to the class folders under train/ and test/."""
    root = tmp_path / "pictures"
    for split in ("train", "test"):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            Image.new("L", (28, 28), 99).save(root / split / name / "0.png")
    spec = image_folder.FolderSpec(root)
    assert len(image_folder.scan(spec).files[True]) == 2
    os.utime(root / "train" / "a", (1, 1))  # a clock that did not move would hide the change: make it move
    Image.new("L", (28, 28), 50).save(root / "train" / "a" / "1.png")
    assert len(image_folder.scan(spec).files[True]) == 3


@pytest.mark.parametrize("network", ["capsnet", "em"])
def test_a_side_too_small_for_the_network_is_one_line_naming_the_smallest(
    grey_folder: Path, tmp_path: Path, network: str
) -> None:
    """--image-size 8 lies in the documented 8..256 but is below what the network's kernels and strides read: the
    command says so in one line, with the smallest side that works, before anything is built or written."""
    done = capsnet("train", "--dataset", grey_folder, "--network", network, "--image-size", "8", "--epochs", "1",
                   "--out", tmp_path / "run")  # fmt: skip
    message = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in message and "Traceback" not in message, message
    assert "--image-size 8 is too small for the" in message and "the smallest side it reads is 17" in message, message
    assert not (tmp_path / "run").exists()


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, "PNG")
    return buffer.getvalue()


def test_a_16_bit_grey_picture_reads_as_its_8_bit_self(data_dir: Path) -> None:
    """A 16-bit grey PNG (Pillow's "I;16") is scaled to 8 bits, not clipped nearly white: as a folder's picture, as a
    colour model's upload and as a drawn digit's upload it reads as the same picture saved at 8 bits."""
    from capsnet.data.preprocess import preprocess_upload

    digit = _digits(data_dir, "mnist", 1, 2)[0][0]  # (28, 28) uint8
    eight, sixteen = _png(digit), _png(digit.astype(np.uint16) * 257)  # 255 * 257 = 65535
    assert Image.open(io.BytesIO(sixteen)).mode.startswith("I")
    for colour in (False, True):
        wide = image_folder.picture_from_bytes(sixteen, 28, colour).int()
        assert (wide - image_folder.picture_from_bytes(eight, 28, colour).int()).abs().max() <= 1, colour
    np.testing.assert_allclose(preprocess_upload(sixteen), preprocess_upload(eight), atol=1e-2)


def test_a_picture_whose_sides_differ_too_much_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    """A 4,000,000 x 1 PNG is under the pixel bound but would be resized to side x 4,000,000 x side: refused from its
    header, in one line, as a folder's picture and as an upload."""
    wide = _png(np.zeros((1, 4_000_000), dtype=np.uint8))
    with pytest.raises(image_folder.ImageFolderError, match="sides may differ 16 times at most"):
        image_folder.picture_from_bytes(wide, 32, True, "wide.png")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(2):
            (tmp_path / name / f"{i}.png").write_bytes(_png(np.full((20, 20), 40 * i, dtype=np.uint8)))
    (tmp_path / "a" / "wide.png").write_bytes(wide)
    with pytest.raises(image_folder.ImageFolderError, match="wide.png is 4000000x1 pixels"):
        image_folder.scan(image_folder.FolderSpec(tmp_path))


def test_a_model_read_against_other_data_is_one_line(grey_folder: Path, colour_folder: Path, tmp_path: Path) -> None:
    """`evaluate` of a model on data it does not read (other classes, another count of them, grey against colour)
    is one line saying which, not a traceback from its first batch nor a silent measure of renamed classes."""
    from capsnet.checkpoints.checkpoint import save_checkpoint
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig

    shipped = Path(__file__).resolve().parents[1] / "checkpoints" / "mnist.safetensors"

    def said(*args: object) -> str:
        done = capsnet("evaluate", *args, "--limit", "8")
        message = done.stderr.strip()
        assert done.returncode == 2 and "\n" not in message and "Traceback" not in message, message
        return message

    def grey_pictures(classes: int, side: int) -> str:  # a folder of grey pictures a model can say it read
        root = tmp_path / f"grey{classes}x{side}"
        for k in range(classes):
            (root / f"class {k}").mkdir(parents=True)
            for n in range(2):
                Image.fromarray(np.full((side, side), 60 * n + 20 * k, np.uint8)).save(root / f"class {k}" / f"{n}.png")
        return f"{root}@{side}"

    assert "knows other classes than" in said(shipped, "--dataset", grey_folder)  # digits against clothes
    two = CapsNet(CapsNetConfig.preset("tiny", num_classes=2))
    path = save_checkpoint(tmp_path / "two.safetensors", two, {"dataset": grey_pictures(2, 28)})
    assert "knows 2 classes and MNIST has 10" in said(path, "--dataset", "mnist")
    grey = CapsNet(CapsNetConfig.preset("tiny", num_classes=4, image_size=32))
    path = save_checkpoint(tmp_path / "grey.safetensors", grey, {"dataset": grey_pictures(4, 32)})
    assert "reads grey images and" in said(path, "--dataset", f"{colour_folder}@32")
