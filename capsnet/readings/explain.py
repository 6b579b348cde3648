"""One input read by the network, with its routing trace: what the Draw, Routing and Overlapping pages show.

Every function here runs without Streamlit and returns NumPy arrays (cheap to cache and to
plot): each view is one forward pass or one reshape, with no Python loop over capsules. The
decoding of capsule vectors is in `capsnet.readings.decoding`, a test set's readings in `capsnet.readings.reconstruction`.

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

from capsnet.data.pictures import as_inputs, as_pictures, picture_of
from capsnet.nn.capsnet import CapsNet
from capsnet.readings.agreement import Votes, votes_from_trace

Weighting = Literal["length", "mean"]


@dataclass
class Explanation:
    """One input image read by the network, with everything the pages draw."""

    image: np.ndarray  # (H, W) the input, in [0, 1]; (H, W, 3) in colour
    lengths: np.ndarray  # (K,) |v_j| after the last routing iteration
    prediction: int  # argmax_j |v_j|
    poses: np.ndarray  # (K, D) the digit capsules v_j
    reconstruction: np.ndarray  # (H, W) (or (H, W, 3)) decoded from the capsule of `decode_class`
    decode_class: int  # the class whose capsule was decoded (the prediction unless asked otherwise)
    reconstruction_error: (
        float  # sum of squared pixel errors of the winner's reconstruction (`capsnet.readings.novelty`)
    )
    iterations: int  # routing iterations r
    votes: Votes  # every vote u_hat_{j|i}, c_ij, s_j, v_j and agreement of each iteration: the one pass's trace
    primary_types: int
    primary_grid: int
    features: np.ndarray  # (C1, S, S) Conv1's feature maps, after the ReLU (the Architecture page's first stage)
    primary: np.ndarray  # (N, P) the primary capsules u_i

    @property
    def masked(self) -> np.ndarray:
        """(K, D) the decoder's input: every digit capsule but the decoded one zeroed."""
        masked = np.zeros_like(self.poses)
        masked[self.decode_class] = self.poses[self.decode_class]
        return masked

    @property
    def coupling(self) -> np.ndarray:
        """(r, N, K) c_ij used in each iteration; sums to 1 over K."""
        return self.votes.coupling

    @property
    def iteration_lengths(self) -> np.ndarray:
        """(r, K) |v_j| after each iteration."""
        return self.votes.lengths

    @property
    def primary_lengths(self) -> np.ndarray:
        """(N,) |u_i| of the primary capsules."""
        return self.votes.primary_lengths

    @property
    def first_prediction(self) -> int:
        """The longest capsule after the first iteration, with uniform couplings: before routing has chosen."""
        return int(np.argmax(self.votes.lengths[0]))

    @property
    def runner_up(self) -> int:
        """The second-longest capsule: the prediction's closest rival."""
        return int(np.argsort(self.lengths)[-2])


def explain(
    model: CapsNet,
    image: np.ndarray | torch.Tensor,
    routing_iterations: int | None = None,
    decode_class: int | None = None,
) -> Explanation:
    """Read one image in one forward pass that keeps every stage: Conv1's maps, the primary capsules, the routing
    trace (votes, couplings, s_j, v_j), lengths, prediction and reconstruction.

    `routing_iterations` (any r >= 1) overrides the model's own r for this reading only;
    `decode_class` reconstructs from another class's capsule than the predicted one.
    The model must be in eval mode (a loaded checkpoint is).
    """
    if model.training:
        raise ValueError("explain needs the model in eval mode (call model.eval())")
    iterations = model.config.routing_iterations if routing_iterations is None else int(routing_iterations)
    picture = picture_of(image, model.config.in_channels, model.config.image_size)  # (H, W) or (H, W, 3)
    x = as_inputs(picture[None]).to(model.device)  # (1, C, H, W)
    with torch.inference_mode():
        out = model(x, routing_iterations=iterations, return_trace=True, return_primary=True, return_features=True)
        prediction = int(out.prediction[0])
        chosen = prediction if decode_class is None else model.config.check_class(decode_class)
        reconstruction = out.reconstruction if chosen == prediction else model.decode(out.poses, chosen)
        error = float((out.reconstruction.float() - x.float()).square().sum())  # out.reconstruction: the winner's
    assert out.trace is not None and out.primary is not None and out.features is not None
    c = model.config
    return Explanation(
        image=picture,
        lengths=out.lengths[0].float().cpu().numpy(),
        prediction=prediction,
        poses=out.poses[0].float().cpu().numpy(),
        reconstruction=as_pictures(reconstruction.float())[0],
        decode_class=chosen,
        reconstruction_error=error,
        iterations=iterations,
        votes=votes_from_trace(out.trace, out.primary.lengths),
        primary_types=c.primary_types,
        primary_grid=c.primary_grid,
        features=out.features[0].float().cpu().numpy(),
        primary=out.primary.poses[0].float().cpu().numpy(),
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
        out = model(x.to(model.device), return_trace=True, return_primary=True)
        top = out.lengths[0].topk(2).indices  # (2,)
        redrawn = model.decode(out.poses.expand(2, -1, -1), top)  # (2, 1, H, W): one capsule each
    assert out.trace is not None and out.primary is not None
    return PairExplanation(
        image=x[0, 0].numpy(),
        lengths=out.lengths[0].float().cpu().numpy(),
        top=(int(top[0]), int(top[1])),
        reconstructions=redrawn[:, 0].float().cpu().numpy(),
        coupling=out.trace.coupling[0, -1:].transpose(1, 2).float().cpu().numpy(),  # (1, N, K): the last iteration's
        primary_lengths=out.primary.lengths[0].float().cpu().numpy(),
    )
