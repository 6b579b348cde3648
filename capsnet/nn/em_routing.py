"""EM routing between matrix capsules: the routing procedure of the second capsule paper.

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR. https://openreview.net/forum?id=HJWLfGWRb

A capsule is an activation a and a 4x4 pose matrix M. Each child i casts a vote V_ij = M_i W_ij for every parent j
it reaches, and routing clusters the votes: each parent is a Gaussian over the 16 vote entries h, fitted by
expectation-maximisation to the votes assigned to it (Procedure 1 of the paper):

    R_ij = 1 / (the number of parents child i reaches)                        start
    M-step, for each parent j:
        r_ij = R_ij a_i;   n_j = sum_i r_ij                                   data assigned to j
        mu_j^h = sum_i r_ij V_ij^h / n_j;   (sigma_j^h)^2 = sum_i r_ij (V_ij^h - mu_j^h)^2 / n_j
        cost_j^h = (beta_u + log sigma_j^h) n_j;   a_j = logistic(lambda (beta_a - sum_h cost_j^h))
    E-step, for each child i:
        p_ij = N(V_ij; mu_j, sigma_j^2) (diagonal);   R_ij = a_j p_ij / sum_k a_k p_ik

A parent's pose is its mean mu_j (the 16 entries of its 4x4 matrix), its activation a_j.

Three pitfalls of public implementations (Gritzman 2019, "Avoiding implementation pitfalls of 'Matrix capsules
with EM routing'", arXiv:1907.00652) are avoided here, each with a test:
1. *Parents at different positions compete for a child.* In a convolutional capsule layer a child sits in the
   receptive fields of several parent positions; its assignments are normalised over every parent it reaches (all
   positions and types: `child_index` names the child in each slot), not over the types at one position.
2. *A parent with one child.* With one child (or all assignments near zero) sigma^2 is 0 and n_j is 0: the
   variance gets a floor (`VARIANCE_FLOOR`) and n_j an epsilon, so nothing is NaN or infinite.
3. *The data assigned to a parent is normalised.* n_j grows with the number of children per parent (9 x 32 in a
   3x3 convolutional capsule layer, 3 x 3 x 32 in the class capsules), which would make a layer's costs and
   activations depend on its fan-in; n_j is scaled by parents / children of each receptive field (the mean n_j
   is at most 1 in every layer), so one inverse-temperature schedule serves every layer.

The inverse temperature lambda grows with the iteration (`inverse_temperature`, the schedule Hinton gave on
OpenReview). The moments are taken as batched matrix products over the votes (sum_i r_ij V_ij and
sum_i r_ij V_ij^2; the E-step's squared distance as V^2 . (1 / sigma^2) - 2 V . (mu / sigma^2) + const), so no
iteration materialises a vote-sized temporary: `benchmarks/bench_em.py` measures it against the direct form.
So that sigma^2 = E[V^2] - mu^2 does not cancel a small spread of large votes away in float32, the votes are routed
about each parent's plain mean of its votes, a constant shift that EM routing does not see (costs, activations and
assignments depend on V - mu alone) and that is added back to the poses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from capsnet.nn.routing import Backward, check_iterations, manual_backward

EPSILON = 1e-8  # added to n_j before dividing by it: a parent nobody is assigned to has mean 0, not 0/0
VARIANCE_FLOOR = 1e-4  # added to every sigma^2: a parent with one child has a narrow Gaussian, not a zero-width one
# the E-step's weight of a parent relative to the child's likeliest one is at least 1e-30: far below what a sum over
# the child's parents can see (float32 resolves 6e-8 of it), and R_ij above float32's smallest normal number (1.2e-38)
# for up to 10^7 parents a child, so that no operation meets subnormal numbers, which a CPU computes 20-100 times
# slower (later iterations assign sharply: at r = 5 the E-step's exp took 1.8 ms a call instead of 70 us)
LOG_WEIGHT_FLOOR = math.log(1e-30)
# the inverse temperature the schedule approaches. IBM's implementation (Gritzman) uses 0.01 with n_j scaled by
# 100 J / I, which is 1.0 here; that saturates the tiny preset's class activations at 1 within a few dozen steps (a
# saturated sigmoid passes no gradient) and it cannot fit 128 training digits in 150 steps, where 0.3 fits 99% of them
# (0.01 and 0.03 keep every activation near 0.5 and learn slowly): see the model card's EM section
LAMBDA_FINAL = 0.3
LAMBDA_RATE = 0.95  # lambda_t = LAMBDA_FINAL * (1 - LAMBDA_RATE ** t), t = 1, 2, ...


def inverse_temperature(iteration: int) -> float:
    """lambda for routing iteration `iteration` (1-based): LAMBDA_FINAL * (1 - 0.95^iteration).

    The schedule Hinton gave on OpenReview ("lambda = final_lambda * (1 - 0.95 ** (i + 1))", i from 0); it grows
    with each iteration, so later M-steps decide activations more sharply. With 3 iterations and LAMBDA_FINAL 0.3:
    0.015, 0.02925, 0.0427875.
    """
    if iteration < 1:
        raise ValueError(f"routing iterations count from 1, got {iteration}")
    return LAMBDA_FINAL * (1.0 - LAMBDA_RATE**iteration)


@dataclass
class EMTrace:
    """What EM routing did, one entry per iteration (the dashboard steps through it).

    assignments[:, t] are the R_ij the M-step of iteration t+1 weighed (even for t = 0 unless a start was given),
    means, variances and activations[:, t] the parents that M-step fitted. Slot i of position p holds child
    `child_index[p, i]`.
    """

    votes: Tensor  # (B, P, J, I, H) V_ij
    child_activations: Tensor  # (B, P, I) a_i, slot by slot
    child_index: Tensor  # (P, I) the child in each slot
    assignments: Tensor  # (B, r, P, J, I) R_ij; summed over every slot of one child and over J: 1
    means: Tensor  # (B, r, P, J, H) mu_j
    variances: Tensor  # (B, r, P, J, H) sigma_j^2
    activations: Tensor  # (B, r, P, J) a_j
    inverse_temperatures: tuple[float, ...]


def reach_counts(child_index: Tensor, children: int) -> Tensor:
    """How many slots each child fills: (children,) float (the parent positions whose receptive field holds it)."""
    ones = torch.ones(child_index.numel(), dtype=torch.float64, device=child_index.device)
    return torch.zeros(children, dtype=torch.float64, device=child_index.device).index_add_(
        0, child_index.flatten(), ones
    )


def child_softmax(logits: Tensor, child_index: Tensor, children: int) -> Tensor:
    """R_ij = exp(logit_ij) / sum over every parent child i reaches (all positions and types): (B, P, J, I).

    `child_index` (P, I) names the child in each slot; a child in several receptive fields is normalised over all
    of them (pitfall 1). Where each child fills one slot this is a softmax over J.
    """
    batch, positions, parents, slots = logits.shape
    if child_index.numel() == children:  # every child in one slot: a plain softmax over the parent types
        return torch.softmax(logits, dim=2)
    flat_index = child_index.flatten().expand(batch, -1)  # (B, P*I)
    # the largest logit of each child over every slot, to exponentiate safely (a shift that softmax ignores)
    slot_max = logits.detach().amax(dim=2).flatten(1)  # (B, P*I)
    child_max = slot_max.new_full((batch, children), -math.inf).scatter_reduce(1, flat_index, slot_max, "amax")
    shift = child_max.gather(1, flat_index).view(batch, positions, 1, slots)  # (B, P, 1, I)
    weights = torch.exp((logits - shift).clamp_(min=LOG_WEIGHT_FLOOR))  # (B, P, J, I), never subnormal
    slot_sum = weights.sum(dim=2).flatten(1)  # (B, P*I)
    child_sum = slot_sum.new_zeros(batch, children).scatter_add(1, flat_index, slot_sum)  # (B, children)
    return weights / child_sum.gather(1, flat_index).view(batch, positions, 1, slots)


def _m_step(
    assigned: Tensor, both: Tensor, centre: Tensor, beta_u: Tensor, beta_a: Tensor, scale: float, lam: float
) -> _Fit:
    """Fit each parent's Gaussian and activation to the votes weighted by r_ij = R_ij a_i (B, P, J, I), the votes
    [V - c, (V - c)^2] taken about each parent's centre c (B, P, J, H); the fit's mean is mu - c."""
    amount = assigned.sum(dim=-1, keepdim=True)  # n_j: (B, P, J, 1)
    weights = assigned / (amount + EPSILON)  # (B, P, J, I)
    moments = torch.matmul(weights.unsqueeze(3), both).squeeze(3)  # (B, P, J, 1, I) @ (B, P, J, I, 2H) -> (B, P, J, 2H)
    first, second = moments.chunk(2, dim=-1)  # sum_i w_i (V_i - c) and sum_i w_i (V_i - c)^2: (B, P, J, H) each
    total = amount / (amount + EPSILON)  # sum_i w_i: (B, P, J, 1), 1 but for a parent with (almost) nothing assigned
    mean = first - centre * (1 - total)  # d = mu - c, with mu = sum_i w_i V_i
    # sigma^2 = sum_i w_i (V_i - mu)^2 = sum_i w_i (V_i - c)^2 - 2 d first + d^2 total: small terms, as c is near mu
    spread = second - mean * (2 * first - mean * total)  # (B, P, J, H)
    variance = spread.clamp(min=0) + VARIANCE_FLOOR
    # cost_h = (beta_u + log sigma_h) n_j, with n_j normalised by parents / children (pitfall 3)
    cost = (beta_u.view(-1, 1) + 0.5 * torch.log(variance)) * (amount * scale)  # (B, P, J, H)
    logit = lam * (beta_a - cost.sum(dim=-1))  # a_j = logistic(logit): (B, P, J)
    return _Fit(amount, mean, variance, spread > 0, logit)


def _rows_dot(both: Tensor, weights: Tensor) -> Tensor:
    """Each vote's row of [V - c, (V - c)^2] dotted with its parent's weights: (B, P, J, I, 2H) . (B, P, J, 2H) ->
    (B, P, J, I).

    Taken as a row times the transposed block, (1, 2H) @ (2H, I), which BLAS runs 2-3 times faster on a CPU than the
    same numbers as a block times a column, (I, 2H) @ (2H, 1) (`benchmarks/README.md`)."""
    return torch.matmul(weights.unsqueeze(-2), both.transpose(-1, -2)).squeeze(-2)


def _e_step(both: Tensor, fit: _Fit, child_index: Tensor, children: int) -> Tensor:
    """R_ij = a_j p_ij / sum_k a_k p_ik, in log space: (B, P, J, I)."""
    precision = 1.0 / fit.variance  # (B, P, J, H)
    # with V' = V - c and d = mu - c (the fit's mean, about the centre): sum_h (V - mu)^2 / sigma^2 = sum_h (V' - d)^2
    # / sigma^2 = [V', V'^2] . [-2 d / sigma^2, 1 / sigma^2] + sum_h d^2 / sigma^2
    weights = torch.cat([-2 * fit.mean * precision, precision], dim=-1)  # (B, P, J, 2H)
    quadratic = _rows_dot(both, weights)  # (B, P, J, I)
    constant = (fit.mean * fit.mean * precision + torch.log(2 * math.pi * fit.variance)).sum(dim=-1, keepdim=True)
    log_p = -0.5 * (quadratic + constant)  # log N(V_ij; mu_j, sigma_j^2): (B, P, J, I)
    log_a = F.logsigmoid(fit.logit).unsqueeze(-1)  # log a_j, exact for a_j near 0: (B, P, J, 1)
    return child_softmax(log_a + log_p, child_index, children)


@dataclass
class _Fit:
    """One M-step's parents: n_j (B, P, J, 1), the mean about the centre d = mu - c and sigma^2 (B, P, J, H), where
    sigma^2 is above its floor, the activation's logit (B, P, J)."""

    amount: Tensor
    mean: Tensor
    variance: Tensor
    spread: Tensor
    logit: Tensor


def _with_squares(votes: Tensor, centre: Tensor) -> Tensor:
    """[V - c, (V - c)^2] (B, P, J, I, 2H) from votes in any layout and each parent's centre c (B, P, J, 1, H):
    written once into one buffer where no gradient is taken through it (inference, and the forward of the
    hand-written backward), else by ops autograd can differentiate."""
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and votes.requires_grad):
        shifted = votes - centre
        return torch.cat([shifted, shifted * shifted], dim=-1)  # (torch.compile fuses it, and takes no strided out=)
    half = votes.shape[-1]
    both = votes.new_empty(*votes.shape[:-1], 2 * half)  # (B, P, J, I, 2H)
    torch.sub(votes, centre, out=both[..., :half])  # the one copy of the votes into the routing layout
    torch.mul(both[..., :half], both[..., :half], out=both[..., half:])
    return both


def _centre(votes: Tensor) -> Tensor:
    """Each parent's plain mean of its votes, (B, P, J, 1, H), without gradient: the shift the votes are routed about.
    A constant to EM routing, so the gradient through the shifted votes is the gradient through the votes."""
    return votes.detach().mean(dim=3, keepdim=True)


def _uncentred(fit: _Fit, centre: Tensor) -> Tensor:
    """A fit's means mu = (mu - c) + c: (B, P, J, H), from the centre (B, P, J, 1, H)."""
    return fit.mean + centre.squeeze(3)


def _route(
    votes: Tensor,
    centre: Tensor,
    activations: Tensor,
    child_index: Tensor,
    children: int,
    beta_u: Tensor,
    beta_a: Tensor,
    iterations: int,
    start: Tensor | None = None,
) -> tuple[Tensor, list[Tensor], list[_Fit]]:
    """Procedure 1 as a plain loop about `centre`: [V - c, (V - c)^2] (B, P, J, I, 2H), the R_ij of each iteration
    and its M-step's fit (its means about the centre too: `_uncentred`). `start`: logits of the first R_ij."""
    batch, positions, parents, slots, _ = votes.shape
    if start is not None:  # R_ij from the logits given, normalised over every parent each child reaches
        assignment = child_softmax(start.to(votes.dtype), child_index, children)  # (B, P, J, I)
    else:  # each child spread evenly over every parent it reaches (all positions and types)
        counts = reach_counts(child_index, children)  # (children,); 0 for a child past the last window (a valid conv)
        even = (1.0 / (counts[child_index] * parents)).to(votes.dtype)  # (P, I)
        assignment = even.view(1, positions, 1, slots).expand(batch, positions, parents, slots)  # (B, P, J, I)
    both = _with_squares(votes, centre)  # V and V^2 about the centre, once for every iteration: (B, P, J, I, 2H)
    scale = parents / slots  # pitfall 3: n_j normalised by parents / children of a receptive field
    child_a = activations.unsqueeze(2)  # (B, P, 1, I)
    assignments, fits = [], []
    for t in range(iterations):
        fit = _m_step(assignment * child_a, both, centre.squeeze(3), beta_u, beta_a, scale, inverse_temperature(t + 1))
        assignments.append(assignment)
        fits.append(fit)
        if t < iterations - 1:  # the last E-step would not be used
            assignment = _e_step(both, fit, child_index, children)
    return both, assignments, fits


def _group_sum(x: Tensor, child_index: Tensor, children: int) -> Tensor:
    """The sum of x (B, P, J, I) over every slot and parent type of each child, back in its slots: (B, P, 1, I)."""
    per_slot = x.sum(dim=2)  # (B, P, I)
    if child_index.numel() == children:
        return per_slot.unsqueeze(2)
    batch, positions, slots = per_slot.shape
    flat_index = child_index.flatten().expand(batch, -1)  # (B, P*I)
    per_child = per_slot.new_zeros(batch, children).scatter_add(1, flat_index, per_slot.flatten(1))
    return per_child.gather(1, flat_index).view(batch, positions, 1, slots)


class _EMRouting(torch.autograd.Function):
    """Procedure 1 with a hand-written backward that reads [V', V'^2] 2r-1 times and writes its gradient once, with
    V' = V - c the votes about each parent's centre c (a constant: `_centre`).

    Autograd through the loop keeps a vote-sized gradient per product and sums them; here every
    iteration's gradient stays as (B, P, J, I) and (B, P, J, 2H) factors, and the gradient of [V', V'^2]
    is one batched product of the stacked factors. Going back from t = r (r_t = R_t a, w_t = r_t / (n_t + eps),
    T_t = sum_i w_t = n_t / (n_t + eps)):
        M-step  [f_t, m_t] = w_t [V', V'^2];  d_t = f_t - c (1 - T_t) (= mu_t - c);  u_t = m_t - 2 d_t f_t + d_t^2 T_t
                sigma_t^2 = relu(u_t) + floor;  z_t = lambda_t (beta_a - sum_h (beta_u + log sigma_t) n_t s)
                a_t = logistic(z_t)
        E-step  l_t = logsigmoid(z_t) - (1/2) ([V', V'^2] . [-2 d_t / sigma_t^2, 1 / sigma_t^2] + k_t)
                R_{t+1} = the softmax of l_t over every parent of each child
    The output mu_r = d_r + c.
    """

    @staticmethod
    def forward(ctx: Any, votes: Tensor, centre: Tensor, activations: Tensor, beta_u: Tensor, beta_a: Tensor,
                child_index: Tensor, children: int, iterations: int) -> tuple[Tensor, Tensor]:  # fmt: skip
        both, assignments, fits = _route(votes, centre, activations, child_index, children, beta_u, beta_a, iterations)
        ctx.shape = (children, iterations)
        # the gradient is written in the votes' layout (a view of the product that made them), dense where theirs is not
        ctx.votes_layout = torch.empty_like(votes, device="meta").stride()
        ctx.fits = fits  # tensors the backward reads; the output is a copy, or output -> ctx -> fits -> output
        ctx.save_for_backward(both, centre, activations, beta_u, child_index, *assignments)
        # would be a cycle that only Python's garbage collector frees: a training run kept every step's routing
        # alive until it ran out of memory (24 GB after 1,700 steps)
        return _uncentred(fits[-1], centre), torch.sigmoid(fits[-1].logit)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_mean: Tensor, grad_a: Tensor) -> tuple[Tensor | None, ...]:
        children, r = ctx.shape
        both, centre, child_a, beta_u, child_index, *assignments = ctx.saved_tensors
        c = centre.squeeze(3)  # (B, P, J, H)
        fits: list[_Fit] = ctx.fits
        half = both.shape[-1] // 2
        scale = both.shape[2] / both.shape[3]  # parents / slots
        child_a = child_a.unsqueeze(2)  # (B, P, 1, I)
        left: list[Tensor] = []  # (B, P, J, I) factors of the gradient of [V', V'^2]
        right: list[Tensor] = []  # (B, P, J, 2H) factors
        grad_child_a = torch.zeros_like(child_a)
        grad_beta_u = torch.zeros_like(beta_u)
        grad_beta_a = torch.zeros_like(beta_u)
        grad_next: Tensor | None = None  # dL/dR_{t+1}
        for t in reversed(range(r)):
            fit, lam = fits[t], inverse_temperature(t + 1)
            mean, variance, amount = fit.mean, fit.variance, fit.amount
            if t == r - 1:
                a = torch.sigmoid(fit.logit)
                g_mean, g_logit = grad_mean, grad_a * a * (1 - a)  # (B, P, J, H), (B, P, J)
                g_var = torch.zeros_like(variance)
            else:
                assert grad_next is not None
                after = assignments[t + 1]  # R_{t+1} = softmax(l_t)
                g_l = after * (grad_next - _group_sum(after * grad_next, child_index, children))  # (B, P, J, I)
                g_logit = g_l.sum(dim=-1) * torch.sigmoid(-fit.logit)  # through logsigmoid(z_t)
                precision = 1.0 / variance
                g_quadratic = -0.5 * g_l  # (B, P, J, I)
                left.append(g_quadratic)
                right.append(torch.cat([-2 * mean * precision, precision], dim=-1))
                g_weights = torch.matmul(g_quadratic.unsqueeze(3), both).squeeze(3)  # (B, P, J, 2H)
                g_q, g_precision = -2 * g_weights[..., :half], g_weights[..., half:]  # q = mu / sigma^2
                g_k = -0.5 * g_l.sum(dim=-1, keepdim=True)  # k = sum_h mu^2 / sigma^2 + log(2 pi sigma^2)
                g_mean = g_k * 2 * mean * precision + g_q * precision
                g_precision = g_precision + g_k * mean * mean + g_q * mean
                g_var = g_k / variance - g_precision * precision * precision
            # z = lambda (beta_a - sum_h (beta_u + log sigma_h) n s)
            grad_beta_a += lam * g_logit.sum(dim=(0, 1))
            g_cost = -lam * g_logit.unsqueeze(-1)  # (B, P, J, 1), the same for every h
            grad_beta_u += (g_cost * amount * scale).sum(dim=(0, 1, 3)) * half
            g_var = g_var + g_cost * amount * scale * 0.5 / variance
            g_amount = (g_cost * (beta_u.view(-1, 1) + 0.5 * torch.log(variance))).sum(dim=-1, keepdim=True) * scale
            # sigma^2 = relu(u) + floor, u = m - 2 d f + d^2 T, d = f - c (1 - T), T = n / (n + eps) (`_m_step`)
            g_u = g_var * fit.spread
            total = amount / (amount + EPSILON)
            first = mean + c * (1 - total)  # f = sum_i w_i (V_i - c)
            g_first = g_mean + g_u * 2 * (mean * total - mean - first)
            g_total = g_mean * c + g_u * (mean * mean - 2 * c * (first - mean * total))
            g_amount = g_amount + g_total.sum(dim=-1, keepdim=True) * EPSILON / (amount + EPSILON) ** 2
            # [f, m] = w [V - c, (V - c)^2], w = r / (n + eps), n = sum_i r, r = R a
            g_moments = torch.cat([g_first, g_u], dim=-1)  # (B, P, J, 2H)
            weights = assignments[t] * child_a / (amount + EPSILON)  # (B, P, J, I)
            left.append(weights)
            right.append(g_moments)
            g_w = _rows_dot(both, g_moments)  # (B, P, J, I)
            g_amount = g_amount - (g_w * weights).sum(dim=-1, keepdim=True) / (amount + EPSILON)
            g_assigned = g_w / (amount + EPSILON) + g_amount  # (B, P, J, I)
            grad_child_a += (g_assigned * assignments[t]).sum(dim=2, keepdim=True)
            grad_next = g_assigned * child_a
        lhs = torch.stack(left, dim=-1)  # (B, P, J, I, T)
        rhs = torch.stack(right, dim=-2)  # (B, P, J, T, 2H)
        g_both = torch.matmul(lhs, rhs)  # (B, P, J, I, 2H)
        votes = both[..., :half]  # V - c, whose square's gradient is 2 (V - c)
        layout = None  # torch.compile takes no strided out=
        if not torch.compiler.is_compiling():
            layout = torch.empty_strided(votes.shape, ctx.votes_layout, dtype=votes.dtype, device=votes.device)
        grad_votes = torch.addcmul(g_both[..., :half], votes, g_both[..., half:], value=2, out=layout)  # dV + 2 V dV^2
        return grad_votes, None, grad_child_a.squeeze(2), grad_beta_u, grad_beta_a, None, None, None


def _check(
    votes: Tensor, activations: Tensor, child_index: Tensor, beta_u: Tensor, beta_a: Tensor, iterations: int
) -> None:
    """ValueError naming the first argument of `em_routing` whose shape or value is off."""
    check_iterations(iterations)
    if votes.dim() != 5:
        raise ValueError(f"votes must be (B, P, J, I, H), got shape {tuple(votes.shape)}")
    batch, positions, parents, slots, _ = votes.shape
    if activations.shape != (batch, positions, slots):
        raise ValueError(f"activations must be (B, P, I) = {(batch, positions, slots)}, got {tuple(activations.shape)}")
    if child_index.shape != (positions, slots):
        raise ValueError(f"child_index must be (P, I) = {(positions, slots)}, got {tuple(child_index.shape)}")
    if beta_u.shape != (parents,) or beta_a.shape != (parents,):
        raise ValueError(f"beta_u and beta_a must be ({parents},), got {tuple(beta_u.shape)}, {tuple(beta_a.shape)}")


def em_routing(
    votes: Tensor,
    activations: Tensor,
    child_index: Tensor,
    children: int,
    beta_u: Tensor,
    beta_a: Tensor,
    iterations: int,
    trace: bool = False,
    backward: Backward = "auto",
    start: Tensor | None = None,
) -> tuple[Tensor, Tensor, EMTrace | None]:
    """Procedure 1 of the EM paper, vectorised over the batch, parent positions, slots and parent types.

    Args:
        votes: V_ij laid out (B, P, J, I, H): P parent positions, J parent types at each, I child slots in each
            position's receptive field, H = 16 pose entries. Parents-first, so each moment is one batched product.
        activations: the children's a_i in the same slots, (B, P, I).
        child_index: (P, I) long, the child (0 .. children - 1) in each slot; a child in several receptive fields
            appears in several slots and is shared between them (pitfall 1).
        children: the number of distinct children.
        beta_u, beta_a: (J,) the learned costs of a parent type (beta_u per pose entry, beta_a per activation).
        iterations: r >= 1 (3 in the paper).
        trace: keep R_ij, mu, sigma^2 and a_j of every iteration.
        backward: how gradients are taken (`capsnet.nn.routing.manual_backward`): "manual", the hand-written
            backward of `_EMRouting`, several times faster on a CPU; "autograd", the same plain ops differentiated
            by autograd; "auto" (default): manual on a CPU. All three give the same values and gradients.
        start: logits (B, P, J, I) of the first iteration's R_ij, normalised over every parent a child reaches;
            None (the paper): each child spread evenly. `capsnet.nn.routing.RandomCouplings` draws random ones (Where
            routing matters); autograd differentiates routing from them.

    Returns:
        poses mu_j (B, P, J, H), activations a_j (B, P, J), and the trace when asked for.
    """
    _check(votes, activations, child_index, beta_u, beta_a, iterations)
    if start is not None and start.shape != votes.shape[:4]:
        raise ValueError(f"start must be (B, P, J, I) = {tuple(votes.shape[:4])}, got {tuple(start.shape)}")
    manual = manual_backward(backward, votes.device)
    centre = _centre(votes)  # (B, P, J, 1, H)
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (votes, activations, beta_u, beta_a))
    if not trace and manual and needs_grad and start is None:
        mean, out_a = _EMRouting.apply(votes, centre, activations, beta_u, beta_a, child_index, children, iterations)
        return mean, out_a, None
    _, assignments, fits = _route(votes, centre, activations, child_index, children, beta_u, beta_a, iterations, start)
    mean, out_a = _uncentred(fits[-1], centre), torch.sigmoid(fits[-1].logit)
    if not trace:
        return mean, out_a, None
    return (
        mean,
        out_a,
        EMTrace(
            votes=votes,
            child_activations=activations,
            child_index=child_index,
            assignments=torch.stack(assignments, dim=1),  # (B, r, P, J, I)
            means=torch.stack([_uncentred(f, centre) for f in fits], dim=1),  # (B, r, P, J, H)
            variances=torch.stack([f.variance for f in fits], dim=1),  # (B, r, P, J, H)
            activations=torch.sigmoid(torch.stack([f.logit for f in fits], dim=1)),  # (B, r, P, J)
            inverse_temperatures=tuple(inverse_temperature(t) for t in range(1, iterations + 1)),
        ),
    )


def em_routing_by_iterations(
    votes: Tensor,
    activations: Tensor,
    child_index: Tensor,
    children: int,
    beta_u: Tensor,
    beta_a: Tensor,
    iterations: int,
) -> tuple[Tensor, Tensor]:
    """What `em_routing` returns at r = 1, 2, .., `iterations`, from one run of `iterations`: poses (r, B, P, J, H)
    and activations (r, B, P, J), entry r - 1 routing's result after r iterations.

    Iteration t's M-step sees only the E-steps before it (and lambda_t depends on t alone), so routing r times is
    the first r iterations of routing more: one run gives every r (Where routing matters reads 1..5: 5 iterations
    a layer instead of 15). Arguments as `em_routing`'s; plain operations (autograd differentiates them)."""
    _check(votes, activations, child_index, beta_u, beta_a, iterations)
    centre = _centre(votes)  # (B, P, J, 1, H)
    _, _, fits = _route(votes, centre, activations, child_index, children, beta_u, beta_a, iterations)
    means = torch.stack([_uncentred(fit, centre) for fit in fits])  # (r, B, P, J, H)
    return means, torch.sigmoid(torch.stack([fit.logit for fit in fits]))  # (r, B, P, J)
