"""Routing by agreement made visible: the votes, where they point, and which part of the input cast them.

Sabour, Frosst & Hinton (2017), section 2: each primary capsule i casts a vote
u_hat_{j|i} = W_ij u_i for every digit capsule j; routing gives more weight (c_ij) to the
votes that agree with the consensus v_j. For one input this module returns every vote and
coupling (`votes_from_trace`, from the forward pass's own trace), a 2-D view of one capsule's 1,152 votes in a basis fixed across the
iterations (`vote_view`), the share of all vote mass each digit capsule receives (`vote_mass`),
and the receptive field of every primary capsule on the input, to colour the strokes by the
digit capsule they vote for (`pixel_votes`). Everything is vectorised: no loop over capsules.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from capsnet.nn.config import CapsNetConfig
from capsnet.nn.dynamic_routing import RoutingTrace

MOVED = 0.01  # a coupling "moved" when it is this far from uniform (1/K; 1/(K+1) with "none of the above")


@dataclass
class Votes:
    """Every vote and coupling of one input, iteration by iteration."""

    votes: np.ndarray  # (K, N, D) u_hat_{j|i}
    coupling: np.ndarray  # (r, N, K) c_ij used in iteration t; sums to 1 over K (less with "none of the above")
    sums: np.ndarray  # (r, K, D) s_j = sum_i c_ij u_hat_{j|i} in iteration t
    poses: np.ndarray  # (r, K, D) v_j = squash(s_j) after iteration t
    agreement: np.ndarray  # (r, N, K) u_hat_{j|i} . v_j after iteration t (what iteration t + 1 adds to b_ij)
    primary_lengths: np.ndarray  # (N,) |u_i|
    leak: bool = False  # routed with the "none-of-the-above" category: a child's couplings may sum to less than 1

    @property
    def uniform(self) -> float:
        """A coupling before routing has measured any agreement: 1/K, or 1/(K+1) with "none of the above"."""
        return 1.0 / (self.votes.shape[0] + int(self.leak))

    @property
    def iterations(self) -> int:
        return self.coupling.shape[0]

    @property
    def lengths(self) -> np.ndarray:
        """(r, K) |v_j| after each iteration."""
        return np.linalg.norm(self.poses, axis=-1)


def votes_from_trace(trace: RoutingTrace, primary_lengths: torch.Tensor, index: int = 0) -> Votes:
    """Example `index`'s votes and routing, as NumPy arrays, from a forward pass's trace (no recomputation)."""
    return Votes(
        votes=trace.votes[index].float().cpu().numpy(),  # (K, N, D)
        coupling=trace.coupling[index].transpose(1, 2).float().cpu().numpy(),  # (r, K, N) -> (r, N, K)
        sums=trace.sums[index].float().cpu().numpy(),  # (r, K, D)
        poses=trace.poses[index].float().cpu().numpy(),  # (r, K, D)
        agreement=trace.agreement[index].transpose(1, 2).float().cpu().numpy(),  # (r, K, N) -> (r, N, K)
        primary_lengths=primary_lengths[index].float().cpu().numpy(),  # (N,)
        leak=trace.leak,
    )


# ---------------------------------------------------------------- one capsule's votes in 2-D


def vote_basis(votes: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """An orthonormal (2, D) basis for one capsule's votes (N, D): the consensus's direction, then the votes' spread.

    Axis 1 is v_j / |v_j| (the final pose), so a vote's first coordinate is its agreement with
    the consensus divided by |v_j|; axis 2 is the main direction in which the votes differ
    across it (their first principal component, orthogonal to axis 1). The basis depends on
    the votes and the final pose only, so it is the same for every iteration: what moves
    between frames is the weight of each vote, not the picture.
    """
    votes, pose = np.asarray(votes, dtype=np.float64), np.asarray(pose, dtype=np.float64)
    norm = np.linalg.norm(pose)
    if norm < 1e-9:  # no consensus at all: the votes' own two main directions
        _, _, vt = np.linalg.svd(votes - votes.mean(axis=0), full_matrices=False)
        first = vt[0]
    else:
        first = pose / norm
    residual = votes - np.outer(votes @ first, first)  # (N, D): what is left across axis 1
    _, _, vt = np.linalg.svd(residual - residual.mean(axis=0), full_matrices=False)
    second = vt[0] - (vt[0] @ first) * first  # (D,), orthogonal to the first up to rounding
    second /= max(np.linalg.norm(second), 1e-12)
    second *= np.sign(second[np.argmax(np.abs(second))])  # a fixed sign, so the picture is reproducible
    return np.stack([first, second]).astype(np.float32)


@dataclass
class VoteView:
    """One digit capsule's votes, projected to 2-D, with the weight routing gives each in every iteration."""

    digit: int
    basis: np.ndarray  # (2, D)
    points: np.ndarray  # (N, 2) the votes u_hat_{j|i}, projected (the same in every iteration)
    coupling: np.ndarray  # (r, N) c_ij to this capsule
    change: np.ndarray  # (r, N) c_ij - 1/K (the uniform coupling: 1/(K+1) with "none of the above")
    agreement: np.ndarray  # (r, N) u_hat_{j|i} . v_j after iteration t
    sums: np.ndarray  # (r, 2) s_j projected
    poses: np.ndarray  # (r, 2) v_j projected
    moved_share: float  # share of the couplings to this capsule more than MOVED from 1/K at the last iteration
    largest: int  # the primary capsule whose coupling to this capsule grew the most


def vote_view(votes: Votes, digit: int) -> VoteView:
    """The 2-D view of digit capsule `digit`'s votes (see `vote_basis`)."""
    k = votes.votes.shape[0]
    if not 0 <= digit < k:
        raise ValueError(f"digit capsule must lie in [0, {k}), got {digit}")
    mine = votes.votes[digit]  # (N, D)
    basis = vote_basis(mine, votes.poses[-1, digit])
    coupling = votes.coupling[:, :, digit]  # (r, N)
    change = coupling - votes.uniform
    return VoteView(
        digit=digit,
        basis=basis,
        points=mine @ basis.T,  # (N, 2)
        coupling=coupling,
        change=change,
        agreement=votes.agreement[:, :, digit],
        sums=votes.sums[:, digit] @ basis.T,  # (r, 2)
        poses=votes.poses[:, digit] @ basis.T,  # (r, 2)
        moved_share=float(np.mean(np.abs(change[-1]) > MOVED)),
        largest=int(np.argmax(change[-1])),
    )


def vote_mass(coupling: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """How much of all the vote mass each digit capsule receives in each iteration: (r, N, K) -> (r, K).

    Each child's couplings sum to 1 over the parents, so unweighted each row sums to N (1,152 in the paper's
    model); uniform routing gives every capsule N/K. With `weights` (N,), the primary capsules' lengths |u_i|,
    each child's couplings count as much as it is sure of its feature: the evidence actually present, which
    the thousand or so near-zero capsules of an input no longer drown (each row then sums to sum |u_i|).
    """
    coupling = np.asarray(coupling, dtype=np.float64)
    if weights is None:
        return coupling.sum(axis=1)
    w = np.asarray(weights, dtype=np.float64).reshape(1, -1, 1)  # (1, N, 1)
    return (coupling * w).sum(axis=1)  # (r, K)


def vote_shares(mass: np.ndarray) -> np.ndarray:
    """Each digit capsule's share of all the vote mass (`vote_mass`) in each iteration: (r, K), each row summing to 1."""
    mass = np.asarray(mass, dtype=np.float64)
    return mass / np.maximum(mass.sum(axis=1, keepdims=True), 1e-12)  # (r, K)


def largest_share_change(mass: np.ndarray) -> float:
    """How far the share that moves most moves from iteration 1's, at any later iteration (0 with one iteration)."""
    shares = vote_shares(mass)  # (r, K)
    return float(np.abs(shares - shares[:1]).max())


# ---------------------------------------------------------------- back to the input


def receptive_fields(config: CapsNetConfig) -> np.ndarray:
    """Which input pixels each position of the primary-capsule grid sees: (G, G, H, W) bool.

    Conv1 (k1 x k1, stride 1) then PrimaryCaps (k2 x k2, stride s): position (y, x) sees rows
    s*y ... s*y + k1 + k2 - 2 and the same columns, a 17x17 square in the paper's model.
    Every capsule type at that position shares it.
    """
    g, side = config.primary_grid, config.image_size
    size = config.conv1_kernel + config.primary_kernel - 1
    start = np.arange(g) * config.primary_stride  # (G,)
    pixels = np.arange(side)  # (H,)
    inside = (pixels[None, :] >= start[:, None]) & (pixels[None, :] < start[:, None] + size)  # (G, H)
    return inside[:, None, :, None] & inside[None, :, None, :]  # (G, G, H, W)


def receptive_box(config: CapsNetConfig, index: int) -> tuple[int, int, int]:
    """(top, left, size) of the square of input pixels primary capsule `index` sees (`receptive_fields`' box).

    Rows top ... top + size - 1 and the same columns, clipped to the input: 17x17 at the paper's sizes.
    """
    _, y, x = config.primary_position(index)  # ValueError for an index outside the grid
    size = config.conv1_kernel + config.primary_kernel - 1
    return y * config.primary_stride, x * config.primary_stride, size


@dataclass
class PrimaryReading:
    """One primary capsule through routing: what it detected, where, and where its votes went."""

    index: int  # i = type * G^2 + y * G + x
    kind: int  # its type, from 0
    y: int
    x: int
    box: tuple[int, int, int]  # (top, left, size) of its receptive field on the input
    length: float  # |u_i|
    coupling: np.ndarray  # (r, K) c_ij to each digit capsule in each iteration
    agreement: np.ndarray  # (r, K) u_hat_{j|i} . v_j after each iteration

    @property
    def favourite(self) -> int:
        """The digit capsule it sends most of its vote to after the last iteration."""
        return int(np.argmax(self.coupling[-1]))


def primary_reading(votes: Votes, config: CapsNetConfig, index: int) -> PrimaryReading:
    """Primary capsule `index`'s part in one input's routing (`votes` from `votes_from_trace`)."""
    kind, y, x = config.primary_position(index)
    return PrimaryReading(
        index=int(index),
        kind=kind,
        y=y,
        x=x,
        box=receptive_box(config, index),
        length=float(votes.primary_lengths[index]),
        coupling=votes.coupling[:, index],  # (r, K)
        agreement=votes.agreement[:, index],  # (r, K)
    )


def _ink(image: np.ndarray) -> np.ndarray:
    """What stands out in a picture, (H, W): a grey digit's ink itself; in a colour picture (H, W, 3), each pixel's
    distance from the picture's mean colour (a photo has no blank background to tell strokes from)."""
    picture = np.asarray(image, dtype=np.float32)
    if picture.ndim == 2:
        return picture
    return np.linalg.norm(picture - picture.reshape(-1, picture.shape[-1]).mean(axis=0), axis=-1)  # (H, W)


def first_primary(votes: Votes, image: np.ndarray, config: CapsNetConfig) -> int:
    """A good first capsule to look at: one that is sure of its feature where the ink is and whose couplings routing
    moved: |u_i| times the ink in its receptive field times max_j |c_ij - 1/K| after the last iteration (with one
    iteration, when nothing has moved, the longest where the ink is).

    (The longest of all may sit in a corner that sees no ink: some types answer to the background. And in a trained
    network most couplings barely move: the longest capsule's were often all 1/K, a chart with nothing to show.)
    """
    g = config.primary_grid
    fields = receptive_fields(config).reshape(g * g, -1).astype(np.float32)  # (G*G, H*W)
    ink = fields @ _ink(image).reshape(-1)  # (G*G,) the ink each position sees
    lengths = np.asarray(votes.primary_lengths, np.float32).reshape(config.primary_types, g * g)  # (T, G*G)
    coupling = np.asarray(votes.coupling[-1], np.float64)  # (N, K)
    moved = np.abs(coupling - votes.uniform).max(axis=1).reshape(config.primary_types, g * g)  # (T, G*G)
    score = lengths * ink / max(float(ink.max()), 1e-6) * (moved + 1e-9)  # one iteration: all moved 0, ties kept
    return int(np.argmax(score))  # i = type * G^2 + position


def pixel_votes(coupling: np.ndarray, primary_lengths: np.ndarray, config: CapsNetConfig) -> np.ndarray:
    """The vote mass each digit capsule receives through each input pixel: (N, K), (N,) -> (H, W, K).

    Each primary capsule spreads its coupling c_ij, weighted by its length |u_i| (how sure it is
    that its feature is there), over its receptive field. A pixel's strongest class is the
    digit capsule its stroke votes for.
    """
    g, types, k = config.primary_grid, config.primary_types, config.num_classes
    weighted = np.asarray(coupling, np.float32) * np.asarray(primary_lengths, np.float32)[:, None]  # (N, K)
    per_position = weighted.reshape(types, g * g, k).sum(axis=0)  # (G*G, K): capsule i = type * G^2 + y * G + x
    fields = receptive_fields(config).reshape(g * g, -1).astype(np.float32)  # (G*G, H*W)
    side = config.image_size
    return (fields.T @ per_position).reshape(side, side, k)  # (H, W, K)
