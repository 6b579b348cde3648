"""An affNIST-like test set, and accuracy against rotation and scale: the paper's robustness claim.

Sabour, Frosst & Hinton (2017), section 5.2: a CapsNet trained on MNIST digits moved anywhere on
a 40x40 canvas ("mnist-40") reached 79% on affNIST, a CNN with the same MNIST accuracy 66%.
affNIST itself (each MNIST test digit under random small affine transforms on 40x40) cannot be
downloaded here, so `affnist_like` makes a seeded stand-in from the MNIST test digits: each is
centred on 40x40 and transformed about the canvas centre by a rotation within +-20 degrees, a
horizontal shear within +-0.2 (+-11.3 degrees) and a scale in [0.8, 1.2], bilinear, zero fill.
There is no re-centring: the digit stays where the transform leaves it. affNIST also scales each
axis apart and adds translations; this set scales both axes alike and adds none (the training
moves already cover translation).

`accuracy_sweep` measures a model's test accuracy with every test image under the same
rotation (or scale), for the curves the dashboard draws beside the transform lens.

    python -m capsnet affnist runs/mnist-40/best.safetensors runs/mnist-40-cnn/best.safetensors
    python -m capsnet affnist --sweep checkpoints/mnist.safetensors checkpoints/baselines/mnist-cnn.safetensors
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from capsnet.data.datasets import as_tensors, dataset_info, load_dataset, placed, stored_tensors
from capsnet.data.tasks import Task
from capsnet.errors import CapsNetError
from capsnet.nn.registry import AnyModel
from capsnet.readings.equivariance import Transform, transform

SIZE = 40  # affNIST's canvas
ROTATION = 20.0  # degrees either way
SHEAR = 0.2  # horizontal shear factor either way
SCALE = (0.8, 1.2)
SEED = 2017
ANGLES = np.arange(-60.0, 61.0, 10.0)  # the rotation sweep, degrees
SCALES = np.round(np.arange(0.6, 1.41, 0.1), 2)  # the scale sweep
CHUNK = 500  # images per forward pass
TRAINING_SET = "mnist-40"  # the paper's training data for this test: MNIST digits moved anywhere on 40x40


def random_transforms(count: int, seed: int = SEED) -> list[Transform]:
    """`count` affNIST-like transforms, seeded: rotation, shear and scale drawn uniformly in their ranges."""
    generator = torch.Generator().manual_seed(seed)
    draws = torch.rand(count, 3, generator=generator, dtype=torch.float64)  # (N, 3) in [0, 1)
    angle = (2 * draws[:, 0] - 1) * ROTATION
    shear = torch.rad2deg(torch.atan((2 * draws[:, 1] - 1) * SHEAR))  # Transform takes the shear as an angle
    scale = SCALE[0] + draws[:, 2] * (SCALE[1] - SCALE[0])
    return [Transform(rotation=float(a), shear=float(s), scale=float(z)) for a, s, z in zip(angle, shear, scale)]


def affnist_like(digits: Tensor, seed: int = SEED, size: int = SIZE) -> tuple[Tensor, list[Transform]]:
    """The stand-in for affNIST: uint8 digits (N, 1, 28, 28) -> floats (N, 1, 40, 40) in [0, 1] and their transforms.

    `size` 28 transforms the digits in their own 28x28 frame, for a network of MNIST's size (the digit's 20x20 box
    scaled by at most 1.2 still fits; the corners of a rotated stroke may leave it)."""
    transforms = random_transforms(len(digits), seed)
    canvas = placed(digits, size).float() / 255.0  # (N, 1, size, size), centred
    parts = [transform(canvas[i : i + CHUNK], transforms[i : i + CHUNK]) for i in range(0, len(canvas), CHUNK)]
    return torch.cat(parts), transforms


@torch.no_grad()
def accuracy(model: AnyModel, images: Tensor, labels: Tensor, device: torch.device | str | None = None) -> float:
    """The share of `images` whose highest score (longest capsule) is the label, in chunks, in eval mode."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    right = 0
    for start in range(0, len(images), CHUNK):
        out = model(images[start : start + CHUNK].to(device))
        right += int((out.prediction.cpu() == labels[start : start + CHUNK]).sum())
    model.train(was_training)
    return right / max(len(images), 1)


@dataclass(frozen=True)
class AffineResult:
    """A mnist-40 model's accuracy on the MNIST test digits moved on 40x40 and on the affNIST-like set."""

    moved_mnist_accuracy: float
    affnist_like_accuracy: float
    examples: int

    def header_facts(self) -> dict[str, float | int]:
        """The keys a checkpoint's header keeps them under (`capsnet.readings.claims` reads them)."""
        return {"moved_mnist_accuracy": self.moved_mnist_accuracy,
                "affnist_like_accuracy": self.affnist_like_accuracy, "affnist_like_examples": self.examples}  # fmt: skip


@dataclass(frozen=True)
class AffineTestSet:
    """The MNIST test digits moved on 40x40 and their affNIST-like stand-ins: what `measure` reads, built once."""

    moved: Tensor  # (N, 1, 40, 40) in [0, 1]
    affine: Tensor  # (N, 1, 40, 40) in [0, 1]
    labels: Tensor  # (N,)


def affine_test_set(data_dir: str | None = None, limit: int | None = None) -> AffineTestSet:
    """The (first `limit`) MNIST test digits, moved on 40x40 as the mnist-40 test set does, and made affNIST-like."""

    test = load_dataset("mnist", train=False, data_dir=data_dir)
    digits, labels = stored_tensors(test)
    moved, _ = as_tensors(test, SIZE)
    if limit:
        digits, labels, moved = digits[:limit], labels[:limit], moved[:limit]
    affine, _ = affnist_like(digits)
    return AffineTestSet(moved, affine, labels)


def digit_canvas(dataset: str) -> int | None:
    """The side on which `dataset`'s networks read single MNIST digits (28, or 40 for mnist-40); None for a dataset of
    other pictures, or of pairs, where neither the affNIST-like set nor the drawn non-digits mean anything."""
    info = dataset_info(dataset)
    kind = Task.of(info).kind
    return info.image_size if info.folder == "MNIST" and kind in ("image", "placed") else None


def affine_images(dataset: str, data_dir: str | None = None, limit: int | None = None) -> tuple[Tensor, Tensor] | None:
    """The first `limit` MNIST test digits made affNIST-like on the canvas `dataset`'s networks read (28 or 40), with
    their labels: (N, 1, side, side) in [0, 1] and (N,); None where the dataset is not of single MNIST digits."""
    side = digit_canvas(dataset)
    if side is None:
        return None
    digits, labels = stored_tensors(load_dataset("mnist", train=False, data_dir=data_dir))
    if limit:
        digits, labels = digits[:limit], labels[:limit]
    images, _ = affnist_like(digits, size=side)
    return images, labels


def measure(
    model: AnyModel,
    data_dir: str | None = None,
    limit: int | None = None,
    test: AffineTestSet | None = None,
    moved_accuracy: float | None = None,
) -> AffineResult:
    """`model` (a 40x40 network) on the MNIST test set moved on 40x40 and on its affNIST-like stand-in.

    `test` is that set already built (`affine_test_set`), to measure several models on it; else it is built here.
    `moved_accuracy`: the model's accuracy on the moved digits when it is known already (an export has just
    evaluated the mnist-40 test set, the same digits): only the affNIST-like set is then read.
    """
    refuse_other_sizes(model, "this network")
    test = test if test is not None else affine_test_set(data_dir, limit)
    labels = test.labels
    moved = accuracy(model, test.moved, labels) if moved_accuracy is None else moved_accuracy
    return AffineResult(moved, accuracy(model, test.affine, labels), len(labels))


def refuse_other_sizes(model: AnyModel, who: str) -> None:
    """A CapsNetError naming `who` unless `model` reads affNIST's 40x40 images."""
    size = model.config.image_size
    if size != SIZE:
        raise CapsNetError(
            f"{who} reads {size}x{size} images; affNIST is {SIZE}x{SIZE}: train on --dataset {TRAINING_SET}"
        )


@dataclass(frozen=True)
class Sweep:
    """Test accuracy with every image under the same transform, one value per setting."""

    kind: str  # "rotation" (degrees) or "scale"
    values: tuple[float, ...]
    accuracy: tuple[float, ...]
    examples: int

    def to_dict(self) -> dict:
        return {"kind": self.kind, "values": list(self.values), "accuracy": list(self.accuracy),
                "examples": self.examples}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> Sweep:
        """The inverse of `to_dict`; ValueError, TypeError or KeyError for anything that is not one."""
        sweep = cls(str(data["kind"]), tuple(float(v) for v in data["values"]),
                    tuple(float(a) for a in data["accuracy"]), int(data["examples"]))  # fmt: skip
        if len(sweep.values) != len(sweep.accuracy) or not all(0.0 <= a <= 1.0 for a in sweep.accuracy):
            raise ValueError("not a sweep: one accuracy in [0, 1] per value")
        return sweep


def sweep_images(limit: int) -> int:
    """How many images the two robustness sweeps (every angle, then every scale) read on `limit` test images."""
    return limit * (len(ANGLES) + len(SCALES))


def accuracy_sweep(
    model: AnyModel,
    images: Tensor,
    labels: Tensor,
    kind: str = "rotation",
    values: Sequence[float] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> Sweep:
    """Accuracy on `images` (N, C, H, W) in [0, 1] rotated by each angle (or scaled by each factor) in `values`."""
    if kind not in ("rotation", "scale"):
        raise ValueError(f"kind must be 'rotation' or 'scale', got {kind!r}")
    values = tuple(float(v) for v in (values if values is not None else (ANGLES if kind == "rotation" else SCALES)))
    results = []
    for k, value in enumerate(values):
        moved = transform(images, [Transform(**{kind: value})] * len(images))
        results.append(accuracy(model, moved, labels))
        if on_step is not None:
            on_step(k + 1, len(values))
    return Sweep(kind, values, tuple(results), len(images))
