"""The paper's data augmentation, a whole mini-batch at a time on the training device.

Sabour, Frosst & Hinton (2017), section 5: "we trained on 28x28 MNIST images that have been
shifted by up to 2 pixels in each direction with zero padding". Fashion-MNIST also gets random
horizontal flips, as the best published CapsNet on it does (clothes are left-right symmetric;
digits are not).

The training set is held as one uint8 tensor on the device, and each batch is gathered, shifted
and flipped there by tensor indexing: no per-image PIL transforms and no loader processes, which
otherwise cost about a minute per epoch on a 2-core CPU and cap a GPU at a few thousand images
per second. The offsets and flips of a whole epoch are drawn up front from a generator seeded by
(seed, epoch, rank), so a run resumed in the middle of an epoch sees exactly the batches that an
uninterrupted run would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.transforms import v2

SHIFT = 2  # pixels in each direction, as in the paper


def shift_images(images: Tensor, offsets: Tensor, shift: int = SHIFT) -> Tensor:
    """Move each image by its own (dy, dx), filling with zeros: what RandomCrop(28, padding=shift) does per image.

    images: (B, C, H, W); offsets: (B, 2) integers in [-shift, shift], positive dy moving the content down.
    """
    if offsets.shape != (images.shape[0], 2):
        raise ValueError(f"expected offsets of shape ({images.shape[0]}, 2), got {tuple(offsets.shape)}")
    if offsets.numel() and int(offsets.abs().max()) > shift:
        raise ValueError(f"offsets must lie in [-{shift}, {shift}]")
    b, c, h, w = images.shape
    padded = F.pad(images, (shift, shift, shift, shift)).flatten(2)  # (B, C, (H + 2s) * (W + 2s))
    device = images.device
    rows = (shift - offsets[:, 0, None]) + torch.arange(
        h, device=device
    )  # (B, H): the padded row each output row reads
    cols = (shift - offsets[:, 1, None]) + torch.arange(w, device=device)  # (B, W)
    index = (rows[:, :, None] * (w + 2 * shift) + cols[:, None, :]).flatten(1)  # (B, H * W) into the padded image
    return padded.gather(2, index[:, None, :].expand(b, c, h * w)).view(b, c, h, w)  # (B, C, H, W)


def flip_images(images: Tensor, flips: Tensor) -> Tensor:
    """Mirror left-right the images (B, C, H, W) whose entry in the boolean `flips` (B,) is set."""
    return torch.where(flips[:, None, None, None], images.flip(-1), images)


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
    the epoch (a DistributedSampler's), `seed` fixes the epoch's offsets and flips, and
    `start_batch` skips the batches an interrupted run already trained on.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = images.device
    order_t = torch.as_tensor(list(order), dtype=torch.long)  # (n,)
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.randint(-shift, shift + 1, (len(order_t), 2), generator=generator).to(device)  # (n, 2)
    flips = (torch.rand(len(order_t), generator=generator) < 0.5).to(device)  # (n,)
    order_t = order_t.to(device)
    for start in range(start_batch * batch_size, len(order_t), batch_size):
        index = order_t[start : start + batch_size]  # (b,)
        batch = v2.functional.to_dtype(images[index], torch.float32, scale=True)  # (b, C, H, W) in [0, 1]
        if shift > 0:
            batch = shift_images(batch, offsets[start : start + batch_size], shift)
        if hflip:
            batch = flip_images(batch, flips[start : start + batch_size])
        yield batch, labels[index]
