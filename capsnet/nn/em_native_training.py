"""EM routing with gradients on a CPU, its vote-sized work done by the compiled kernel's passes (`em_native`).

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR. https://openreview.net/forum?id=HJWLfGWRb

Procedure 1 and its hand-written backward exactly as `capsnet.nn.em_routing` writes them (`_route`, `_m_step`,
`_e_step`, `_EMRouting.backward`: the formulas are in their docstrings), with every operation that reads the votes
replaced by a pass of the kernel that remakes them from the children's poses and W where it needs them (a slot's W
held in registers, each entry of a vote four fused multiply-adds):
    em_moments    sum_i w_ij [V', V'^2]          the first M-step's moments, and the backward's g_weights (there w
                                                 is the E-step's softmax backward, made from R, dL/dR a and each
                                                 child's sum of R dL/dR a as it goes, and kept for em_vote_grad)
    em_estep      R_ij from [V', V'^2] . g_j     the E-step (distances, then each child's softmax over its parents)
                                                 and the next M-step's moments of R a, in one pass
    em_back_mstep g_w = [V', V'^2] . g_j         an M-step's backward after the first, a position at a time: sum_i g_w w,
                                                 then dL/dR a for the E-step before, each child's sum of R dL/dR a,
                                                 and dL/da
    em_vote_grad  dL/dM and dL/dW from dL/d[V', V'^2] = sum_t left_t right_t (never written out), and the first
                  M-step's backward in the same pass (its g_w, sum_i g_w w and sum_j g_w R / (n + eps))
and the per-parent arithmetic in a call each: em_fit (an M-step's end: d, sigma^2, the logit, the next E-step's
weights) and em_back_fit (its backward: the gradients of the moments, of n and of the betas). (V' = V - c,
each parent's votes about its centre c.) A step of r iterations makes 3r - 1 vote passes a layer: r forward, 2r - 1
backward. What stays in PyTorch is the order of the calls and a few sums; the assignments and the backward's
left factors, one number a vote (B x P x I x J), are kept between passes (an M-step's weights w = R a / (n + eps)
as R and 1 / (n + eps), made where the pass needs them); no tensor of the votes' size is made, in the forward or the
backward.
Layouts: a vote's number (B, P, I, Jp), a parent's vector (B, P, 16, Jp), J padded to the kernel's block (a padded
type gets no assignment and is cut from the results).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from capsnet.nn import em_native
from capsnet.nn.em_routing import LOG_WEIGHT_FLOOR, inverse_temperature

MAX_FACTORS = 7  # em_vote_grad keeps 2r - 1 factors a vote: up to r = 4 (the papers route 2 or 3 times)


def supports(iterations: int) -> bool:
    """Whether the kernel's backward takes `iterations` (2r - 1 factors a vote at most MAX_FACTORS)."""
    return 2 * iterations - 1 <= MAX_FACTORS


class _Passes:
    """The kernel's passes over one layer's votes for one batch, each on torch's threads (`em_kernel.cpp`)."""

    def __init__(
        self, library: em_native.Kernel, grid: Tensor, tiles: Tensor, offsets: Tensor | None, centre: Tensor,
        child: Tensor,
    ):  # fmt: skip
        self.ops, self.grid, self.tiles, self.offsets, self.centre, self.child = (
            library.ops, grid, tiles, offsets, centre, child
        )  # fmt: skip
        self.batch, _, self.children, _ = grid.shape
        self.positions, self.slots = child.shape
        self.padded = tiles.shape[-1]
        self.common = (child, grid, tiles, offsets, centre)

    def moments(
        self, weights: Tensor, scale: Tensor | None = None, softmax: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """sum_i w [V', V'^2] (B, P, 2, 16, Jp) and sum_i w (B, P, Jp), w = weights (B, P, I, Jp), or (1, P, I, Jp)
        for every image alike, times scale (B, P, I) where given. With `softmax` (an E-step's R (B, P, I, Jp) and
        each child's sum of R g (B, C), as `back_mstep` gives it), the weights are g = dL/dR a (the caller's own) and
        w the softmax's backward g_l = R (g - the child's sum), written over g."""
        scale = None if scale is None else scale.contiguous()
        assign, totals = (None, None) if softmax is None else (x.contiguous() for x in softmax)
        out = torch.empty(self.batch, self.positions, 2, 16, self.padded, dtype=torch.float32)
        amount = torch.empty(self.batch, self.positions, self.padded, dtype=torch.float32)
        self.ops.moments(*self.common, weights.contiguous(), scale, assign, totals, out, amount)
        return out, amount

    def estep(self, vectors: Tensor, constant: Tensor, slots: Tensor, scale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """R (B, P, I, Jp), each child's softmax over its parents of constant - [V', V'^2] . g / 2: vectors (B, P, 2,
        16, Jp) = g, constant (B, P, Jp), slots (C, S) each child's slots (`em_native.slot_table`); and in the same
        pass the next M-step's moments of R times scale (B, P, I), as `moments` gives them."""
        out = torch.empty(self.batch, self.positions, self.slots, self.padded, dtype=torch.float32)
        sums = torch.empty(self.batch, self.positions, 2, 16, self.padded, dtype=torch.float32)
        amount = torch.empty(self.batch, self.positions, self.padded, dtype=torch.float32)
        self.ops.estep(
            *self.common, vectors.contiguous(), constant.contiguous(), slots, LOG_WEIGHT_FLOOR, out,
            scale.contiguous(), sums, amount,
        )  # fmt: skip
        return out, sums, amount

    def back_mstep(
        self,
        vectors: Tensor,
        assignment: Tensor,
        activations: Tensor,
        inverse: Tensor,
        g_amount: Tensor,
        grad_a: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The M-step's side of the backward of an iteration after the first: from the gradient of its moments g (B,
        P, 2, 16, Jp), R (B, P, I, Jp), a (B, P, I), 1 / (n + eps) and the gradient of n so far (B, P, Jp), adds the
        activations' share into grad_a (B, P, I) and returns dL/dR a (B, P, I, Jp), what the E-step before receives,
        and each child's sum of R dL/dR a over its slots and types (B, C), what that E-step's softmax subtracts."""
        out = torch.empty(self.batch, self.positions, self.slots, self.padded, dtype=torch.float32)
        totals = torch.zeros(self.batch, self.children, dtype=torch.float32)
        given = (x.contiguous() for x in (vectors, assignment, activations, inverse, g_amount))
        self.ops.back_mstep(*self.common, *given, out, grad_a, totals)
        return out, totals

    def fit(
        self,
        sums: Tensor,
        amount: Tensor,
        beta_u: Tensor,
        beta_a: Tensor,
        parents: int,
        scale: float,
        lam: float,
        estep: bool,
    ) -> tuple[tuple[Tensor, ...], tuple[Tensor, Tensor] | None]:
        """The end of an M-step (em_kernel.c's em_fit) from its sums (B, P, 2, 16, Jp) and n (B, P, Jp): the fit (n,
        the mean about the centre d and sigma^2 (B, P, 16, Jp), spread > 0 (bool, the same), the logit z (B, P, Jp)),
        and where an E-step follows, its weights [-2 d / sigma^2, 1 / sigma^2] (B, P, 2, 16, Jp) and constant (B, P,
        Jp) = log a - k / 2, -inf for a padded type."""
        sums, amount = sums.contiguous(), amount.contiguous()
        rows = (self.batch, self.positions, 16, self.padded)
        mean, variance = torch.empty(rows, dtype=torch.float32), torch.empty(rows, dtype=torch.float32)
        positive = torch.empty(rows, dtype=torch.bool)
        logit = torch.empty(self.batch, self.positions, self.padded, dtype=torch.float32)
        g = torch.empty(self.batch, self.positions, 2, 16, self.padded, dtype=torch.float32) if estep else None
        constant = torch.empty_like(logit) if estep else None
        self.ops.fit(
            sums, amount, self.centre, beta_u.contiguous(), beta_a.contiguous(), parents, scale, lam, mean, variance,
            positive, logit, g, constant,
        )  # fmt: skip
        weights = None if g is None or constant is None else (g, constant)
        return (amount, mean, variance, positive, logit), weights

    def back_fit(
        self,
        fit: tuple[Tensor, ...],
        beta_u: Tensor,
        scale: float,
        lam: float,
        after: tuple[Tensor, Tensor] | None,
        last: tuple[Tensor, Tensor] | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor, Tensor]:
        """The backward of an M-step's fit, parent by parent (em_kernel.c's em_back_fit): `last` (g_mean (B, P, 16,
        Jp), g_a (B, P, Jp)) for the last fit, else `after` (the E-step's g_l summed per parent (B, P, Jp) and sum_i
        g_l [V', V'^2] (B, P, 2, 16, Jp)). Returns the gradient of the moments (B, P, 2, 16, Jp), of n (B, P, Jp),
        1 / (n + eps) (B, P, Jp), the E-step's right factor (B, P, 2, 16, Jp; None for the last fit) and the
        gradients of beta_a and beta_u (Jp)."""
        shape = (self.batch, self.positions, 2, 16, self.padded)
        g_moments = torch.empty(shape, dtype=torch.float32)
        right = None if last is not None else torch.empty(shape, dtype=torch.float32)
        g_amount = torch.empty(self.batch, self.positions, self.padded, dtype=torch.float32)
        inverse = torch.empty_like(g_amount)
        given = [x.contiguous() for x in (last if last is not None else after)]  # type: ignore[union-attr]
        from_last = (*given, None, None) if last is not None else (None, None, *given)
        own = _own(2, self.padded)  # (threads, 2, Jp): each thread's beta_a, beta_u gradients
        self.ops.back_fit(
            *(x.contiguous() for x in fit), self.centre, beta_u.contiguous(), scale, lam, *from_last, g_moments,
            g_amount, inverse, right, own,
        )  # fmt: skip
        sums = own.sum(dim=0)
        return g_moments, g_amount, inverse, right, sums[0], sums[1]

    def vote_grad(self, factors: list[Factor], activations: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """dL/d grid (B, 4, C, 4) and dL/d tiles (I, 4, 4, Jp) from the gradient of [V', V'^2], the sum of the
        factors, and with them the M-step's side of the last factor's (the first M-step's weights): sum_i g_w w (B,
        P, Jp) and sum_j g_w R / (n + eps) (B, P, I), g_w = [V', V'^2] . its right. Each thread adds into its own W
        gradient, summed here."""
        grad_grid = torch.empty_like(self.grid)
        sums = torch.empty(self.batch, self.positions, self.padded, dtype=torch.float32)
        assigned = torch.empty(self.batch, self.positions, self.slots, dtype=torch.float32)
        own = _own(*self.tiles.shape)
        self.ops.vote_grad(
            *self.common, [f.base for f in factors], [f.right for f in factors], [f.inverse for f in factors],
            activations.contiguous(), grad_grid, own, sums, assigned,
        )  # fmt: skip
        return grad_grid, own.sum(dim=0), sums, assigned


def _own(*shape: int) -> Tensor:
    """Zeros (threads, *shape): a row for each of torch's threads to add into (no two add into the same numbers)."""
    return torch.zeros(torch.get_num_threads(), *shape, dtype=torch.float32)


class Factor:
    """One factor of the gradient of [V', V'^2]: a number a vote, base (B or 1, P, I, Jp) times a_i / (n_j + eps)
    where `inverse` (B, P, Jp) is given (an M-step's weights), times a vector a parent, right (B, P, 2, 16, Jp)."""

    def __init__(self, base: Tensor, right: Tensor, inverse: Tensor | None = None):
        self.base, self.right = base.contiguous(), right.contiguous()
        self.inverse = None if inverse is None else inverse.contiguous()


def route(
    library: em_native.Kernel,
    grid: Tensor,
    activations: Tensor,
    weights: Tensor,
    beta_u: Tensor,
    beta_a: Tensor,
    offsets: Tensor | None,
    centre: Tensor,
    child_index: Tensor,
    children: int,
    iterations: int,
) -> tuple[Tensor, Tensor]:
    """EM routing of one layer with gradients: each child's pose by rows (B, 4, C, 4) (`em_native.child_rows`), each
    slot's child activation (B, P, I), W per slot (I, J, 4, 4), beta_u and beta_a (J,), offsets (I, 16) or None, each
    parent's centre (B, P, 16, Jp) -> poses mu_j (B, P, J, 16) and activations a_j (B, P, J), in float32 whatever
    autocast says (as the PyTorch path routes)."""
    with torch.autocast(grid.device.type, enabled=False):
        return NativeEMRouting.apply(
            grid, activations, weights, beta_u, beta_a, offsets, centre, child_index, children, iterations, library
        )


class NativeEMRouting(torch.autograd.Function):
    """Procedure 1 and `_EMRouting`'s backward on the kernel's passes (the module docstring)."""

    @staticmethod
    def forward(ctx: Any, grid: Tensor, activations: Tensor, weights: Tensor, beta_u: Tensor, beta_a: Tensor,
                offsets: Tensor | None, centre: Tensor, child_index: Tensor, children: int, iterations: int,
                library: em_native.Kernel) -> tuple[Tensor, Tensor]:  # fmt: skip
        parents = weights.shape[1]
        padded = em_native.padded_types(library, parents)
        grid, activations, centre = (x.float().contiguous() for x in (grid, activations, centre))
        tiles = em_native.tiles_of(weights.float(), padded)
        offsets = None if offsets is None else offsets.float().contiguous()
        passes = _Passes(library, grid, tiles, offsets, centre, child_index.contiguous())
        pad = padded - parents
        bu, ba = F.pad(beta_u.float(), (0, pad)), F.pad(beta_a.float(), (0, pad))
        real = (torch.arange(padded) < parents).float()  # (Jp,)
        positions, slots = child_index.shape
        scale = parents / slots
        table, even = em_native.slot_table(child_index, children, parents)  # each child's slots; (P, I)
        assignment = (even.view(1, positions, slots, 1) * real).contiguous()  # R: (1, P, I, Jp), every image alike
        child_a = activations.unsqueeze(-1)  # (B, P, I, 1)
        assignments, fits = [], []
        sums, amount = passes.moments(assignment, scale=activations)  # r = R a: sum_i r [V', V'^2], n = sum_i r
        for t in range(iterations):
            # the M-step's end: (n, d, sigma^2, spread > 0, z), and the next E-step's weights where one follows
            fit, following = passes.fit(
                sums, amount, bu, ba, parents, scale, inverse_temperature(t + 1), t < iterations - 1
            )
            assignments.append(assignment)  # the first (1, P, I, Jp), every image's alike
            fits.append(fit)
            if following is not None:  # the E-step, and the next M-step's sums in the same pass
                assignment, sums, amount = passes.estep(*following, table, activations)
        _, mean, _, _, logit = fits[-1]
        ctx.passes, ctx.fits, ctx.assignments = passes, fits, assignments
        ctx.shape = (children, iterations, parents, scale, weights.shape)
        ctx.save_for_backward(child_a, beta_u, child_index, real)
        out_mean = (mean + centre)[..., :parents].permute(0, 1, 3, 2)  # (B, P, J, 16)
        return out_mean.contiguous(), torch.sigmoid(logit[..., :parents])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_mean: Tensor, grad_a: Tensor) -> tuple[Tensor | None, ...]:
        children, r, parents, scale, weight_shape = ctx.shape
        child_a, beta_u, child_index, real = ctx.saved_tensors
        passes: _Passes = ctx.passes
        padded = passes.padded
        pad = padded - parents
        bu = F.pad(beta_u.float(), (0, pad))
        grad_mean = F.pad(grad_mean.float().permute(0, 1, 3, 2), (0, pad))  # (B, P, 16, Jp)
        grad_a = F.pad(grad_a.float(), (0, pad))  # (B, P, Jp)
        factors: list[Factor] = []  # the gradient of [V', V'^2]: a number a vote times a vector a parent, summed
        activations = child_a.squeeze(-1).contiguous()  # (B, P, I)
        grad_child_a = torch.zeros_like(activations)
        grad_beta_u = torch.zeros(padded, dtype=torch.float32)
        grad_beta_a = torch.zeros(padded, dtype=torch.float32)
        grad_next: tuple[Tensor, Tensor] | None = None  # dL/dR_{t+1} a and each child's sum of R_{t+1} of it
        for t in reversed(range(r)):
            lam = inverse_temperature(t + 1)
            if t == r - 1:
                after, last = None, (grad_mean, grad_a)
            else:
                assert grad_next is not None
                # the softmax's backward: g_l = R_{t+1} (g - sum over the child of R_{t+1} g), written over g, its
                # sum_i g_l [V', V'^2] and sum_i g_l a parent
                g_l, totals = grad_next
                g_l_moments, g_l_sum = passes.moments(g_l, softmax=(ctx.assignments[t + 1], totals))
                after, last = (g_l_sum, g_l_moments), None
            fit = ctx.fits[t]
            g_moments, g_amount, inverse, right, g_beta_a, g_beta_u = passes.back_fit(fit, bu, scale, lam, after, last)
            grad_beta_a += g_beta_a
            grad_beta_u += g_beta_u
            if right is not None:  # the E-step's distances: g_quadratic = -g_l / 2, the half in its right factor
                factors.append(Factor(g_l, right))
            # the weights w = R a / (n + eps) times g_moments; R_0's own gradient is not wanted (the even start)
            factors.append(Factor(ctx.assignments[t], g_moments, inverse))
            if t > 0:  # g_w = [V', V'^2] . g_moments, sum_i g_w w, then dL/dR a and dL/da, a position at a time
                grad_next = passes.back_mstep(
                    g_moments, ctx.assignments[t], activations, inverse, g_amount, grad_child_a
                )
        # the votes' gradient, with the first M-step's side in the same pass: sum_i g_w w and sum_j g_w R / (n + eps)
        grad_grid, grad_tiles, g_w_sum, g_w_assigned = passes.vote_grad(factors, activations)
        g_n = g_amount - g_w_sum * inverse  # (B, P, Jp): the gradient of n_0
        start = ctx.assignments[0]  # (1, P, I, Jp)
        grad_child_a += g_w_assigned + torch.einsum("bpj,pij->bpi", g_n, start[0])  # sum_j (g_w / (n + eps) + g_n) R
        grad_weights = grad_tiles[..., :parents].permute(0, 3, 1, 2).reshape(weight_shape)  # (I, J, 4, 4)
        return (grad_grid, grad_child_a, grad_weights, grad_beta_u[:parents], grad_beta_a[:parents],
                None, None, None, None, None, None)  # fmt: skip
