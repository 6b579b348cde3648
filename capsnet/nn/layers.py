"""Capsule layers: primary capsules, and the digit capsules that route their votes (`capsnet.nn.dynamic_routing`).

Sabour, Frosst & Hinton (2017), "Dynamic Routing Between Capsules", NeurIPS.
https://arxiv.org/abs/1710.09829

Notation follows the paper: i indexes the N child (primary) capsules, j the K
parent (digit) capsules; u_i is a child's pose, u_hat_{j|i} = W_ij u_i its
prediction for parent j, b_ij the routing logits, c_ij = softmax_j(b_ij) the
coupling coefficients, s_j = sum_i c_ij u_hat_{j|i} and v_j = squash(s_j).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capsnet.nn.dynamic_routing import RoutingTrace, dynamic_routing
from capsnet.nn.routing import in_float32, needs_float32
from capsnet.nn.squash import squash


class PrimaryCapsules(nn.Module):
    """A convolution whose output channels are grouped into capsules, then squashed.

    The paper's layer: 32 types of 8-D capsules, 9x9 kernel, stride 2, giving a
    6x6 grid of each type on MNIST: 1152 capsules. Capsule i is (type, y, x) in
    row-major order, so `poses.view(B, types, grid, grid, dim)` recovers the grid.
    """

    def __init__(self, in_channels: int, types: int, dim: int, kernel: int, stride: int, scale: float = 1.0) -> None:
        super().__init__()
        self.types, self.dim, self.scale = types, dim, scale
        self.conv = nn.Conv2d(in_channels, types * dim, kernel_size=kernel, stride=stride)

    def forward(self, x: Tensor) -> Tensor:
        if self.scale == 1.0:
            out = self.conv(x)  # (B, types*dim, G, G)
        else:  # the official code's 1/32 on the convolution's output, before its bias
            out = F.conv2d(x, self.conv.weight, None, self.conv.stride) * self.scale
            assert self.conv.bias is not None  # the convolution is built with its bias
            out = out + self.conv.bias.view(1, -1, 1, 1)  # (B, types*dim, G, G)
        batch, _, height, width = out.shape
        out = out.view(batch, self.types, self.dim, height, width)  # (B, 32, 8, 6, 6)
        out = out.permute(0, 1, 3, 4, 2).reshape(batch, self.types * height * width, self.dim)  # (B, 1152, 8)
        return squash(out)


class RoutingCapsules(nn.Module):
    """Parent capsules reached from child capsules by dynamic routing (DigitCaps).

    Holds one D x P transformation matrix W_ij per (child i, parent j) pair and
    no bias: 1152 * 10 * 16 * 8 = 1,474,560 parameters in the paper's model.
    """

    def __init__(self, children: int, child_dim: int, parents: int, parent_dim: int, leak: bool = False) -> None:
        super().__init__()
        self.children_count, self.child_dim = children, child_dim
        self.parents, self.parent_dim = parents, parent_dim
        self.leak = leak  # the "none-of-the-above" category of the CIFAR-10 network (`dynamic_routing`)
        self.weight = nn.Parameter(torch.empty(children, parents, parent_dim, child_dim))  # W: (N, K, D, P)
        nn.init.normal_(self.weight, std=1.0 / math.sqrt(child_dim * parents))

    def predictions(self, u: Tensor) -> Tensor:
        """u_hat_{j|i} = W_ij u_i for every pair, laid out (B, K, N, D) for routing."""
        batch = u.shape[0]
        n, k, d, p = self.weight.shape
        # one matrix product per child i over the whole batch; D stays innermost
        # throughout, so the layout change below moves whole 16-float rows
        w_t = self.weight.view(n, k * d, p).transpose(1, 2)  # (N, P, K*D)
        u_hat = torch.bmm(u.transpose(0, 1), w_t)  # (N, B, P) @ (N, P, K*D) -> (N, B, K*D)
        u_hat = u_hat.view(n, batch, k, d).permute(1, 2, 0, 3)  # (N, B, K, D) -> (B, K, N, D)
        return u_hat.contiguous()

    def forward(self, u: Tensor, iterations: int, trace: bool = False) -> tuple[Tensor, RoutingTrace | None]:
        if u.shape[1:] != (self.children_count, self.child_dim):
            raise ValueError(
                f"expected child capsules of shape (B, {self.children_count}, {self.child_dim}), got {tuple(u.shape)}"
            )
        return self.route(self.predictions(u), iterations, trace)  # u_hat: (B, K, N, D)

    def route(
        self, u_hat: Tensor, iterations: int, trace: bool = False, start: Tensor | None = None
    ) -> tuple[Tensor, RoutingTrace | None]:
        """Dynamic routing of votes u_hat (B, K, N, D) to the parent poses (B, K, D), behind the float32 guard;
        `start`: the first iteration's logits b_ij (B, K, N), zero when None (`dynamic_routing`)."""
        if not needs_float32(u_hat):
            return dynamic_routing(u_hat, iterations, trace, start=start, leak=self.leak)
        # routing (softmax, squash) in float32 under autocast and in a half-precision model; the latter
        # gets its poses back in its own dtype (autocast takes float32 poses on to the decoder)
        poses, routed = in_float32(
            u_hat, lambda votes: dynamic_routing(votes, iterations, trace, start=start, leak=self.leak)
        )
        autocast = torch.is_autocast_enabled(u_hat.device.type)
        return (poses if autocast else poses.to(u_hat.dtype)), routed


def capsule_lengths(poses: Tensor) -> Tensor:
    """|v| over the last dimension: the probability that the entity is present."""
    return torch.linalg.vector_norm(poses, dim=-1)
