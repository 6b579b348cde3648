"""The paper's data augmentation, a whole mini-batch at a time on the training device.

Sabour, Frosst & Hinton (2017), section 5: "we trained on 28x28 MNIST images that have been
shifted by up to 2 pixels in each direction with zero padding". Fashion-MNIST also gets random
horizontal flips, as the best published CapsNet on it does (clothes are left-right symmetric;
digits are not).

The training set is held as one uint8 tensor on the device, and each batch is gathered, shifted
and flipped there in one indexing operation: no per-image PIL transforms and no loader processes.
On a 2-core CPU the per-image pipeline managed about 3,000 images/s (20 s of each 60,000-image
epoch), which in 4 loader processes would cap a GPU near 12,700 images/s; this one is about 100
times faster on that CPU and 87 times on an H100 (`benchmarks/README.md`). The offsets and flips
of a whole epoch are drawn up front from a generator seeded by (seed, epoch, rank), so a run
resumed in the middle of an epoch sees exactly the batches that an uninterrupted run would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.transforms import v2

SHIFT = 2  # pixels in each direction, as in the paper


def augment_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of one epoch's shifts and flips on one process (rank): a run's seed, yet new every epoch."""
    return seed * 1_000_003 + epoch * 1_009 + rank


def shift_and_flip(images: Tensor, offsets: Tensor, flips: Tensor | None = None, shift: int = SHIFT) -> Tensor:
    """Move each image by its own (dy, dx) with zero fill, then mirror it left-right where `flips` is set.

    What v2.RandomCrop(28, padding=shift) and v2.RandomHorizontalFlip do one image at a time, as a
    single gather over the batch. images: (B, C, H, W) of any dtype; offsets: (B, 2) integers in
    [-shift, shift], positive dy moving the content down and positive dx to the right (checked on
    the CPU only: on an accelerator the check would wait for the device every batch); flips: (B,) bool.
    """
    b, c, h, w = images.shape
    if offsets.shape != (b, 2):
        raise ValueError(f"expected offsets of shape ({b}, 2), got {tuple(offsets.shape)}")
    if flips is not None and flips.shape != (b,):
        raise ValueError(f"expected flips of shape ({b},), got {tuple(flips.shape)}")
    if offsets.device.type == "cpu" and offsets.numel() and int(offsets.abs().max()) > shift:
        raise ValueError(f"offsets must lie in [-{shift}, {shift}]")
    device = images.device
    padded = F.pad(images, (shift, shift, shift, shift)).flatten(2)  # (B, C, (H + 2s) * (W + 2s))
    x = torch.arange(w, device=device).expand(b, w)  # (B, W): output columns
    if flips is not None:
        x = torch.where(flips[:, None], w - 1 - x, x)  # a mirrored image reads its row backwards
    rows = (shift - offsets[:, 0, None]) + torch.arange(h, device=device)  # (B, H): padded row of each output row
    cols = (shift - offsets[:, 1, None]) + x  # (B, W): padded column of each output column
    index = (rows[:, :, None] * (w + 2 * shift) + cols[:, None, :]).flatten(1)  # (B, H * W)
    return padded.gather(2, index[:, None, :].expand(b, c, h * w)).view(b, c, h, w)  # (B, C, H, W)


def epoch_batches(
    images: Tensor,
    labels: Tensor,
    order: Sequence[int],
    batch_size: int,
    *,
    seed: int,
    shift: int = SHIFT,
    hflip: bool = False,
    start_batch: int = 0,
) -> Iterator[tuple[Tensor, Tensor]]:
    """One epoch of augmented mini-batches: float images (b, C, H, W) in [0, 1] and labels (b,), on `images`' device.

    `images` are the whole training set as uint8 (N, C, H, W), `order` this process's indices for
    the epoch (a DistributedSampler's), `seed` fixes the epoch's offsets and flips (`augment_seed`),
    and `start_batch` skips the batches an interrupted run already trained on.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = images.device
    order_t = torch.as_tensor(list(order), dtype=torch.long)  # (n,)
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.randint(-shift, shift + 1, (len(order_t), 2), generator=generator).to(device)  # (n, 2)
    flips = (torch.rand(len(order_t), generator=generator) < 0.5).to(device) if hflip else None  # (n,)
    order_t = order_t.to(device)
    for start in range(start_batch * batch_size, len(order_t), batch_size):
        index = order_t[start : start + batch_size]  # (b,)
        batch = images[index]  # (b, C, H, W) uint8
        if shift > 0 or flips is not None:
            batch_flips = None if flips is None else flips[start : start + batch_size]
            batch = shift_and_flip(batch, offsets[start : start + batch_size], batch_flips, shift)
        yield v2.functional.to_dtype(batch, torch.float32, scale=True), labels[index]  # floats in [0, 1]
