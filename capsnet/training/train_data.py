"""The data a training run reads: the training set on the device, a held-out validation split, the test set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Subset
from torch.utils.data.distributed import DistributedSampler

from capsnet.data.augment import epoch_batches
from capsnet.data.datasets import centre_crop, dataset_info, load_dataset, placed, stored_tensors, subset
from capsnet.data.multimnist import TEST_PAIRS_PER_DIGIT, TEST_SEED, epoch_pairs
from capsnet.data.tasks import LabelledSet, Task, labelled
from capsnet.errors import CapsNetError
from capsnet.evaluation import evaluate_set
from capsnet.nn.registry import AnyModel
from capsnet.training.distributed import Distributed
from capsnet.training.options import TrainOptions

VAL_SEED = 2017  # the validation pairs' partners and shifts (the test pairs have their own seed)


@dataclass
class Data:
    """The training set on the device as uint8 (batches are gathered and augmented there), the test set and the
    validation split (`capsnet.data.tasks.LabelledSet`s on the CPU)."""

    train_images: torch.Tensor  # (N, 1, 28, 28) uint8 (centred on the larger canvas of "mnist-40"; 48x48 smallNORB)
    train_labels: torch.Tensor  # (N,)
    sampler: DistributedSampler
    test: LabelledSet  # with --test-size a seeded subset (of MultiMNIST's fixed test pairs: the pairs)
    hflip: bool
    val: LabelledSet | None = None  # --val-size: training examples held out (MultiMNIST: one pair per held-out digit)
    shift: int = 2  # the training shifts, pixels per axis
    crop: int = 0  # smallNORB: the side of the centre crop taken after the shift (a random crop), 0 for none

    @property
    def pairs(self) -> bool:
        """Whether an example is a pair of digits (MultiMNIST): two classes present, partners drawn every epoch."""
        return self.test.task.pairs

    @property
    def present(self) -> int:
        """How many classes are present in one example: 2 in a MultiMNIST pair, else 1."""
        return self.test.task.present

    def epoch(self, batch_size: int, seed: int, start_batch: int = 0) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        """This process's training batches of one epoch, from `start_batch`, on the device: (images, labels, the
        images the decoder must redraw). Single examples are shifted (and flipped where the dataset says; smallNORB's
        then cropped to their centre, which makes a random crop of the stored photo); MultiMNIST
        digits get a new partner and new shifts every epoch, and each digit is redrawn alone, from its own capsule."""
        order = list(self.sampler)
        if self.pairs:
            for batch in epoch_pairs(self.train_images, self.train_labels, order, batch_size, seed=seed,
                                     start_batch=start_batch):  # fmt: skip
                yield batch.images, batch.labels, batch.parts  # (B, 1, 36, 36), (B, 2), (B, 2, 1, 36, 36)
            return
        for images, labels in epoch_batches(self.train_images, self.train_labels, order, batch_size, seed=seed,
                                            shift=self.shift, hflip=self.hflip, start_batch=start_batch):  # fmt: skip
            if self.crop:
                images = centre_crop(images, self.crop)  # (B, 1, 32, 32) of (B, 1, 48, 48)
            yield images, labels, images

    def evaluate(self, model: AnyModel, device: torch.device) -> Any:
        """The test set's `Evaluation` (or, for MultiMNIST, its `PairEvaluation`)."""
        return evaluate_set(model, self.test, device=device)

    def evaluate_validation(self, model: AnyModel, device: torch.device) -> Any:
        """The validation split's `Evaluation` (`PairEvaluation` for MultiMNIST), or None without --val-size."""
        return None if self.val is None else evaluate_set(model, self.val, device=device)


def load_data(options: TrainOptions, device: torch.device, env: Distributed) -> Data:
    info = dataset_info(options.dataset)
    task = Task.of(info)
    full = load_dataset(options.dataset, train=True, data_dir=options.data_dir, download=options.download)
    val = None
    if options.val_size:  # a seeded split of the training set, before any subset of it is taken
        total = len(full)  # type: ignore[arg-type]  # torch's Dataset declares no __len__; torchvision's sets have one
        if options.val_size >= total:
            raise CapsNetError(f"--val-size {options.val_size} leaves no training images (the set has {total})")
        order = torch.randperm(total, generator=torch.Generator().manual_seed(options.seed + 7919))
        held_out = Subset(full, order[: options.val_size].tolist())
        val = labelled(info, held_out, pairs_per_digit=1, seed=VAL_SEED)  # pairs: of held-out digits only, fixed
        full = Subset(full, order[options.val_size :].tolist())
    train_set = subset(full, options.train_size, options.seed)
    test_set = load_dataset(options.dataset, train=False, data_dir=options.data_dir, download=options.download)
    train_images, train_labels = stored_tensors(train_set)
    if task.kind == "placed":
        train_images = placed(train_images, info.image_size)  # centred: the shifts move them anywhere on it
    train_images, train_labels = train_images.to(device), train_labels.to(device)
    sampler: DistributedSampler[Any] = DistributedSampler(
        train_set, num_replicas=env.world, rank=env.rank, shuffle=True, seed=options.seed
    )
    if task.pairs:  # the fixed test pairs (a seeded subset of them with --test-size), made as they are evaluated
        test = labelled(info, test_set, TEST_PAIRS_PER_DIGIT, TEST_SEED).sample(options.test_size, options.seed)
        return Data(train_images, train_labels, sampler, test, False, val)
    test = labelled(info, subset(test_set, options.test_size, options.seed), TEST_PAIRS_PER_DIGIT, TEST_SEED)
    hflip = info.hflip if options.hflip is None else options.hflip
    crop = info.image_size if task.kind == "crop" else 0
    return Data(train_images, train_labels, sampler, test, hflip, val, shift=info.shift, crop=crop)
