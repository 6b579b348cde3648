"""smallNORB, read from files in its official binary format that the tests write (nothing of it ships)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from capsnet.data import smallnorb, tasks
from capsnet.data.datasets import DatasetDamagedError, DatasetNotFoundError, as_tensors, load_dataset
from tests.cli_support import capsnet

BYTE, INT = 0x1E3D4C55, 0x1E3D4C54


def write_matrix(path: Path, array: np.ndarray, magic: int) -> None:
    """A NORB binary matrix: magic, ndim, max(ndim, 3) sizes (1 for the unused ones), then the elements."""
    sizes = list(array.shape) + [1] * (3 - array.ndim)
    header = np.array([magic, array.ndim, *sizes], "<i4").tobytes()
    data = header + np.ascontiguousarray(array).tobytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def photos(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n stereo pairs (N, 2, 96, 96) uint8, each a bright square whose side says its category, and the categories."""
    rng = np.random.default_rng(seed)
    categories = np.arange(n, dtype=np.int32) % 5
    images = rng.integers(0, 40, (n, 2, 96, 96), dtype=np.uint8)
    for k, c in enumerate(categories):
        side = 20 + 10 * int(c)
        images[k, 0, 48 - side // 2 : 48 + side // 2, 48 - side // 2 : 48 + side // 2] = 255
        images[k, 1] = 7  # the second camera: the loader must not read it
    return images, categories


def make_norb(root: Path, n_train: int = 20, n_test: int = 10, gz: bool = False) -> Path:
    raw = root / "smallNORB" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    suffix = ".mat.gz" if gz else ".mat"
    for train, n in ((True, n_train), (False, n_test)):
        images, categories = photos(n, seed=int(train))
        stem = raw / smallnorb.SPLITS[train]
        write_matrix(Path(f"{stem}-dat{suffix}"), images, BYTE)
        write_matrix(Path(f"{stem}-cat{suffix}"), categories, INT)
        write_matrix(Path(f"{stem}-info{suffix}"), np.zeros((n, 4), np.int32), INT)  # read by nobody, as published
    return root


@pytest.mark.parametrize("gz", [False, True])
def test_the_official_format_reads_as_48x48_first_camera_photos(tmp_path: Path, gz: bool) -> None:
    root = make_norb(tmp_path, gz=gz)
    train = load_dataset("smallnorb", train=True, data_dir=root, download=False)
    test = load_dataset("smallnorb", train=False, data_dir=root, download=False)
    assert len(train) == 20 and len(test) == 10
    assert train.data.shape == (20, 48, 48) and train.data.dtype == torch.uint8
    images, categories = photos(20, seed=1)
    assert train.targets.tolist() == categories.tolist()
    # each stored pixel is the rounded mean of a 2x2 block of the first camera's photo
    expected = images[:, 0].reshape(20, 48, 2, 48, 2).astype(np.float64).mean(axis=(2, 4))
    assert np.array_equal(train.data.numpy(), np.round(expected).astype(np.uint8))
    image, label = train[3]
    assert image.shape == (1, 48, 48) and label == 3 and float(image.max()) == 1.0  # torchvision's [0, 1] floats


def test_networks_read_the_centre_32x32_crop(tmp_path: Path) -> None:
    root = make_norb(tmp_path)
    read = tasks.read_test_set("smallnorb", data_dir=root)
    task = read.task
    assert (task.kind, task.input_size, task.takes_drawings, task.present) == ("crop", 32, False, 1)
    assert read.images.shape == (10, 1, 32, 32)
    stored, _ = as_tensors(load_dataset("smallnorb", train=False, data_dir=root), image_size=48)
    assert torch.equal(read.images, stored[:, :, 8:40, 8:40])


def test_missing_smallnorb_says_where_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as raised:
        load_dataset("smallnorb", train=True, data_dir=tmp_path, download=True)
    message = str(raised.value)
    assert "\n" not in message and "smallNORB/raw" in message and smallnorb.URL in message


@pytest.mark.parametrize("damage", ["truncated", "magic", "labels", "gz"])
def test_damaged_smallnorb_is_called_damaged(tmp_path: Path, damage: str) -> None:
    root = make_norb(tmp_path, gz=damage == "gz")
    raw = root / "smallNORB" / "raw"
    stem = smallnorb.SPLITS[False]
    if damage == "truncated":
        path = raw / f"{stem}-dat.mat"
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "magic":
        path = raw / f"{stem}-dat.mat"
        path.write_bytes(b"\0\0\0\0" + path.read_bytes()[4:])
    elif damage == "labels":
        write_matrix(raw / f"{stem}-cat.mat", np.full(10, 9, np.int32), INT)
    else:
        path = raw / f"{stem}-dat.mat.gz"
        path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DatasetDamagedError) as raised:
        load_dataset("smallnorb", train=False, data_dir=root, download=False)
    assert "\n" not in str(raised.value) and "damaged" in str(raised.value)
    assert len(load_dataset("smallnorb", train=True, data_dir=root, download=False)) == 20  # the other split reads


def test_read_matrix_keeps_the_stored_type_and_shape(tmp_path: Path) -> None:
    values = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    write_matrix(tmp_path / "m.mat", values, INT)
    read = smallnorb.read_matrix(tmp_path / "m.mat")
    assert read.dtype == np.dtype("<i4") and np.array_equal(read, values)
    with pytest.raises(smallnorb.NorbFormatError, match="too short"):
        (tmp_path / "short.mat").write_bytes(b"\x55\x4c")
        smallnorb.read_matrix(tmp_path / "short.mat")


@pytest.mark.parametrize("network", ["em", "capsnet", "cnn"])
def test_each_family_trains_on_smallnorb_crops(tmp_path: Path, network: str) -> None:
    """Every network family trains on smallNORB's grey 32x32 crops from the command line and is evaluated
    on its five classes."""
    root = make_norb(tmp_path / "data", n_train=16, n_test=10)
    out = tmp_path / "run"
    done = capsnet(
        "train", "--network", network, "--preset", "tiny", "--dataset", "smallnorb", "--data-dir", root,
        "--epochs", "1", "--batch-size", "8", "--out", out, "--no-progress", "--device", "cpu",
        "--no-compile",  # the whole (16-image) training set: the default would compile, for longer than it trains
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    args = json.loads((out / "args.json").read_text())
    assert args["dataset"] == "smallnorb"
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["epoch"] == 1
    evaluated = capsnet("evaluate", out / "best.safetensors", "--dataset", "smallnorb", "--data-dir", root)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "on the smallNORB test set" in evaluated.stdout
    assert "/10)" in evaluated.stdout and "Class 4:" in evaluated.stdout
    assert ("(spread loss)" in evaluated.stdout) == (network == "em")


def test_the_em_papers_smallnorb_networks_are_the_presets_read_on_its_crops() -> None:
    """The EM paper's networks are its smallNORB networks (section 5): A = B = C = D = 32, "310K" parameters, and
    A = 64, B = 8, C = D = 16, "68K". Built from the data (32x32 crops, five classes, one channel) by the presets."""
    from capsnet.nn.registry import network
    from capsnet.training.options import TrainOptions

    counts = {}
    for preset in ("paper", "small"):
        config = TrainOptions(dataset="smallnorb", network="em", preset=preset).network_config()
        assert (config.in_channels, config.image_size, config.num_classes) == (1, 32, 5)
        counts[preset] = sum(p.numel() for p in network("em").build(config).parameters())
    assert counts == {"paper": 316_394, "small": 67_154}  # within 2% of the paper's 310K and 68K
