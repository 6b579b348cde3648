"""Dynamic routing between capsules: Procedure 1 of the paper, routing by agreement.

Sabour, Frosst & Hinton (2017), "Dynamic Routing Between Capsules", NeurIPS.
https://arxiv.org/abs/1710.09829

Notation follows the paper: i indexes the N child (primary) capsules, j the K parent (digit) capsules;
u_hat_{j|i} = W_ij u_i is a child's prediction (vote) for parent j, b_ij the routing logits (one set per
example), c_ij = softmax_j(b_ij) the coupling coefficients (each child's softmax over the parents; with the
CIFAR-10 network's "none-of-the-above" category, section 7, the softmax has one more parent whose logit stays 0 and
whose share is dropped, as the official code's leaky routing does),
s_j = sum_i c_ij u_hat_{j|i} and v_j = squash(s_j); b_ij grows by the agreement u_hat_{j|i} . v_j.
The backward pass is written out by hand (`_DynamicRouting`), so it reads u_hat a few times instead of
letting autograd keep a u_hat-sized tensor per operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from capsnet.nn.routing import Backward, check_iterations, manual_backward
from capsnet.nn.squash import squash


@dataclass
class RoutingTrace:
    """What dynamic routing did, one entry per iteration (the dashboard animates it).

    coupling[:, t] are the c_ij used in iteration t+1, logits[:, t] the b_ij they
    were computed from, sums[:, t] the s_j they weighed, poses/lengths[:, t] the parents v_j
    after that iteration, and agreement[:, t] = u_hat_{j|i} . v_j, what iteration t+2 adds to b_ij.
    Everything a view of routing needs comes from the one forward pass that made it. Parents come before
    children, as in EM routing's trace (`capsnet.nn.routing`).
    """

    votes: Tensor  # (B, K, N, D) u_hat_{j|i}, the same every iteration
    coupling: Tensor  # (B, r, K, N), sums to 1 over K (less with "none of the above": the rest goes to no parent)
    logits: Tensor  # (B, r, K, N)
    sums: Tensor  # (B, r, K, D) s_j = sum_i c_ij u_hat_{j|i}
    poses: Tensor  # (B, r, K, D)
    lengths: Tensor  # (B, r, K)
    agreement: Tensor  # (B, r, K, N)
    leak: bool = False  # routed with the "none-of-the-above" category (`couplings`)


def _dot_children(u_hat: Tensor, x: Tensor) -> Tensor:
    """u_hat_{j|i} . x_j for every child i: (B, K, N, D), (B, K, D) -> (B, K, N).

    Written as x^T u_hat^T, (B, K, 1, D) @ (B, K, D, N): a row-times-matrix product
    that BLAS runs about twice as fast as the equivalent u_hat @ x column form.
    """
    return torch.matmul(x.unsqueeze(2), u_hat.transpose(-1, -2)).squeeze(2)  # (B, K, 1, N) -> (B, K, N)


def couplings(logits: Tensor, leak: bool = False) -> Tensor:
    """c_ij from b_ij (B, K, N): the softmax over the parents j. With `leak` (the paper's "none-of-the-above"
    category), a parent whose logit is always 0 takes its share and is dropped: c_ij = exp b_ij / (1 + sum_k exp b_ik),
    so a child that agrees with no parent sends them little."""
    if not leak:
        return torch.softmax(logits, dim=1)  # over the parents j: (B, K, N)
    padded = F.pad(logits, (0, 0, 1, 0))  # (B, 1+K, N): the leak's logit 0 first
    return torch.softmax(padded, dim=1)[:, 1:]  # (B, K, N): the leak's share dropped


def _route(
    u_hat: Tensor, iterations: int, start: Tensor | None = None, leak: bool = False
) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]]:
    """Procedure 1 as a plain loop; returns c_t, b_t, s_t and v_t of every iteration t."""
    batch, parents, children, _ = u_hat.shape
    # b_ij starts at zero for every example separately (never shared across the batch), or at the logits given
    logits = u_hat.new_zeros(batch, parents, children) if start is None else start.to(u_hat.dtype)  # (B, K, N)
    weights, all_logits, pre, poses = [], [], [], []
    for t in range(iterations):
        coupling = couplings(logits, leak)  # over the parents j: (B, K, N)
        s = torch.matmul(coupling.unsqueeze(2), u_hat).squeeze(2)  # (B, K, 1, N) @ (B, K, N, D) -> (B, K, D)
        v = squash(s)  # (B, K, D)
        weights.append(coupling)
        all_logits.append(logits)
        pre.append(s)
        poses.append(v)
        if t < iterations - 1:  # the last update of b would not be used
            agreement = _dot_children(u_hat, v)  # u_hat_{j|i} . v_j: (B, K, N)
            logits = logits + agreement
    return weights, all_logits, pre, poses


class _DynamicRouting(torch.autograd.Function):
    """Procedure 1 with a hand-written backward that reads u_hat 2r-2 times and writes its gradient once.

    Autograd through the loop materialises one u_hat-sized tensor per matrix
    product and sums them; this backward keeps every per-iteration gradient as
    (B, K, N) or (B, K, D) factors and forms grad u_hat in one batched product.
    With b_1 = 0, c_t = softmax_K(b_t), s_t = sum_n c_t u_hat, v_t = squash(s_t),
    a_t = u_hat . v_t, b_{t+1} = b_t + a_t, and G_t = dL/db_t, going back from t = r:
        dL/dv_t = dL/dv_r (t = r)  or  sum_n G_{t+1} u_hat  (t < r, through a_t)
        dL/ds_t = squash'(s_t)^T dL/dv_t
        dL/dc_t = u_hat . dL/ds_t,  G_t = G_{t+1} + c_t (dL/dc_t - sum_K c_t dL/dc_t)
        dL/du_hat = sum_t c_t (x) dL/ds_t + sum_{t<r} G_{t+1} (x) v_t
    """

    @staticmethod
    def forward(ctx: Any, u_hat: Tensor, iterations: int, leak: bool) -> Tensor:
        weights, _, pre, poses = _route(u_hat, iterations, leak=leak)
        ctx.iterations = iterations
        ctx.save_for_backward(u_hat, *weights, *pre, *poses)
        return poses[-1]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_v: Tensor) -> tuple[Tensor, None, None]:
        r = ctx.iterations
        u_hat, *saved = ctx.saved_tensors
        weights, pre, poses = saved[:r], saved[r : 2 * r], saved[2 * r :]
        left: list[Tensor] = []  # (B, K, N) factors of grad u_hat
        right: list[Tensor] = []  # (B, K, D) factors
        g_logits: Tensor | None = None  # G_{t+1}
        grad_pose = grad_v
        for t in reversed(range(r)):
            if t < r - 1:
                assert g_logits is not None
                # (B, K, 1, N) @ (B, K, N, D) -> (B, K, D)
                grad_pose = torch.matmul(g_logits.unsqueeze(2), u_hat).squeeze(2)
                left.append(g_logits)
                right.append(poses[t])
            with torch.enable_grad():
                s = pre[t].detach().requires_grad_()
                (grad_s,) = torch.autograd.grad(squash(s), s, grad_pose)  # (B, K, D)
            left.append(weights[t])
            right.append(grad_s)
            if t > 0:  # b_1 = 0 is a constant: no gradient needed for it
                c = weights[t]
                grad_c = _dot_children(u_hat, grad_s)  # (B, K, N)
                # softmax backward over K; the same with the leak (its logit is constant, its share unused)
                grad_b = c * (grad_c - (c * grad_c).sum(dim=1, keepdim=True))
                g_logits = grad_b if g_logits is None else g_logits + grad_b
        lhs = torch.stack(left, dim=2)  # (B, K, T, N)
        rhs = torch.stack(right, dim=2)  # (B, K, T, D)
        return torch.matmul(lhs.transpose(-1, -2), rhs), None, None  # (B, K, N, T) @ (B, K, T, D) -> (B, K, N, D)


def dynamic_routing(
    u_hat: Tensor,
    iterations: int,
    trace: bool = False,
    backward: Backward = "auto",
    start: Tensor | None = None,
    leak: bool = False,
) -> tuple[Tensor, RoutingTrace | None]:
    """Procedure 1 of the paper, vectorised over the batch, children and parents.

    Args:
        u_hat: predictions u_hat_{j|i}, laid out parents-first as (B, K, N, D) so
            that both the weighted sum and the agreement are plain batched
            matrix products over a contiguous tensor (no per-iteration copies).
        iterations: r >= 1.
        trace: keep c_ij, b_ij and v_j of every iteration.
        backward: how gradients are taken (`capsnet.nn.routing.manual_backward`): "manual", the
            hand-written backward of `_DynamicRouting`, 3x faster on a CPU but opaque to `torch.compile`;
            "autograd", the same plain ops differentiated by autograd; "auto" (default): manual on a CPU.
        start: the logits b_ij of the first iteration, (B, K, N); None (the paper): zero, uniform couplings.
            `capsnet.nn.routing.RandomCouplings` draws random ones (Where routing matters); autograd differentiates
            routing from them.
        leak: the "none-of-the-above" category (`couplings`): a child's couplings may sum to less than 1.

    Returns:
        v: parent poses (B, K, D), and the trace when asked for.
    """
    check_iterations(iterations)
    if u_hat.dim() != 4:
        raise ValueError(f"u_hat must be (B, K, N, D), got shape {tuple(u_hat.shape)}")
    if start is not None and start.shape != u_hat.shape[:3]:
        raise ValueError(f"start must be (B, K, N) = {tuple(u_hat.shape[:3])}, got {tuple(start.shape)}")
    manual = manual_backward(backward, u_hat.device)
    if not trace:
        if manual and start is None and torch.is_grad_enabled() and u_hat.requires_grad:
            return _DynamicRouting.apply(u_hat, iterations, leak), None
        return _route(u_hat, iterations, start, leak)[3][-1], None
    weights, logits, sums, poses = (torch.stack(x, dim=1) for x in _route(u_hat, iterations, start, leak))
    return poses[:, -1], RoutingTrace(
        votes=u_hat,  # (B, K, N, D)
        coupling=weights,  # (B, r, K, N)
        logits=logits,  # (B, r, K, N)
        sums=sums,  # (B, r, K, D)
        poses=poses,  # (B, r, K, D)
        lengths=poses.norm(dim=-1),  # (B, r, K)
        agreement=torch.einsum("bknd,btkd->btkn", u_hat, poses),  # (B, r, K, N)
        leak=leak,
    )
