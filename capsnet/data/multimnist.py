"""MultiMNIST: two overlapping MNIST digits of different classes, as in section 6 of the paper.

Sabour, Frosst & Hinton (2017): "each digit is shifted up to 4 pixels in each direction
resulting in a 36x36 image", overlaid on a digit of another class from the same set. The
official code (`mnist_shift.py` in Sarasra/models, research/capsules) pads each 28x28 digit
to 36x36, shifts it by a random offset in [-4, 4] per axis with zero fill, and merges the two
as min(a + b, 255). The paper and the code agree on all of this; where the code picks the
partner by redrawing until the classes differ, this module draws the partner's class uniformly
among the other nine and then an example of it (the same for balanced classes, and one draw).

Training pairs are made on the device, a batch at a time, from offsets and partners drawn
for a whole epoch from a generator seeded by (seed, epoch, rank), like `capsnet.data.augment`, so
a resumed epoch sees the same pairs. The test set is fixed: `pairs_per_digit` partners (10
by default) for every test digit, from a seed, made a batch at a time when evaluated.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.transforms import v2

from capsnet.data.augment import shift_and_flip

PAD = 4  # each 28x28 digit is padded to 36x36 and shifted by up to 4 px in each direction
SIZE = 28 + 2 * PAD
TEST_PAIRS_PER_DIGIT = 10
TEST_SEED = 2017


def place(digits: Tensor, offsets: Tensor) -> Tensor:
    """Pad (B, C, 28, 28) digits to 36x36 and move each by its (dy, dx) in [-4, 4], zero fill: (B, C, 36, 36)."""
    padded = F.pad(digits, (PAD, PAD, PAD, PAD))  # (B, C, 36, 36), the digit centred
    return shift_and_flip(padded, offsets, None, PAD)


def merge(first: Tensor, second: Tensor) -> Tensor:
    """Overlay two uint8 images as min(a + b, 255), as the official code does."""
    return (first.int() + second.int()).clamp(max=255).to(torch.uint8)


class PartnerSampler:
    """Draws, for given digits, a partner of another class: the class uniformly among the others, then an example."""

    def __init__(self, labels: Tensor, num_classes: int = 10) -> None:
        labels = labels.long().cpu()
        self.num_classes = num_classes
        self.counts = torch.bincount(labels, minlength=num_classes)  # (K,)
        order = torch.argsort(labels, stable=True)
        starts = torch.cumsum(self.counts, 0) - self.counts  # (K,): where each class begins in `order`
        self.order, self.starts = order, starts
        if bool((self.counts == 0).any()):
            raise ValueError("every class needs at least one example to pair with")

    def __call__(self, labels: Tensor, generator: torch.Generator) -> Tensor:
        """Indices (B,) of partners for digits of classes `labels` (B,)."""
        labels = labels.long().cpu()
        shift = torch.randint(1, self.num_classes, labels.shape, generator=generator)
        other = (labels + shift) % self.num_classes  # (B,): never the digit's own class
        pick = (torch.rand(labels.shape, generator=generator) * self.counts[other]).long()  # (B,)
        return self.order[self.starts[other] + pick]


@dataclass
class Pairs:
    """Which digits overlap, and how each is moved: the recipe of a set of MultiMNIST examples."""

    first: Tensor  # (M,) indices into the digit set
    second: Tensor  # (M,)
    offsets: Tensor  # (M, 2, 2): (dy, dx) of the first and of the second digit

    def __len__(self) -> int:
        return len(self.first)

    def take(self, images: Tensor, labels: Tensor, start: int, stop: int) -> MultiBatch:
        """Examples start..stop, made from uint8 digits (N, 1, 28, 28) and their labels, on `images`' device."""
        return make_batch(images, labels, self.first[start:stop], self.second[start:stop], self.offsets[start:stop])


@dataclass
class MultiBatch:
    """A batch of MultiMNIST examples: the overlay, both labels, and each digit alone (for the reconstructions)."""

    images: Tensor  # (B, 1, 36, 36) float in [0, 1]
    labels: Tensor  # (B, 2) the two classes
    parts: Tensor  # (B, 2, 1, 36, 36) float: each digit alone, where it was placed

    def __len__(self) -> int:
        return len(self.images)


def make_batch(images: Tensor, labels: Tensor, first: Tensor, second: Tensor, offsets: Tensor) -> MultiBatch:
    """Overlay digits images[first[b]] and images[second[b]] (uint8), each moved by offsets[b, 0] and [b, 1]."""
    device = images.device
    first, second, offsets = first.to(device), second.to(device), offsets.to(device)
    a = place(images[first], offsets[:, 0])  # (B, 1, 36, 36) uint8
    b = place(images[second], offsets[:, 1])
    to_float = lambda t: v2.functional.to_dtype(t, torch.float32, scale=True)  # noqa: E731
    return MultiBatch(
        images=to_float(merge(a, b)),
        labels=torch.stack([labels[first], labels[second]], dim=1),  # (B, 2)
        parts=torch.stack([to_float(a), to_float(b)], dim=1),  # (B, 2, 1, 36, 36)
    )


def two_highest(scores: np.ndarray | Tensor) -> tuple[int, int]:
    """The two classes a network names for a pair: its two highest scores (K,), highest first, ties to the lower class."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return int(order[0]), int(order[1])


def overlay(first: Tensor | np.ndarray, second: Tensor | np.ndarray, offsets: Sequence[Sequence[int]]) -> np.ndarray:
    """One pair as the test pairs are made: two 28x28 digits (uint8, or float in [0, 1] like a drawing), each moved
    by its (dy, dx) in [-4, 4], overlaid on 36x36. Returns (36, 36) float32 in [0, 1]."""
    digits = []
    for digit in (first, second):
        digit = torch.as_tensor(np.asarray(digit)).reshape(1, 28, 28)  # (1, 28, 28)
        if digit.is_floating_point():  # a drawing in [0, 1]: stored as the test digits are
            digit = digit.clamp(0, 1).mul(255).round().to(torch.uint8)
        digits.append(digit)
    moves = torch.as_tensor(offsets, dtype=torch.long).reshape(1, 2, 2)  # (1, 2 digits, (dy, dx))
    if bool((moves.abs() > PAD).any()):
        raise ValueError(f"each shift must lie in [-{PAD}, {PAD}], got {moves.tolist()}")
    pair = make_batch(torch.stack(digits), torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1]), moves)
    return pair.images[0, 0].numpy()  # (36, 36)


def draw_pairs(labels: Tensor, first: Tensor, seed: int, num_classes: int = 10) -> Pairs:
    """Partners and offsets for digits `first` (M,) of a set with `labels` (N,), from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    second = PartnerSampler(labels, num_classes)(labels.cpu()[first.cpu()], generator)
    offsets = torch.randint(-PAD, PAD + 1, (len(first), 2, 2), generator=generator)
    return Pairs(first.cpu(), second, offsets)


def test_pairs(labels: Tensor, per_digit: int = TEST_PAIRS_PER_DIGIT, seed: int = TEST_SEED) -> Pairs:
    """The fixed test set: every test digit with `per_digit` partners of other classes (100,000 pairs for MNIST)."""
    first = torch.arange(len(labels)).repeat_interleave(per_digit)  # (N * per_digit,)
    return draw_pairs(labels, first, seed)


def epoch_pairs(
    images: Tensor,
    labels: Tensor,
    order: Sequence[int],
    batch_size: int,
    *,
    seed: int,
    start_batch: int = 0,
) -> Iterator[MultiBatch]:
    """One epoch of training pairs: every digit of `order` (this process's share) with a fresh partner and shifts."""
    pairs = draw_pairs(labels, torch.as_tensor(list(order), dtype=torch.long), seed)
    for start in range(start_batch * batch_size, len(pairs), batch_size):
        yield pairs.take(images, labels, start, start + batch_size)
