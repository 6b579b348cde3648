"""Batched augmentation: the same shifts and flips as torchvision's per-image transforms, reproducible per epoch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchvision.transforms import v2

from capsnet.data.augment import augment_seed, epoch_batches, shift_and_flip


def as_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 to floats in [0, 1] exactly as the datasets' transform does it."""
    return v2.functional.to_dtype(images, torch.float32, scale=True)


def shifted_reference(image: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """The slow way: pad by 2, then crop where RandomCrop(28, padding=2) would for this offset."""
    padded = F.pad(image, (2, 2, 2, 2))
    top, left = 2 - dy, 2 - dx
    return padded[..., top : top + 28, left : left + 28]


def test_shift_matches_padded_crops() -> None:
    torch.manual_seed(0)
    images = torch.rand(25, 2, 28, 28)
    offsets = torch.tensor([(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)])
    out = shift_and_flip(images, offsets, shift=2)
    assert out.shape == images.shape
    for k, (dy, dx) in enumerate(offsets.tolist()):
        assert torch.equal(out[k], shifted_reference(images[k], dy, dx))
    # positive dy moves the content down, positive dx to the right
    dot = torch.zeros(1, 1, 28, 28)
    dot[0, 0, 10, 10] = 1
    assert shift_and_flip(dot, torch.tensor([[2, -1]]), shift=2)[0, 0, 12, 9] == 1
    assert torch.equal(shift_and_flip(images, torch.zeros(25, 2, dtype=torch.long)), images)


def test_shift_distribution_is_random_crops() -> None:
    """Every one of the 25 offsets turns up, with about equal frequency, as with v2.RandomCrop(28, padding=2)."""
    image = torch.rand(1, 1, 28, 28)
    batches = list(
        epoch_batches((image * 255).byte().expand(5000, 1, 28, 28), torch.zeros(5000), range(5000), 5000, seed=3)
    )
    ((out, _),) = batches
    source = as_float((image * 255).byte())[0]
    candidates = torch.stack([shifted_reference(source, dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)])
    matches = (out[:, None] == candidates[None]).flatten(2).all(dim=2)  # (5000, 25)
    assert matches.any(dim=1).all(), "an output that is no shift of the image"
    which = matches.int().argmax(dim=1)  # (5000,)
    counts = torch.bincount(which, minlength=25)
    assert counts.min() > 140 and counts.max() < 260  # 200 expected each


def test_flip_after_shift_matches_crop_then_mirror() -> None:
    torch.manual_seed(0)
    images = torch.randint(0, 256, (8, 1, 28, 28), dtype=torch.uint8)  # uint8, as epoch_batches gathers them
    offsets = torch.randint(-2, 3, (8, 2))
    flips = torch.tensor([True, False] * 4)
    out = shift_and_flip(images, offsets, flips)
    assert out.dtype == torch.uint8
    for k in range(8):
        expected = shifted_reference(images[k], *offsets[k].tolist())
        assert torch.equal(out[k], expected.flip(-1) if flips[k] else expected)
    # flipping alone mirrors the columns
    mirrored = shift_and_flip(images, torch.zeros(8, 2, dtype=torch.long), flips)
    assert torch.equal(mirrored[0, 0, :, 0], images[0, 0, :, 27]) and torch.equal(mirrored[1], images[1])


def test_bad_offsets() -> None:
    with pytest.raises(ValueError, match="offsets of shape"):
        shift_and_flip(torch.rand(3, 1, 28, 28), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[-2, 2\]"):
        shift_and_flip(torch.rand(1, 1, 28, 28), torch.tensor([[3, 0]]))
    with pytest.raises(ValueError, match="flips of shape"):
        shift_and_flip(torch.rand(2, 1, 28, 28), torch.zeros(2, 2, dtype=torch.long), torch.ones(3, dtype=torch.bool))


def test_seeds_differ_by_epoch_and_rank() -> None:
    seeds = {augment_seed(seed, epoch, rank) for seed in (0, 1) for epoch in range(200) for rank in range(8)}
    assert len(seeds) == 2 * 200 * 8
    images = torch.randint(0, 256, (64, 1, 28, 28), dtype=torch.uint8)
    first = [
        next(epoch_batches(images, torch.arange(64), range(64), 64, seed=augment_seed(0, e, r)))[0]
        for e, r in [(0, 0), (1, 0), (0, 1)]
    ]
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[0], first[2])


def test_epoch_batches_cover_the_order_and_resume_exactly() -> None:
    torch.manual_seed(0)
    images = torch.randint(0, 256, (50, 1, 28, 28), dtype=torch.uint8)
    labels = torch.arange(50)
    order = torch.randperm(50).tolist()
    batches = list(epoch_batches(images, labels, order, 16, seed=7, hflip=True))
    assert [len(y) for _, y in batches] == [16, 16, 16, 2]
    assert torch.cat([y for _, y in batches]).tolist() == order  # every example once, in the sampler's order
    for x, y in batches:
        assert x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
        # each image is its source, shifted and maybe mirrored: same ink unless some was pushed off the edge
        assert (x.flatten(1).sum(1) <= images[y].float().flatten(1).sum(1) / 255 + 1e-4).all()
    # a resumed epoch gets exactly the batches the uninterrupted one had
    resumed = list(epoch_batches(images, labels, order, 16, seed=7, hflip=True, start_batch=2))
    assert len(resumed) == 2 and all(torch.equal(a[0], b[0]) for a, b in zip(resumed, batches[2:]))
    other_seed = next(epoch_batches(images, labels, order, 16, seed=8, hflip=True))
    assert not torch.equal(other_seed[0], batches[0][0])
    # without augmentation the batches are the stored images, as floats
    plain = next(epoch_batches(images, labels, order, 16, seed=7, shift=0))
    assert torch.equal(plain[0], as_float(images[order[:16]]))


def test_flips_only_when_asked() -> None:
    images = torch.randint(0, 256, (400, 1, 28, 28), dtype=torch.uint8)
    ((flipped, _),) = epoch_batches(images, torch.arange(400), range(400), 400, seed=0, shift=0, hflip=True)
    mirrored = (flipped == as_float(images).flip(-1)).flatten(1).all(1)
    assert 150 < int(mirrored.sum()) < 250  # about half
    ((plain, _),) = epoch_batches(images, torch.arange(400), range(400), 400, seed=0, shift=0, hflip=False)
    assert torch.equal(plain, as_float(images))
