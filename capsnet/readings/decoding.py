"""Decoding any capsule vector: one vector redrawn, the paper's figure 4 (each dimension perturbed), slider ranges.

Sabour, Frosst & Hinton (2017), section 5.1: the decoder redraws the input from the 16-D vector of
one digit capsule (the others masked out); moving one dimension of that vector changes one aspect of
the drawing (stroke thickness, skew, width...). Everything is one batched decode, no Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from capsnet.checkpoints.header import CheckpointInfo
from capsnet.data.pictures import as_pictures
from capsnet.nn.capsnet import CapsNet

# Figure 4 of the paper: each dimension moved by -0.25 ... +0.25 in steps of 0.05 (11 steps)
PERTURBATION_STEPS: np.ndarray = np.round(np.linspace(-0.25, 0.25, 11), 2).astype(np.float32)
SPREADS_PER_HALF_RANGE = 4  # Figure 4's half-range is at most 4 of the capsule's own standard deviations


def perturbation_steps(dimension_std: object = None) -> np.ndarray:
    """Figure 4's 11 steps: the paper's -0.25 .. +0.25, or +/- 4 of the capsule's mean standard deviation
    (`CheckpointInfo.dimension_std`) where that is narrower. The CapsNet's dimensions spread about 0.08, so it keeps
    the paper's range; the EM network's pose entries spread about 0.016, and +/- 0.25 (15 of their standard
    deviations) turned most of its rows into broken drawings."""
    try:
        stds = np.asarray(dimension_std, dtype=np.float64)
    except (TypeError, ValueError):  # statistics of another shape or kind: the paper's range
        return PERTURBATION_STEPS
    if stds.size == 0:  # no statistics kept
        return PERTURBATION_STEPS
    spread = float(stds.mean())
    if not np.isfinite(spread) or spread <= 0 or SPREADS_PER_HALF_RANGE * spread >= float(PERTURBATION_STEPS[-1]):
        return PERTURBATION_STEPS
    half = np.round(SPREADS_PER_HALF_RANGE * spread, 3)
    return np.round(np.linspace(-half, half, len(PERTURBATION_STEPS)), 4).astype(np.float32)


DEFAULT_DIMENSION_STD = 0.25  # the slider half-range is 2 x this when a checkpoint has no statistics: +/- 0.5


def decode_vector(model: CapsNet, vector: np.ndarray | torch.Tensor, class_index: int) -> np.ndarray:
    """Decode one 16-D capsule vector placed in `class_index`'s row: (D,) -> a picture (H, W), or (H, W, 3) in colour."""
    class_index = model.config.check_class(class_index)
    c = model.config
    vec = torch.as_tensor(np.asarray(vector, dtype=np.float32)).reshape(-1)
    if vec.numel() != c.digit_dim:
        raise ValueError(f"expected a {c.digit_dim}-D vector, got {vec.numel()} values")
    poses = torch.zeros(1, c.num_classes, c.digit_dim)  # (1, K, D)
    poses[0, class_index] = vec
    with torch.inference_mode():
        image = model.decode(poses.to(model.device), class_index)  # (1, C, H, W)
    return as_pictures(image.float())[0]  # (H, W) or (H, W, 3)


def perturbation_grid(
    model: CapsNet, vector: np.ndarray | torch.Tensor, class_index: int, steps: np.ndarray = PERTURBATION_STEPS
) -> np.ndarray:
    """Figure 4 of the paper: each dimension of a capsule moved by each step, all in ONE batched decode.

    (D,) vector -> (D, S, H, W) pictures, (D, S, H, W, 3) in colour; row d has dimension d set to vector[d] + step.
    """
    class_index = model.config.check_class(class_index)
    c = model.config
    base = torch.as_tensor(np.asarray(vector, dtype=np.float32)).reshape(-1)  # (D,)
    if base.numel() != c.digit_dim:
        raise ValueError(f"expected a {c.digit_dim}-D vector, got {base.numel()} values")
    deltas = torch.as_tensor(np.asarray(steps, dtype=np.float32)).reshape(-1)  # (S,)
    d, s = c.digit_dim, deltas.numel()
    vectors = base.expand(d, s, d).clone()  # (D, S, D): one copy per (dimension, step)
    dims = torch.arange(d)
    vectors[dims, :, dims] += deltas  # vectors[d, :, d] = base[d] + steps
    poses = torch.zeros(d * s, c.num_classes, c.digit_dim)  # (D*S, K, D)
    poses[:, class_index] = vectors.reshape(d * s, d)
    with torch.inference_mode():
        images = model.decode(poses.to(model.device), class_index)  # (D*S, C, H, W)
    pictures = as_pictures(images.float())  # (D*S, H, W) or (D*S, H, W, 3)
    return pictures.reshape(d, s, *pictures.shape[1:])  # (D, S, H, W[, 3])


@dataclass
class DimensionRanges:
    """Slider bounds for the dimensions of one class's capsule, and where they come from."""

    low: np.ndarray  # (D,)
    high: np.ndarray  # (D,)
    from_statistics: bool  # True: mean +/- 2 std of the class on the test set; False: +/- 0.5 around 0


def dimension_ranges(
    info: CheckpointInfo, class_index: int, current: np.ndarray | None = None, digit_dim: int = 16, spread: float = 2.0
) -> DimensionRanges:
    """Slider bounds for each dimension of a class's capsule: mean +/- 2 std from the checkpoint.

    The statistics are those of correctly classified test examples of the class
    (`info.dimension_mean`, `info.dimension_std`). Without usable ones the range is
    -0.5..0.5 and `from_statistics` says so. The range is widened when needed so that it
    always holds `current` (a drawn digit can lie outside the test set's spread).
    """
    stats = info.dimension_stats(class_index, digit_dim)
    if stats is None:
        mean = np.zeros(digit_dim, dtype=np.float32)
        std = np.full(digit_dim, DEFAULT_DIMENSION_STD, dtype=np.float32)
    else:
        mean, std = stats
    std = np.maximum(std, 0.02)  # a dimension that never varied still gets a usable slider
    low, high = mean - spread * std, mean + spread * std
    if current is not None:
        cur = np.asarray(current, dtype=np.float32).reshape(-1)
        pad = 0.1 * (high - low)
        low = np.minimum(low, cur - pad)
        high = np.maximum(high, cur + pad)
    return DimensionRanges(low.astype(np.float32), high.astype(np.float32), from_statistics=stats is not None)
