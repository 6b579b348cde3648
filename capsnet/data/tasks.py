"""The task type: what one example of a dataset is, and every question whose answer depends on it.

An example is one of four kinds (`Task.kind`):
- "image": a single 28x28 image (MNIST, Fashion-MNIST), which a drawing or an upload can also be;
- "placed": a digit placed on a larger canvas (mnist-40: centred on 40x40 for testing, moved anywhere in training);
- "crop": a crop of a larger stored photo (smallNORB: 32x32 of 48x48, random in training, the centre in testing);
- "pair": two digits of different classes overlaid on 36x36 (MultiMNIST, section 6 of the paper): its test
  set is the fixed pairs of `capsnet.data.multimnist.test_pairs`, made from the uint8 test digits a batch at a
  time as they are evaluated, and an answer is right when the two highest scores are the two digits.
The code asks a `Task` (`task(name)`) instead of branching on image sizes or pairs: its input size, whether
a drawing can be its input, how many classes one example holds, the rule for a right answer, and how many
examples an evaluation batch holds. A `LabelledSet` holds a test set of either kind, so the CLIs, the
trainer and the dashboard read one (or its first n examples, or a seeded subset) with one call each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from torch.utils.data import Dataset

from capsnet.data.datasets import DatasetInfo, as_tensors, dataset_info, load_dataset, stored_tensors
from capsnet.data.multimnist import TEST_PAIRS_PER_DIGIT, TEST_SEED, Pairs, test_pairs
from capsnet.data.preprocess import MNIST_SIZE

TaskKind = Literal["image", "placed", "crop", "pair"]


@dataclass(frozen=True)
class Task:
    """What one example of a dataset is, and the answers to every question that depends on it."""

    kind: TaskKind
    input_size: int  # the side of the network's input: 28, 40 (placed), 32 (crops, CIFAR-10) or 36 (pairs)
    channels: int = 1  # 1 grey, 3 colour

    @classmethod
    def of(cls, info: DatasetInfo) -> Task:
        kind: TaskKind = (
            "pair" if info.pairs
            else "crop" if info.image_size < info.stored_size
            else "placed" if info.image_size > info.stored_size
            else "image"
        )  # fmt: skip
        return cls(kind, info.image_size, info.channels)

    @property
    def pairs(self) -> bool:
        """Whether an example overlays two digits (its labels are (L,) classes, its test set fixed pairs)."""
        return self.kind == "pair"

    @property
    def present(self) -> int:
        """How many classes one example holds: chance is one in comb(K, present)."""
        return 2 if self.pairs else 1

    @property
    def takes_drawings(self) -> bool:
        """Whether a drawing, an upload or a single 28x28 test image can be the input (the Draw page, predict)."""
        return self.kind == "image" and self.channels == 1 and self.input_size == MNIST_SIZE

    @property
    def one_picture(self) -> bool:
        """Whether one test image is an input the pages follow: not a pair, nor a digit placed on a larger canvas."""
        return self.kind in ("image", "crop")

    @property
    def picture_shape(self) -> tuple[int, ...]:
        """One input as a picture (`capsnet.data.pictures`): (side, side) grey, (side, side, 3) colour."""
        side = self.input_size
        return (side, side) if self.channels == 1 else (side, side, 3)

    @property
    def eval_batch(self) -> int:
        """Examples per evaluation batch: 500 images, or 250 pairs (made on the fly, twice the tensors)."""
        return 250 if self.pairs else 500

    @staticmethod
    def right(scores: Tensor, labels: Tensor) -> Tensor:
        """(B,) bool, the rule for a right answer: the highest score (longest capsule) is the label (B,); or, for
        L labels (B, L), the L highest are exactly those, with no tie at the cut."""
        if labels.dim() == 1:
            return scores.argmax(dim=1) == labels
        present = labels.shape[1]
        values, indices = scores.topk(min(present + 1, scores.shape[1]), dim=1)  # (B, L + 1)
        top = indices[:, :present].sort(dim=1).values  # (B, L)
        decided = values[:, present - 1] > values[:, present] if values.shape[1] > present else True
        return (top == labels.sort(dim=1).values).all(dim=1) & decided


def task(name: str) -> Task:
    """The task of dataset `name` (ValueError naming the known ones for another)."""
    return Task.of(dataset_info(name))


@dataclass(frozen=True)
class LabelledSet:
    """Examples of one dataset with their labels: images, or digits and the pairs made of them."""

    info: DatasetInfo
    images: Tensor  # (N, C, H, W) float in [0, 1]; for pairs the uint8 digits (M, 1, 28, 28) they are made of
    labels: Tensor  # (N,) the images' labels, or the digits'
    pairs: Pairs | None = None  # MultiMNIST: which two digits, and their shifts, make each example

    @property
    def task(self) -> Task:
        return Task.of(self.info)

    def __len__(self) -> int:
        """The number of examples: images, or pairs."""
        return len(self.pairs.first) if self.pairs is not None else len(self.labels)

    def first(self, count: int | None) -> LabelledSet:
        """The first `count` examples (all of them for None): the same ones for every caller."""
        if count is None or count >= len(self):
            return self
        return self._take(torch.arange(count))

    def sample(self, count: int | None, seed: int) -> LabelledSet:
        """A seeded random subset of `count` examples (all of them for None), in a fixed order."""
        if count is None or count >= len(self):
            return self
        return self._take(torch.randperm(len(self), generator=torch.Generator().manual_seed(seed))[:count])

    def _take(self, keep: Tensor) -> LabelledSet:
        if self.pairs is not None:  # the digits stay whole: the pairs name them
            pairs = Pairs(self.pairs.first[keep], self.pairs.second[keep], self.pairs.offsets[keep])
            return LabelledSet(self.info, self.images, self.labels, pairs)
        return LabelledSet(self.info, self.images[keep], self.labels[keep])


def labelled(info: DatasetInfo, examples: Dataset, pairs_per_digit: int, seed: int) -> LabelledSet:
    """The examples of a torchvision set as `info`'s networks read them (for pairs: `pairs_per_digit` partners each)."""
    if info.pairs:
        digits, labels = stored_tensors(examples)  # (N, 1, 28, 28) uint8
        return LabelledSet(info, digits, labels, test_pairs(labels, per_digit=pairs_per_digit, seed=seed))
    images, labels = as_tensors(examples, info.image_size)
    return LabelledSet(info, images, labels)


def read_test_set(name: str, data_dir: str | os.PathLike | None = None, download: bool = False) -> LabelledSet:
    """The test set of dataset `name`, as its networks read it (MultiMNIST: all its fixed test pairs).

    Raises DatasetNotFoundError or DatasetDamagedError (one line each) when the files cannot be read.
    """
    info = dataset_info(name)
    examples = load_dataset(name, train=False, data_dir=data_dir, download=download)
    return labelled(info, examples, TEST_PAIRS_PER_DIGIT, TEST_SEED)
