"""CIFAR-10, read from files in its official binary format that the tests write (nothing of it ships), and each
network family trained on it in colour from the command line."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from capsnet.data import cifar10
from capsnet.data.datasets import DatasetDamagedError, DatasetNotFoundError, load_dataset, stored_tensors
from capsnet.data.tasks import task
from tests.cli_support import capsnet


def records(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n colour images (N, 3, 32, 32) uint8 and their labels: each a bright square in one colour plane and of a
    brightness that says its class, on dim noise."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n, dtype=np.uint8) % 10
    images = rng.integers(0, 60, (n, 3, 32, 32), dtype=np.uint8)
    for k, c in enumerate(labels):
        images[k, c % 3, 8:24, 8:24] = 150 + 10 * int(c)
    return images, labels


def write_batch(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """The official binary layout: per record one label byte, then the red, green and blue planes row by row."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(np.concatenate([labels[:, None], images.reshape(len(labels), -1)], axis=1).tobytes())


def make_cifar(root: Path, per_batch: int = 40, n_test: int = 50) -> Path:
    folder = root / cifar10.FOLDER
    for n, name in enumerate(cifar10.SPLITS[True]):
        write_batch(folder / name, *records(per_batch, seed=n))
    write_batch(folder / cifar10.SPLITS[False][0], *records(n_test, seed=99))
    (folder / "batches.meta.txt").write_text("\n".join(cifar10.CLASSES) + "\n")
    return root


def test_the_binary_format_reads_as_colour_images_in_plane_order(tmp_path: Path) -> None:
    root = make_cifar(tmp_path)
    train = load_dataset("cifar10", train=True, data_dir=root, download=False)
    test = load_dataset("cifar10", train=False, data_dir=root, download=False)
    images, labels = stored_tensors(test)
    assert images.shape == (50, 3, 32, 32) and images.dtype == torch.uint8 and len(train) == 200
    expected, expected_labels = records(50, seed=99)
    assert torch.equal(images, torch.from_numpy(expected)) and labels.tolist() == expected_labels.tolist()
    red_square = images[0, :, 16, 16]  # label 0: the square lies in the red plane, the record's first 1,024 pixels
    assert red_square[0] == 150 and red_square[1] < 60 and red_square[2] < 60
    picture, label = test[3]  # one item through the transform, as torchvision's sets give it
    assert picture.shape == (3, 32, 32) and torch.equal((picture * 255).round().byte(), images[3]) and label == 3
    read = task("cifar10")
    assert (read.kind, read.input_size, read.channels, read.takes_drawings) == ("image", 32, 3, False)


def test_missing_cifar10_says_where_to_get_it_and_is_never_downloaded(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as raised:
        load_dataset("cifar10", train=True, data_dir=tmp_path, download=True)
    said = str(raised.value)
    assert "\n" not in said and cifar10.FOLDER in said and cifar10.URL in said, said
    assert "this package does not download it" in said and not list(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["short", "label", "empty", "fifo", "too long"])
def test_a_damaged_batch_is_one_line_naming_it(tmp_path: Path, damage: str) -> None:
    root = make_cifar(tmp_path)
    path = root / cifar10.FOLDER / "test_batch.bin"
    images, labels = records(10, seed=1)
    if damage == "short":
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "label":
        write_batch(path, images, np.full(10, 10, np.uint8))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "fifo":
        path.unlink()
        os.mkfifo(path)
    else:
        path.write_bytes(bytes(cifar10.MAX_BATCH_BYTES + cifar10.RECORD))
    with pytest.raises(DatasetDamagedError) as raised:
        load_dataset("cifar10", train=False, data_dir=root, download=False)
    said = str(raised.value)
    assert "\n" not in said and "test_batch.bin" in said and "damaged" in said, said
    assert len(load_dataset("cifar10", train=True, data_dir=root, download=False)) == 200  # the other split reads


@pytest.mark.parametrize("network", ["capsnet", "cnn", "em"])
def test_each_family_trains_and_evaluates_on_colour_images(tmp_path: Path, network: str) -> None:
    """`train --dataset cifar10` builds the network for 3x32x32 images and ten classes, trains it, keeps a colour
    training window, and `evaluate` reads the checkpoint back on the same test set."""
    from capsnet.checkpoints.checkpoint import load_checkpoint
    from capsnet.training import watch

    root = make_cifar(tmp_path / "data")
    out = tmp_path / "run"
    done = capsnet("train", "--dataset", "cifar10", "--data-dir", root, "--network", network, "--preset", "tiny",
                   "--epochs", "1", "--train-size", "200", "--no-compile", "--no-progress", "--out", out)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the training window stops" not in done.stderr, done.stderr
    model = load_checkpoint(out / "best.safetensors")
    assert (model.config.in_channels, model.config.image_size, model.config.num_classes) == (3, 32, 10)
    assert model.info.class_names == list(cifar10.CLASSES)
    window = watch.read_window(out)
    assert window is not None and window.images.shape[1:] == (32, 32, 3)
    if window.reconstructions is not None:
        assert window.reconstructions.shape[2:] == (32, 32, 3)
    evaluated = capsnet("evaluate", out / "best.safetensors", "--data-dir", root, "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert '"dataset": "cifar10"' in evaluated.stdout


def test_the_training_window_draws_colour_images() -> None:
    from dashboard.figures.training import training_window

    images = np.random.default_rng(0).random((4, 32, 32, 3)).astype(np.float32)
    scores = np.full((4, 10), 0.1, np.float32)
    labels, predictions = np.arange(4)[:, None], np.arange(4)[:, None]
    figure = training_window(images, scores, images, labels, predictions, list(cifar10.CLASSES))
    assert figure.data[0].source.startswith("data:image/png;base64,")
    from base64 import b64decode
    from io import BytesIO

    from PIL import Image

    tiles = Image.open(BytesIO(b64decode(figure.data[0].source.split(",", 1)[1])))
    assert tiles.mode == "RGB" and tiles.size == (4 * 32 + 3 * 4, 2 * 32 + 4)


def test_the_papers_cifar10_network_has_64_primary_types_and_its_parameters() -> None:
    """Section 7: 64 primary capsule types on colour 32x32 inputs. The count, layer by layer: Conv1 3x256x9x9 + 256,
    PrimaryCaps 256x512x9x9 + 512, the 8x8x64 = 4,096 primary capsules' W to 10 classes (8x16 each), and the decoder
    160 -> 512 -> 1,024 -> 3,072."""
    from capsnet.nn.capsnet import CapsNet
    from capsnet.nn.config import CapsNetConfig

    model = CapsNet(CapsNetConfig.preset("cifar10"))
    encoder = 3 * 256 * 81 + 256 + 256 * 512 * 81 + 512 + 4096 * 10 * 8 * 16
    decoder = 160 * 512 + 512 + 512 * 1024 + 1024 + 1024 * 3072 + 3072
    counts = {"encoder": 0, "decoder": 0}
    for name, p in model.named_parameters():
        counts["decoder" if name.startswith("decoder") else "encoder"] += p.numel()
    assert counts == {"encoder": encoder, "decoder": decoder} and encoder + decoder == 19_679_232
    out = model.eval()(torch.rand(2, 3, 32, 32), return_trace=True)
    assert out.scores.shape == (2, 10) and out.reconstruction.shape == (2, 3, 32, 32)
    # with the paper's "none-of-the-above" category (no parameters): a child's couplings to the 10 classes start at
    # 1/11 each, and may sum to less than 1 after routing
    assert model.config.none_of_the_above and model.config.uniform_coupling == pytest.approx(1 / 11)
    assert out.trace is not None and torch.allclose(out.trace.coupling[:, 0], torch.tensor(1 / 11))
    assert float(out.trace.coupling[:, -1].sum(dim=1).max()) < 1
    assert not CapsNetConfig.preset("paper").none_of_the_above and CapsNetConfig().uniform_coupling == 0.1
    with pytest.raises(ValueError, match="none_of_the_above must be true or false"):
        CapsNetConfig(none_of_the_above="yes")  # type: ignore[arg-type]


def test_a_time_estimate_measures_colour_batches() -> None:
    """The sidebar's estimate timed steps on grey batches whatever the dataset: a colour network refused them."""
    from capsnet.runs.estimate import measure_speed
    from capsnet.training.options import TrainOptions

    speed = measure_speed(TrainOptions(dataset="cifar10", preset="tiny", device="cpu", compile=False), batch=2, steps=1)
    assert speed.images_per_s > 0
