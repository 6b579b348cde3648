"""The squash non-linearity (equation 1): a capsule's vector keeps its direction and gets a length in [0, 1).

Sabour, Frosst & Hinton (2017), "Dynamic Routing Between Capsules", NeurIPS.
https://arxiv.org/abs/1710.09829
"""

from __future__ import annotations

import torch
from torch import Tensor

from capsnet.nn.routing import LOW_PRECISION  # squash runs in float32 for these, as routing does


def squash(s: Tensor, dim: int = -1, eps: float = 1e-8) -> Tensor:
    """Equation 1: v = |s|^2 / (1 + |s|^2) * s / |s|.

    The epsilon under the square root maps a zero vector to zero with a finite
    (zero) gradient instead of the 0/0 = NaN of the formula taken literally.
    Half-precision input is squashed in float32 and returned in its own dtype:
    float16 can hold neither the epsilon nor |s|^2 of a long vector (past 65504).
    """
    x = s.float() if s.dtype in LOW_PRECISION else s
    squared_norm = (x * x).sum(dim=dim, keepdim=True)
    return (x * (squared_norm / (1.0 + squared_norm)) / torch.sqrt(squared_norm + eps)).to(s.dtype)
