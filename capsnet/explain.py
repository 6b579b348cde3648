"""The numbers the dashboard shows, as pure functions of a model and an input.

Every function here runs without Streamlit and returns NumPy arrays (cheap to
cache and to plot). Nothing loops over capsules or examples in Python: each
view is one forward pass, one batched decode or one reshape.

Notation (Sabour, Frosst & Hinton 2017): i indexes the primary capsules
(i = type * grid^2 + y * grid + x, 1152 of them in the paper's model), j the
digit capsules, c_ij the coupling coefficients of routing, v_j the digit
capsules and |v_j| their lengths (the probability that digit j is present).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from capsnet.checkpoint_info import CheckpointInfo
from capsnet.model import CapsNet
from capsnet.preprocess import as_model_input

# Figure 4 of the paper: each dimension moved by -0.25 ... +0.25 in steps of 0.05 (11 steps)
PERTURBATION_STEPS: np.ndarray = np.round(np.linspace(-0.25, 0.25, 11), 2).astype(np.float32)
DEFAULT_DIMENSION_STD = 0.25  # the slider half-range is 2 x this when a checkpoint has no statistics: +/- 0.5

Weighting = Literal["length", "mean"]


@dataclass
class Explanation:
    """One input image read by the network, with everything the pages draw."""

    image: np.ndarray  # (28, 28) the input, in [0, 1]
    lengths: np.ndarray  # (K,) |v_j| after the last routing iteration
    prediction: int  # argmax_j |v_j|
    poses: np.ndarray  # (K, D) the digit capsules v_j
    reconstruction: np.ndarray  # (28, 28) decoded from the capsule of `decode_class`
    decode_class: int  # the class whose capsule was decoded (the prediction unless asked otherwise)
    reconstruction_error: float  # sum of squared pixel errors of the winner's reconstruction (`capsnet.novelty`)
    iterations: int  # routing iterations r
    coupling: np.ndarray  # (r, N, K) c_ij used in each iteration; sums to 1 over K
    iteration_lengths: np.ndarray  # (r, K) |v_j| after each iteration
    primary_lengths: np.ndarray  # (N,) |u_i| of the primary capsules
    primary_types: int
    primary_grid: int


def _model_device(model: CapsNet) -> torch.device:
    return next(model.parameters()).device


def _check_class(model: CapsNet, class_index: int) -> int:
    k = model.config.num_classes
    if not 0 <= int(class_index) < k:
        raise ValueError(f"class index must lie in [0, {k}), got {class_index}")
    return int(class_index)


def explain(
    model: CapsNet,
    image: np.ndarray | torch.Tensor,
    routing_iterations: int | None = None,
    decode_class: int | None = None,
) -> Explanation:
    """Read one 28x28 image: lengths, prediction, reconstruction, routing trace and primary capsules.

    `routing_iterations` (any r >= 1) overrides the model's own r for this reading only;
    `decode_class` reconstructs from another class's capsule than the predicted one.
    The model must be in eval mode (a loaded checkpoint is).
    """
    if model.training:
        raise ValueError("explain needs the model in eval mode (call model.eval())")
    iterations = model.config.routing_iterations if routing_iterations is None else int(routing_iterations)
    if iterations < 1:
        raise ValueError(f"routing needs at least 1 iteration, got {iterations}")
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    image = np.asarray(image, dtype=np.float32).reshape(-1)
    side = model.config.image_size
    if image.size != side * side:
        raise ValueError(f"expected one {side}x{side} image, got {image.size} pixels")
    x = as_model_input(image.reshape(side, side)).to(_model_device(model))  # (1, 1, 28, 28)
    with torch.inference_mode():
        out = model(x, routing_iterations=iterations, return_trace=True, return_primary=True)
        prediction = int(out.prediction[0])
        chosen = prediction if decode_class is None else _check_class(model, decode_class)
        reconstruction = out.reconstruction if chosen == prediction else model.decode(out.poses, chosen)
        error = float((out.reconstruction.float() - x.float()).square().sum())  # out.reconstruction: the winner's
    assert out.trace is not None and out.primary is not None
    c = model.config
    return Explanation(
        image=image.reshape(side, side),
        lengths=out.lengths[0].float().cpu().numpy(),
        prediction=prediction,
        poses=out.poses[0].float().cpu().numpy(),
        reconstruction=reconstruction[0, 0].float().cpu().numpy(),
        decode_class=chosen,
        reconstruction_error=error,
        iterations=iterations,
        coupling=out.trace.coupling[0].float().cpu().numpy(),  # (r, N, K)
        iteration_lengths=out.trace.lengths[0].float().cpu().numpy(),  # (r, K)
        primary_lengths=out.primary.lengths[0].float().cpu().numpy(),  # (N,)
        primary_types=c.primary_types,
        primary_grid=c.primary_grid,
    )


def coupling_by_type(
    coupling: np.ndarray, weights: np.ndarray | None, types: int, grid: int, weighting: Weighting = "length"
) -> np.ndarray:
    """Coupling coefficients aggregated per primary-capsule type: (r, N, K) -> (r, types, K).

    Each type has grid x grid capsules (36 in the paper's model). With
    `weighting="length"` the aggregate is the mean of c_ij weighted by the primary
    capsule's length |u_i|: a capsule that detected nothing (|u_i| ~ 0) predicts
    nothing and keeps the uniform c_ij = 1/K, so weighting shows where the evidence
    that is actually present is sent. `weighting="mean"` is the plain mean over the
    type's capsules. Either way each row still sums to 1 over the K digit capsules.
    """
    coupling = np.asarray(coupling, dtype=np.float32)
    if coupling.ndim != 3 or coupling.shape[1] != types * grid * grid:
        raise ValueError(f"expected coupling of shape (r, {types * grid * grid}, K), got {coupling.shape}")
    r, _, k = coupling.shape
    per_type = coupling.reshape(r, types, grid * grid, k)  # (r, types, grid^2, K)
    if weighting == "mean":
        return per_type.mean(axis=2)  # (r, types, K)
    if weighting != "length":
        raise ValueError(f"weighting must be 'length' or 'mean', got {weighting!r}")
    if weights is None:
        raise ValueError("weighting='length' needs the primary-capsule lengths")
    w = np.asarray(weights, dtype=np.float32).reshape(1, types, grid * grid, 1)  # (1, types, grid^2, 1)
    total = w.sum(axis=2)  # (1, types, 1)
    weighted = (per_type * w).sum(axis=2) / np.maximum(total, 1e-12)  # (r, types, K)
    # a type with no active capsule at all falls back to its plain mean
    return np.where(total > 1e-12, weighted, per_type.mean(axis=2)).astype(np.float32)


def coupling_maps(coupling: np.ndarray, digit: int, types: int, grid: int) -> np.ndarray:
    """Coupling of every primary capsule to one digit capsule, as spatial maps: (r, N, K) -> (r, types, grid, grid)."""
    coupling = np.asarray(coupling, dtype=np.float32)
    if not 0 <= digit < coupling.shape[-1]:
        raise ValueError(f"digit capsule must lie in [0, {coupling.shape[-1]}), got {digit}")
    return coupling[:, :, digit].reshape(coupling.shape[0], types, grid, grid)  # (r, 32, 6, 6)


def decode_vector(model: CapsNet, vector: np.ndarray | torch.Tensor, class_index: int) -> np.ndarray:
    """Decode one 16-D capsule vector placed in `class_index`'s row: (D,) -> (28, 28)."""
    class_index = _check_class(model, class_index)
    c = model.config
    vec = torch.as_tensor(np.asarray(vector, dtype=np.float32)).reshape(-1)
    if vec.numel() != c.digit_dim:
        raise ValueError(f"expected a {c.digit_dim}-D vector, got {vec.numel()} values")
    poses = torch.zeros(1, c.num_classes, c.digit_dim)  # (1, K, D)
    poses[0, class_index] = vec
    with torch.inference_mode():
        image = model.decode(poses.to(_model_device(model)), class_index)  # (1, 1, 28, 28)
    return image[0, 0].float().cpu().numpy()


def perturbation_grid(
    model: CapsNet, vector: np.ndarray | torch.Tensor, class_index: int, steps: np.ndarray = PERTURBATION_STEPS
) -> np.ndarray:
    """Figure 4 of the paper: each dimension of a capsule moved by each step, all in ONE batched decode.

    (D,) vector -> (D, S, 28, 28) images; row d has dimension d set to vector[d] + step.
    """
    class_index = _check_class(model, class_index)
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
        images = model.decode(poses.to(_model_device(model)), class_index)  # (D*S, 1, 28, 28)
    side = c.image_size
    return images.float().cpu().numpy().reshape(d, s, side, side)


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


@dataclass
class Reconstructions:
    """A batch read by the network: reconstructions from the predicted capsules."""

    reconstructions: np.ndarray  # (B, 28, 28)
    lengths: np.ndarray  # (B, K)
    predictions: np.ndarray  # (B,)


def reconstruct(model: CapsNet, images: torch.Tensor | np.ndarray, batch_size: int = 256) -> Reconstructions:
    """Lengths, predictions and reconstructions (from the predicted capsule) of images (B, 1, 28, 28)."""
    x = torch.as_tensor(images, dtype=torch.float32)
    side = model.config.image_size
    x = x.reshape(-1, 1, side, side)  # (B, 1, 28, 28)
    device = _model_device(model)
    recon, lengths, predictions = [], [], []
    with torch.inference_mode():
        for start in range(0, len(x), batch_size):  # batches, not examples
            out = model(x[start : start + batch_size].to(device))
            recon.append(out.reconstruction[:, 0].float().cpu())
            lengths.append(out.lengths.float().cpu())
            predictions.append(out.prediction.cpu())
    if not recon:
        empty = np.zeros((0, side, side), dtype=np.float32)
        return Reconstructions(empty, np.zeros((0, model.config.num_classes), np.float32), np.zeros(0, np.int64))
    return Reconstructions(
        reconstructions=torch.cat(recon).numpy(),
        lengths=torch.cat(lengths).numpy(),
        predictions=torch.cat(predictions).numpy(),
    )


def misclassified(predictions: np.ndarray, labels: np.ndarray, lengths: np.ndarray, limit: int = 12) -> np.ndarray:
    """Indices of wrongly classified examples, the most confidently wrong first (longest wrong capsule)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    wrong = np.flatnonzero(predictions != labels)
    confidence = np.asarray(lengths)[wrong, predictions[wrong]]
    return wrong[np.argsort(-confidence, kind="stable")][:limit]


@dataclass
class PairExplanation:
    """Two overlapping digits read by a MultiMNIST model: the paper's Figure 5, for one input."""

    image: np.ndarray  # (H, W) the overlay, in [0, 1]
    lengths: np.ndarray  # (K,)
    top: tuple[int, int]  # the two longest capsules, longest first
    reconstructions: np.ndarray  # (2, H, W): each of the two redrawn from its own capsule
    coupling: np.ndarray  # (r, N, K) the last reading's couplings (for the routing overlay)
    primary_lengths: np.ndarray  # (N,)


def explain_pair(model: CapsNet, image: np.ndarray | torch.Tensor) -> PairExplanation:
    """Read an overlay of two digits (H, W): the two longest capsules, and each redrawn from its own capsule alone."""
    if model.training:
        raise ValueError("explain_pair needs the model in eval mode (call model.eval())")
    side = model.config.image_size
    x = torch.as_tensor(np.asarray(image, dtype=np.float32)).reshape(1, 1, side, side)
    with torch.inference_mode():
        out = model(x.to(_model_device(model)), return_trace=True, return_primary=True)
        top = out.lengths[0].topk(2).indices  # (2,)
        redrawn = model.decode(out.poses.expand(2, -1, -1), top)  # (2, 1, H, W): one capsule each
    assert out.trace is not None and out.primary is not None
    return PairExplanation(
        image=x[0, 0].numpy(),
        lengths=out.lengths[0].float().cpu().numpy(),
        top=(int(top[0]), int(top[1])),
        reconstructions=redrawn[:, 0].float().cpu().numpy(),
        coupling=out.trace.coupling[0, -1:].float().cpu().numpy(),  # (1, N, K): the last iteration's
        primary_lengths=out.primary.lengths[0].float().cpu().numpy(),
    )
