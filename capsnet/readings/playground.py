"""Routing by agreement on a toy you can hold in your hand: a few parents, a dozen children, votes in 2-D.

Sabour, Frosst & Hinton (2017), Procedure 1. Each child capsule i casts one vote u_hat_{j|i} for
each parent j; here the votes are points in a plane, so every step of the procedure can be drawn.
`preset_votes` makes the classic situations (one agreeing cluster among outliers, two clusters
competing for one parent, no agreement at all) and three where dynamic routing and EM routing part ways
(clusters of unequal spread, a lone outlier, two parents wanting one cluster), `move_vote` edits one vote,
`route` runs the project's own dynamic routing (`capsnet.nn.dynamic_routing.dynamic_routing`) on them and
`em_route` its EM routing (`capsnet.nn.em_routing.em_routing`, Hinton, Sabour & Frosst 2018) on the same votes. The
toy itself runs in the browser (`dashboard.knobs.playground`); these functions are the Python reference its
JavaScript is held to. `real_plane` puts the real model's votes for one parent in a 2-D plane (through
`capsnet.readings.agreement.vote_view`), for the page's chart of them. `squash_length` and `margin_point` give one
point of equation 1 and of equation 4 with the project's `squash` and `margin_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from capsnet.nn.config import CapsNetConfig
from capsnet.nn.dynamic_routing import dynamic_routing
from capsnet.nn.em_routing import em_routing
from capsnet.nn.losses import margin_loss
from capsnet.nn.squash import squash
from capsnet.readings.agreement import Votes, vote_view

PRESETS = (
    "agreeing cluster plus outliers",
    "two competing clusters",
    "no agreement",
    "clusters of unequal spread",
    "a lone outlier",
    "two parents wanting one cluster",
)
PARENTS = 3  # K
CHILDREN = 12  # N
SEED = 0
MAX_COORDINATE = 3.0  # a moved vote stays in [-3, 3]^2


def _polar(radius: np.ndarray, angle_deg: np.ndarray) -> np.ndarray:
    """Points at `radius` and `angle_deg` (same shape S): (S, 2)."""
    angle = np.deg2rad(angle_deg)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=-1)


def _scattered(rng: np.random.Generator, count: int) -> np.ndarray:
    """Votes that agree with nothing: spread all round the circle (jittered, in shuffled order), so they cancel: (count, 2)."""
    angles = rng.uniform(0.0, 360.0) + np.arange(count) * 360.0 / count + rng.normal(0.0, 8.0, count)
    return _polar(rng.uniform(0.5, 1.0, count), rng.permutation(angles))


def _cluster(rng: np.random.Generator, count: int, radius: float, angle_deg: float, spread: float = 0.12) -> np.ndarray:
    """Votes that agree: around one point, a little noise: (count, 2)."""
    return _polar(np.full(count, radius), np.full(count, angle_deg)) + rng.normal(0.0, spread, (count, 2))


def preset_votes(name: str, seed: int = SEED) -> np.ndarray:
    """The votes u_hat_{j|i} of one preset, (K, N, 2) = (3, 12, 2) float32, the same for the same seed.

    - "agreeing cluster plus outliers": 8 children's votes for parent 1 nearly coincide, the other 4
      point anywhere; every vote for parents 2 and 3 is scattered.
    - "two competing clusters": parent 1's votes form two clusters on opposite sides, 7 children
      against 5; the votes for parents 2 and 3 are scattered.
    - "no agreement": every vote is scattered.
    - "clusters of unequal spread": every child's vote for parent 1 lies in a tight, short cluster, its vote for
      parent 2 in a wide cluster twice as far out; the votes for parent 3 are scattered. Dynamic routing favours the
      long sum, EM the tight Gaussian.
    - "a lone outlier": 11 votes for parent 1 agree, and child 12's lies far out along the same direction; the
      votes for parents 2 and 3 are scattered. Its long vote agrees with v_1 by the dot product, yet lies far
      outside parent 1's Gaussian.
    - "two parents wanting one cluster": children 1-8 vote for parents 1 and 2 alike, a little tighter for parent 1;
      children 9-12 and every vote for parent 3 are scattered. EM's parents compete for the data, dynamic
      routing's share it.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)}")
    rng = np.random.default_rng(seed)
    votes = np.stack([_scattered(rng, CHILDREN) for _ in range(PARENTS)])  # (K, N, 2)
    if name == PRESETS[0]:
        votes[0, :8] = _cluster(rng, 8, 1.3, 35.0)
        votes[0, 8:] = _polar(rng.uniform(0.6, 1.4, 4), np.array([140.0, 200.0, 250.0, 295.0]))
    elif name == PRESETS[1]:
        votes[0, :7] = _cluster(rng, 7, 1.2, 20.0)
        votes[0, 7:] = _cluster(rng, 5, 1.2, 190.0)
    elif name == PRESETS[3]:
        votes[0] = _cluster(rng, CHILDREN, 0.8, 60.0, spread=0.05)
        votes[1] = _cluster(rng, CHILDREN, 1.6, 300.0, spread=0.45)
    elif name == PRESETS[4]:
        votes[0, :11] = _cluster(rng, 11, 1.0, 45.0, spread=0.1)
        votes[0, 11] = _polar(np.array([2.9]), np.array([45.0]))[0]
    elif name == PRESETS[5]:
        votes[0, :8] = _cluster(rng, 8, 1.2, 70.0, spread=0.08)
        votes[1, :8] = votes[0, :8] + rng.normal(0.0, 0.15, (8, 2))
    return votes.astype(np.float32)


def move_vote(votes: np.ndarray, parent: int, child: int, xy: tuple[float, float]) -> np.ndarray:
    """A copy of the votes (K, N, 2) with child `child`'s vote for parent `parent` moved to `xy`."""
    votes = np.array(votes, dtype=np.float32)  # a copy: the caller's array stays as it was
    if votes.ndim != 3 or votes.shape[-1] != 2:
        raise ValueError(f"votes must be (K, N, 2), got shape {votes.shape}")
    k, n, _ = votes.shape
    if not (0 <= parent < k and 0 <= child < n):
        raise ValueError(f"no vote of child {child} for parent {parent}: there are {n} children and {k} parents")
    x, y = (float(v) for v in xy)
    if not (np.isfinite(x) and np.isfinite(y)):
        raise ValueError(f"a vote must be a finite point, got ({x}, {y})")
    votes[parent, child] = np.clip([x, y], -MAX_COORDINATE, MAX_COORDINATE)
    return votes


@dataclass
class Routing:
    """Procedure 1 on one set of votes, every iteration (the fields of `capsnet.nn.dynamic_routing.RoutingTrace`, one example)."""

    votes: np.ndarray  # (K, N, D) u_hat_{j|i}
    coupling: np.ndarray  # (r, N, K) c_ij used in iteration t; sums to 1 over K
    logits: np.ndarray  # (r, N, K) b_ij that c_ij came from
    sums: np.ndarray  # (r, K, D) s_j = sum_i c_ij u_hat_{j|i}
    poses: np.ndarray  # (r, K, D) v_j = squash(s_j)
    lengths: np.ndarray  # (r, K) |v_j|
    agreement: np.ndarray  # (r, N, K) u_hat_{j|i} . v_j, what iteration t + 1 adds to b_ij

    @property
    def iterations(self) -> int:
        return self.coupling.shape[0]


def route(votes: np.ndarray, iterations: int) -> Routing:
    """Run the project's `dynamic_routing` on votes (K, N, D) for `iterations` rounds, keeping its trace."""
    votes = np.asarray(votes, dtype=np.float32)
    if votes.ndim != 3:
        raise ValueError(f"votes must be (K, N, D), got shape {votes.shape}")
    if not 1 <= int(iterations) <= 10:
        raise ValueError(f"iterations must lie in 1..10, got {iterations}")
    with torch.inference_mode():
        u_hat = torch.from_numpy(votes).unsqueeze(0)  # (1, K, N, D)
        _, trace = dynamic_routing(u_hat, int(iterations), trace=True)
    assert trace is not None
    return Routing(
        votes=votes,
        coupling=trace.coupling[0].transpose(1, 2).numpy(),  # (r, K, N) -> (r, N, K)
        logits=trace.logits[0].transpose(1, 2).numpy(),  # (r, K, N) -> (r, N, K)
        sums=trace.sums[0].numpy(),
        poses=trace.poses[0].numpy(),
        lengths=trace.lengths[0].numpy(),
        agreement=trace.agreement[0].transpose(1, 2).numpy(),  # (r, K, N) -> (r, N, K)
    )


@dataclass
class EMRouting:
    """EM routing on the same votes, every iteration (`capsnet.nn.em_routing.EMTrace`, one example, every child active).

    assignments[t] are the R_ij the M-step of iteration t+1 weighed (uniform 1/K at t = 0); means, stds and
    activations[t] the Gaussians and a_j that M-step fitted.
    """

    votes: np.ndarray  # (K, N, D)
    assignments: np.ndarray  # (r, N, K), sums to 1 over K
    means: np.ndarray  # (r, K, D) mu_j
    stds: np.ndarray  # (r, K, D) sigma_j per dimension
    activations: np.ndarray  # (r, K) a_j
    inverse_temperatures: tuple[float, ...]


def em_route(votes: np.ndarray, iterations: int) -> EMRouting:
    """Run the project's `em_routing` on votes (K, N, D) for `iterations` rounds: every child's activation 1, the
    parents' learned costs beta_u and beta_a 0 (a parent's activation then says how tight its Gaussian is)."""
    votes = np.asarray(votes, dtype=np.float32)
    if votes.ndim != 3:
        raise ValueError(f"votes must be (K, N, D), got shape {votes.shape}")
    if not 1 <= int(iterations) <= 10:
        raise ValueError(f"iterations must lie in 1..10, got {iterations}")
    k, n, _ = votes.shape
    with torch.inference_mode():
        v = torch.from_numpy(votes).view(1, 1, k, n, -1)  # (B=1, P=1, J=K, I=N, D)
        zeros = torch.zeros(k)
        _, _, trace = em_routing(v, torch.ones(1, 1, n), torch.arange(n).view(1, -1), n, zeros, zeros,
                                 int(iterations), trace=True)  # fmt: skip
    assert trace is not None
    return EMRouting(
        votes=votes,
        assignments=trace.assignments[0, :, 0].transpose(1, 2).numpy(),  # (r, K, N) -> (r, N, K)
        means=trace.means[0, :, 0].numpy(),  # (r, K, D)
        stds=trace.variances[0, :, 0].sqrt().numpy(),  # (r, K, D)
        activations=trace.activations[0, :, 0].numpy(),  # (r, K)
        inverse_temperatures=trace.inverse_temperatures,
    )


# ---------------------------------------------------------------- the real model's votes in a plane


@dataclass
class Plane:
    """Votes and what routing made of them, in one 2-D plane: the playground's chart of the real model.

    P parents are shown (one for the real model, whose votes live in D = 16 and are projected with
    `capsnet.readings.agreement.vote_basis`); `parents` names their indices.
    """

    parents: np.ndarray  # (P,) parent indices shown
    points: np.ndarray  # (P, N, 2) the votes u_hat_{j|i}, the same in every iteration
    coupling: np.ndarray  # (r, N, P) c_ij
    agreement: np.ndarray  # (r, N, P) u_hat_{j|i} . v_j after iteration t (in D, not in the plane)
    sums: np.ndarray  # (r, P, 2) s_j, projected
    poses: np.ndarray  # (r, P, 2) v_j, projected
    lengths: np.ndarray  # (r, P) |v_j| (in D)

    @property
    def iterations(self) -> int:
        return self.coupling.shape[0]


def real_plane(votes: Votes, parent: int) -> Plane:
    """The real model's votes for one parent (digit capsule) in the plane of `capsnet.readings.agreement.vote_view`."""
    view = vote_view(votes, parent)
    return Plane(
        parents=np.array([parent]),
        points=view.points[None],  # (1, N, 2)
        coupling=view.coupling[:, :, None],  # (r, N, 1)
        agreement=view.agreement[:, :, None],  # (r, N, 1)
        sums=view.sums[:, None],  # (r, 1, 2)
        poses=view.poses[:, None],  # (r, 1, 2)
        lengths=votes.lengths[:, parent][:, None],  # (r, 1)
    )


def coupling_change(plane: Plane) -> np.ndarray:
    """c_ij at the last iteration minus at the first (uniform): (N, P). Positive: routing sent this vote more weight."""
    return plane.coupling[-1] - plane.coupling[0]


# ---------------------------------------------------------------- points on the curves


def squash_length(norm: float) -> float:
    """|squash(s)| of one vector of length `norm`, through `capsnet.nn.squash.squash`."""
    if not (np.isfinite(norm) and norm >= 0):
        raise ValueError(f"a length must be finite and >= 0, got {norm}")
    return float(squash(torch.tensor([[float(norm), 0.0]], dtype=torch.float64)).norm())


def _margin_losses(lengths: torch.Tensor, config: CapsNetConfig) -> tuple[np.ndarray, np.ndarray]:
    """`capsnet.nn.losses.margin_loss` of a single capsule at each of `lengths` (M,): (present T_k = 1, absent T_k = 0).

    Present: the example's label is that capsule's class; absent: the example has no label at all
    (an empty label list, so T_k = 0). `torch.vmap` evaluates every length in one call.
    """
    present_label = torch.zeros(1, dtype=torch.long)  # (B=1,): class 0, the only class
    no_label = torch.zeros(1, 0, dtype=torch.long)  # (B=1, L=0): no class present

    def loss(labels: torch.Tensor):
        return lambda x: margin_loss(x.view(1, 1), labels, config.m_plus, config.m_minus, config.down_weight)

    return torch.vmap(loss(present_label))(lengths).numpy(), torch.vmap(loss(no_label))(lengths).numpy()


def margin_point(config: CapsNetConfig, length: float) -> tuple[float, float]:
    """Equation 4's loss of one class of length |v_k| = `length`: (present, absent)."""
    if not (np.isfinite(length) and 0 <= length <= 1):
        raise ValueError(f"a capsule's length lies in [0, 1], got {length}")
    present, absent = _margin_losses(torch.tensor([float(length)], dtype=torch.float64), config)
    return float(present[0]), float(absent[0])
