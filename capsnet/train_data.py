"""The data a training run reads: the training set on the device, a held-out validation split, the test set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Subset
from torch.utils.data.distributed import DistributedSampler

from capsnet.data import as_tensors, dataset_info, load_dataset, placed, stored_tensors, subset
from capsnet.distributed import Distributed
from capsnet.errors import CapsNetError
from capsnet.evaluate import evaluate, evaluate_pairs
from capsnet.multimnist import Pairs, test_pairs
from capsnet.networks import AnyModel
from capsnet.options import TrainOptions

VAL_SEED = 2017  # the validation pairs' partners and shifts (the test pairs have their own seed)


@dataclass
class Data:
    """The training set on the device as uint8 (batches are gathered and augmented there) and the test set."""

    train_images: torch.Tensor  # (N, 1, 28, 28) uint8 (centred on the larger canvas of "mnist-40")
    train_labels: torch.Tensor  # (N,)
    sampler: DistributedSampler
    test_images: torch.Tensor  # (M, 1, 28, 28) float in [0, 1] on the CPU; for MultiMNIST the uint8 test digits
    test_labels: torch.Tensor  # (M,)
    hflip: bool
    test_pairs: Pairs | None = None  # MultiMNIST: the fixed test pairs (a seeded subset of them with --test-size)
    val_images: torch.Tensor | None = None  # --val-size: training images held out, float in [0, 1] on the CPU
    val_labels: torch.Tensor | None = None  # (for MultiMNIST: the held-out digits, uint8, and their pairs below)
    shift: int = 2  # the training shifts, pixels per axis
    val_pairs: Pairs | None = None  # MultiMNIST: one fixed pair per held-out digit, both digits held out

    def evaluate(self, model: AnyModel, device: torch.device) -> Any:
        """The test set's `Evaluation` (or, for MultiMNIST, its `PairEvaluation`)."""
        if self.test_pairs is not None:
            return evaluate_pairs(model, self.test_images, self.test_labels, self.test_pairs, device=device)
        return evaluate(model, self.test_images, self.test_labels, device=device)

    def evaluate_validation(self, model: AnyModel, device: torch.device) -> Any:
        """The validation split's `Evaluation` (`PairEvaluation` for MultiMNIST), or None without --val-size."""
        if self.val_images is None or self.val_labels is None:
            return None
        if self.val_pairs is not None:
            return evaluate_pairs(model, self.val_images, self.val_labels, self.val_pairs, device=device)
        return evaluate(model, self.val_images, self.val_labels, device=device)


def load_data(options: TrainOptions, device: torch.device, env: Distributed) -> Data:
    info = dataset_info(options.dataset)
    full = load_dataset(options.dataset, train=True, data_dir=options.data_dir, download=options.download)
    val_images = val_labels = None
    val_pairs = None
    if options.val_size:  # a seeded split of the training set, before any subset of it is taken
        if options.val_size >= len(full):  # type: ignore[arg-type]
            raise CapsNetError(f"--val-size {options.val_size} leaves no training images (the set has {len(full)})")
        order = torch.randperm(len(full), generator=torch.Generator().manual_seed(options.seed + 7919))  # type: ignore[arg-type]
        held_out = Subset(full, order[: options.val_size].tolist())
        if info.pairs:  # pairs made of held-out digits only, one per digit, fixed for the run
            val_images, val_labels = stored_tensors(held_out)
            val_pairs = test_pairs(val_labels, per_digit=1, seed=VAL_SEED)
        else:
            val_images, val_labels = as_tensors(held_out, info.image_size)
        full = Subset(full, order[options.val_size :].tolist())
    train_set = subset(full, options.train_size, options.seed)
    test_set = load_dataset(options.dataset, train=False, data_dir=options.data_dir, download=options.download)
    train_images, train_labels = stored_tensors(train_set)
    if not info.pairs and info.image_size != train_images.shape[-1]:
        train_images = placed(train_images, info.image_size)  # centred: the shifts move them anywhere on it
    train_images, train_labels = train_images.to(device), train_labels.to(device)
    sampler = DistributedSampler(train_set, num_replicas=env.world, rank=env.rank, shuffle=True, seed=options.seed)
    if info.pairs:
        digits, labels = stored_tensors(test_set)  # (N, 1, 28, 28) uint8: the pairs are made as they are evaluated
        pairs = test_pairs(labels)
        if options.test_size is not None and options.test_size < len(pairs):
            keep = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(options.seed))[
                : options.test_size
            ]
            pairs = Pairs(pairs.first[keep], pairs.second[keep], pairs.offsets[keep])
        return Data(train_images, train_labels, sampler, digits, labels, False, pairs, val_images, val_labels,
                    val_pairs=val_pairs)  # fmt: skip
    test_set = subset(test_set, options.test_size, options.seed)
    hflip = info.hflip if options.hflip is None else options.hflip
    return Data(
        train_images, train_labels, sampler, *as_tensors(test_set, info.image_size), hflip,
        val_images=val_images, val_labels=val_labels, shift=info.shift,
    )  # fmt: skip
