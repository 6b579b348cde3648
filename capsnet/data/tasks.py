"""What one example is, per dataset, and the one way to read a labelled set and evaluate a network on it.

An example is one of three kinds (`capsnet.data.datasets.DatasetInfo`):
- a single 28x28 image (MNIST, Fashion-MNIST);
- a digit placed on a larger canvas (mnist-40: centred on 40x40 for testing, moved anywhere in training);
- a pair of digits of different classes overlaid on 36x36 (MultiMNIST, section 6 of the paper): its test
  set is the fixed pairs of `capsnet.data.multimnist.test_pairs`, made from the uint8 test digits a batch at a
  time as they are evaluated, and an answer is right when the two highest scores are the two digits.
A `LabelledSet` holds either kind, so the CLIs, the trainer and the dashboard read a test set (or its
first n examples, or a seeded subset) and evaluate on it with one call each, whatever the dataset.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.data import Dataset

from capsnet.data.datasets import DatasetInfo, as_tensors, dataset_info, load_dataset, stored_tensors
from capsnet.data.multimnist import TEST_PAIRS_PER_DIGIT, TEST_SEED, Pairs, test_pairs
from capsnet.evaluation import Evaluation, PairEvaluation, evaluate, evaluate_pairs
from capsnet.nn.registry import AnyModel


@dataclass(frozen=True)
class LabelledSet:
    """Examples of one dataset with their labels: images, or digits and the pairs made of them."""

    info: DatasetInfo
    images: Tensor  # (N, 1, H, W) float in [0, 1]; for pairs the uint8 digits (M, 1, 28, 28) they are made of
    labels: Tensor  # (N,) the images' labels, or the digits'
    pairs: Pairs | None = None  # MultiMNIST: which two digits, and their shifts, make each example

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

    def evaluate(
        self,
        model: AnyModel,
        batch_size: int | None = None,
        device: torch.device | str | None = None,
        routing_iterations: int | None = None,
        on_batch: Callable[[int, int], None] | None = None,
    ) -> Evaluation | PairEvaluation:
        """`model` on these examples: an `Evaluation`, or for pairs a `PairEvaluation` judged as the paper does.

        `batch_size` defaults to each evaluation's own (500 images, 250 pairs).
        """
        sized = {} if batch_size is None else {"batch_size": batch_size}
        if self.pairs is not None:
            return evaluate_pairs(model, self.images, self.labels, self.pairs, device=device, on_batch=on_batch,
                                  routing_iterations=routing_iterations, **sized)  # fmt: skip
        return evaluate(model, self.images, self.labels, device=device, routing_iterations=routing_iterations,
                        on_batch=on_batch, **sized)  # fmt: skip


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
