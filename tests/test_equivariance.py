"""The transform lens: batched transforms against torchvision's one-image ones, and readings in one batch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.readings import equivariance as eq


@pytest.fixture(scope="module")
def model() -> CapsNet:
    torch.manual_seed(1)
    return CapsNet(CapsNetConfig.preset("tiny")).eval()


def test_one_batch_of_different_transforms_matches_torchvision_image_by_image() -> None:
    transforms = [
        eq.Transform(),
        eq.Transform(rotation=30),
        eq.Transform(rotation=-17, scale=1.2, shear=12, dx=2, dy=-1.5),
        eq.Transform(scale=0.8, dx=-3, dy=3),
    ]
    images = torch.rand(len(transforms), 1, 28, 28)
    batched = eq.transform(images, transforms)
    for image, tr, out in zip(images, transforms, batched):
        # torchvision turns clockwise for a positive angle; the lens counter-clockwise, as the screen shows it
        reference = TF.affine(
            image[None], angle=-tr.rotation, translate=[tr.dx, tr.dy], scale=tr.scale, shear=[tr.shear, 0.0],
            interpolation=TF.InterpolationMode.BILINEAR,
        ).clamp(0, 1)  # fmt: skip
        torch.testing.assert_close(out[None], reference, atol=1e-4, rtol=0)
    torch.testing.assert_close(batched[0], images[0])  # the identity is the identity


def test_directions_as_the_screen_shows_them() -> None:
    image = torch.zeros(1, 1, 28, 28)
    image[0, 0, 13:15, 20:24] = 1.0  # a bar right of the centre
    turned = eq.transform(image, [eq.Transform(rotation=45)])[0, 0]
    ys, xs = np.nonzero(turned.numpy() > 0.2)
    assert ys.mean() < 13 and xs.mean() > 14  # counter-clockwise: it moved up, still on the right
    moved = eq.transform(image, [eq.Transform(dx=3, dy=-2)])[0, 0]
    ys, xs = np.nonzero(moved.numpy() > 0.5)
    assert ys.mean() == pytest.approx(11.5) and xs.mean() == pytest.approx(24.5)


def test_thickness_adds_and_removes_ink() -> None:
    image = torch.zeros(3, 1, 28, 28)
    image[:, 0, 6:22, 12:16] = 1.0
    out = eq.transform(image, [eq.Transform(thickness=t) for t in (-1.0, 1.0, 2.0)])
    ink = out.sum(dim=(1, 2, 3))
    assert ink[0] < image[0].sum() < ink[1] < ink[2]
    half = eq.transform(image[:1], [eq.Transform(thickness=0.5)])
    assert image[0].sum() < half.sum() < ink[1]


def test_transforms_are_bounded() -> None:
    with pytest.raises(ValueError, match="rotation must lie in"):
        eq.Transform(rotation=90).validate()
    with pytest.raises(ValueError, match="scale"):
        eq.Transform(scale=float("nan")).validate()


def test_the_sweep_is_one_batch_that_matches_reading_each_angle(model: CapsNet) -> None:
    image = np.zeros((28, 28), np.float32)
    image[6:22, 12:16] = 1.0
    base = eq.Transform(scale=1.1, thickness=0.5)
    sweep = eq.rotation_sweep(model, image, base, capsule=4)
    assert sweep.poses.shape == (37, 16) and sweep.images.shape == (37, 28, 28) and sweep.capsule == 4
    assert eq.SWEEP_ANGLES[0] == -45 and eq.SWEEP_ANGLES[-1] == 45 and len(eq.SWEEP_ANGLES) == 37
    for a in (0, 18, 36):
        one = eq.read_transforms(model, image, [dataclasses.replace(base, rotation=float(eq.SWEEP_ANGLES[a]))], 4)
        np.testing.assert_allclose(sweep.poses[a], one.poses[0], atol=1e-4)
        np.testing.assert_allclose(sweep.reconstructions[a], one.reconstructions[0], atol=1e-4)
    moves = eq.sensitivity(model, image, base, capsule=4)
    assert set(moves) == set(eq.LIMITS) and all(m.shape == (16,) and (m >= 0).all() for m in moves.values())
    assert moves["rotation"].sum() > 0  # turning the input moves the pose


def test_a_colour_picture_is_read_in_colour_and_its_edges_carried_out() -> None:
    """The lens reads a colour model's (H, W, 3) picture, transforms its three channels alike and gives
    pictures back (with the redraws) in colour; what comes in from outside a photo is its edge, not black."""
    torch.manual_seed(2)
    net = CapsNet(CapsNetConfig.preset("tiny", in_channels=3, image_size=32)).eval()
    picture = np.zeros((32, 32, 3), np.float32)
    picture[..., 2] = 0.8  # a blue photo
    picture[:, :8, 0] = 1.0  # with a red band at its left edge
    reading = eq.read_transforms(net, picture, [eq.Transform(), eq.Transform(dx=4.0)])
    assert reading.images.shape == (2, 32, 32, 3)
    assert reading.reconstructions is not None and reading.reconstructions.shape == (2, 32, 32, 3)
    np.testing.assert_allclose(reading.images[0], picture, atol=1e-6)  # the identity is the identity
    moved = reading.images[1]
    np.testing.assert_allclose(moved[:, :4, 0], 1.0, atol=1e-6)  # the edge carried in: red, not black
    np.testing.assert_allclose(moved[..., 2], 0.8, atol=1e-5)  # the blue channel moved as it is: still blue
    grey = eq.transform(torch.ones(1, 1, 8, 8), [eq.Transform(dx=4.0)])
    assert float(grey[0, 0, :, :2].max()) == 0.0  # a digit's background comes in black
