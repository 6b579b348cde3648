"""Pose under transforms: how a capsule's 16-D vector follows a rotated, scaled, sheared or thickened input.

Sabour, Frosst & Hinton (2017), sections 1 and 5.1: a capsule's length says whether an
entity is there (invariance), its direction how it is posed (equivariance). `transform`
applies any number of different transforms to a batch in one `grid_sample` (no loop over
images); `read_transformed` reads one transformed input; `rotation_sweep` reads a whole range
of angles in one batched forward pass; `sensitivity` says which pose dimensions move most with
each kind of transform.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from capsnet.data.pictures import as_inputs, as_pictures, picture_of
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.em_capsnet import EMCapsNet

# the transform lens's ranges: (low, high) of each field of `Transform`
LIMITS = {
    "rotation": (-45.0, 45.0),  # degrees, counter-clockwise
    "scale": (0.7, 1.3),
    "shear": (-30.0, 30.0),  # degrees: horizontal shear (the top leans right for a positive angle)
    "dx": (-4.0, 4.0),  # pixels, to the right
    "dy": (-4.0, 4.0),  # pixels, down
    "thickness": (-1.0, 2.0),  # pixels of stroke added on each side (negative: thinner)
}
SWEEP_ANGLES = np.linspace(-45.0, 45.0, 37).astype(np.float32)  # every 2.5 degrees
CHUNK = 13  # images per forward pass: the votes of 13 (9.6 MB) stay in cache; all 37 at once (27 MB) run 25% slower
SENSITIVITY_STEPS = {"rotation": 10.0, "scale": 0.1, "shear": 10.0, "dx": 2.0, "dy": 2.0, "thickness": 1.0}


@dataclass(frozen=True)
class Transform:
    """One input transform; the identity by default."""

    rotation: float = 0.0
    scale: float = 1.0
    shear: float = 0.0
    dx: float = 0.0
    dy: float = 0.0
    thickness: float = 0.0

    def validate(self) -> Transform:
        for name, (low, high) in LIMITS.items():
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name} must lie in [{low:g}, {high:g}], got {value!r}")
        return self


def _affine_thetas(transforms: list[Transform]) -> tuple[Tensor, Tensor]:
    """The inverse of each transform's linear part (B, 2, 2) and its shift in pixels (B, 2).

    The forward map, about the image centre, is translate . rotate . shear . scale, with x to the
    right and y down; its inverse is what a sampling grid needs.
    """
    t = torch.tensor([[tr.rotation, tr.scale, tr.shear, tr.dx, tr.dy] for tr in transforms], dtype=torch.float64)
    angle, scale, shear = torch.deg2rad(t[:, 0]), t[:, 1], torch.deg2rad(t[:, 2])
    cos, sin = torch.cos(angle), torch.sin(angle)
    rotate = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)  # (B, 2, 2), y down
    lean = torch.zeros(len(transforms), 2, 2, dtype=torch.float64)
    lean[:, 0, 0] = lean[:, 1, 1] = 1.0
    lean[:, 0, 1] = -torch.tan(shear)  # rows higher up (smaller y) move right for a positive angle
    forward = rotate @ lean * scale[:, None, None]  # (B, 2, 2)
    inverse = torch.linalg.inv(forward)
    return inverse, t[:, 3:5]


def transform(images: Tensor, transforms: list[Transform]) -> Tensor:
    """Apply transforms[b] to images[b] (B, C, H, W) in [0, 1], all at once; bilinear sampling. What comes in from
    outside the picture is black for a grey one (a digit's background), the nearest edge pixel for a colour one (a
    photo has no blank background).

    Stroke thickness is changed first (a 3x3 grey dilation per added pixel, an erosion per
    removed one, blended for fractions, each channel alike), then the affine transform.
    """
    if images.dim() != 4 or len(transforms) != images.shape[0]:
        raise ValueError(
            f"need images (B, C, H, W) and one transform each, got {tuple(images.shape)}, {len(transforms)}"
        )
    b, _, h, w = images.shape
    images = _thicken(images, torch.tensor([tr.thickness for tr in transforms], dtype=images.dtype))
    inverse, shift = _affine_thetas(transforms)
    pixels = torch.tensor([w, h], dtype=torch.float64)
    theta = torch.cat([inverse, (-inverse @ (2 * shift / pixels)[:, :, None])], dim=2)  # (B, 2, 3)
    grid = F.affine_grid(theta.to(images.dtype), list(images.shape), align_corners=False)  # (B, H, W, 2)
    fill = "zeros" if images.shape[1] == 1 else "border"
    return F.grid_sample(images, grid, mode="bilinear", padding_mode=fill, align_corners=False).clamp(0.0, 1.0)


def _thicken(images: Tensor, amount: Tensor) -> Tensor:
    """Per-image stroke thickness change: (B, C, H, W), (B,) in [-1, 2] pixels."""
    if not bool((amount != 0).any()):
        return images

    def dilate(x: Tensor) -> Tensor:
        return F.max_pool2d(x, 3, stride=1, padding=1)

    levels = torch.stack([-dilate(-images), images, dilate(images), dilate(dilate(images))])  # (4, B, C, H, W)
    position = (amount.clamp(-1.0, 2.0) + 1.0).to(images.dtype)  # level index: -1 -> 0, 0 -> 1, 2 -> 3
    low = position.floor().clamp(max=2).long()  # (B,)
    frac = (position - low.to(images.dtype))[:, None, None, None]  # (B, 1, 1, 1)
    index = torch.arange(images.shape[0])
    return levels[low, index] * (1 - frac) + levels[low + 1, index] * frac


@dataclass
class TransformedReading:
    """What the network reads from transformed inputs, for one tracked capsule."""

    images: np.ndarray  # (A, H, W) the transformed inputs as pictures, (A, H, W, 3) in colour
    lengths: np.ndarray  # (A, K) the class scores: capsule lengths, or the EM network's activations a_j
    predictions: np.ndarray  # (A,)
    capsule: int  # the capsule tracked (its pose, its reconstruction)
    poses: np.ndarray  # (A, D) that capsule's pose
    reconstructions: np.ndarray | None  # (A, H, W[, 3]) decoded from that capsule; None for a network without a decoder


def read_transforms(
    model: CapsNet | EMCapsNet, image: np.ndarray, transforms: list[Transform], capsule: int | None = None
) -> TransformedReading:
    """`image` under each transform, read in batches of CHUNK; `capsule`: whose pose (default: the first's winner)."""
    if model.training:
        raise ValueError("read_transforms needs the model in eval mode (call model.eval())")
    for tr in transforms:
        tr.validate()
    channels, side = model.config.in_channels, model.config.image_size
    base = as_inputs(picture_of(image, channels, side)[None])  # (1, C, H, W)
    device = next(model.parameters()).device
    with torch.inference_mode():
        x = transform(base.expand(len(transforms), -1, -1, -1), transforms).to(device)  # (A, C, H, W)
        tracked = int(model(x[:1]).prediction[0]) if capsule is None else int(capsule)
        if not 0 <= tracked < model.config.num_classes:
            raise ValueError(f"capsule must lie in [0, {model.config.num_classes}), got {capsule}")
        outs = [model(x[start : start + CHUNK], decode_class=tracked) for start in range(0, len(x), CHUNK)]
    lengths = torch.cat([o.scores for o in outs])  # (A, K): lengths, or the EM network's activations
    poses = torch.cat([o.poses[:, tracked] for o in outs])  # (A, D): a vector capsule, or a 4x4 pose's 16 entries
    redraws = outs[0].reconstruction is not None
    recon = torch.cat([o.reconstruction for o in outs]) if redraws else None  # (A, C, H, W), from the tracked one
    return TransformedReading(
        images=as_pictures(x),  # (A, H, W) or (A, H, W, 3)
        lengths=lengths.float().cpu().numpy(),
        predictions=lengths.argmax(dim=1).cpu().numpy(),
        capsule=tracked,
        poses=poses.float().cpu().numpy(),
        reconstructions=as_pictures(recon.float()) if recon is not None else None,
    )


def rotation_sweep(
    model: CapsNet | EMCapsNet, image: np.ndarray, base: Transform, capsule: int, angles: np.ndarray = SWEEP_ANGLES
) -> TransformedReading:
    """`base` with each rotation in `angles` (37 by default), read in one batch, tracking `capsule`."""
    transforms = [dataclasses.replace(base, rotation=float(a)) for a in angles]
    return read_transforms(model, image, transforms, capsule)


def sensitivity(model: CapsNet | EMCapsNet, image: np.ndarray, base: Transform, capsule: int) -> dict[str, np.ndarray]:
    """How much each pose dimension of `capsule` moves per kind of transform, around `base`: name -> (D,).

    Central differences: each kind is stepped by SENSITIVITY_STEPS down and up (within LIMITS),
    all 12 inputs in one batch; the result is the change in the dimension over that step.
    """
    transforms = []
    for name, step in SENSITIVITY_STEPS.items():
        low, high = LIMITS[name]
        value = getattr(base, name)
        transforms += [
            dataclasses.replace(base, **{name: max(low, value - step)}),
            dataclasses.replace(base, **{name: min(high, value + step)}),
        ]
    poses = read_transforms(model, image, transforms, capsule).poses  # (12, D)
    moves = np.abs(poses[1::2] - poses[0::2])  # (6, D)
    return {name: moves[k] for k, name in enumerate(SENSITIVITY_STEPS)}
