"""What both routing algorithms share: the bound on the number of iterations, its check, the backward choice, the
float32 guard, and the axis order of their traces.

Dynamic routing (Sabour, Frosst & Hinton 2017, https://arxiv.org/abs/1710.09829; `capsnet.nn.dynamic_routing`) and
EM routing (Hinton, Sabour & Frosst 2018, https://openreview.net/forum?id=HJWLfGWRb; `capsnet.nn.em_routing`) are
both an iterated assignment of child capsules to parent capsules. Each imports this module, never the other.

Both traces keep one entry per iteration on axis 1 and the assignment of children to parents with the parents
before the children: dynamic routing's coupling c_ij as (B, r, K, N), EM's R_ij as (B, r, P, J, I).
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral
from typing import Literal, TypeVar

import torch
from torch import Tensor

from capsnet.errors import InvalidArgumentError

MAX_ROUTING_ITERATIONS = 20  # the papers use 2 or 3; more is refused everywhere (a million would hang whoever asked)
LOW_PRECISION = (torch.float16, torch.bfloat16)  # routing, softmax and squash run in float32 for these

Backward = Literal["auto", "manual", "autograd"]
BACKWARDS: tuple[Backward, ...] = ("auto", "manual", "autograd")

T = TypeVar("T")


def check_iterations(iterations: int) -> int:
    """`iterations` when it is a routing count from 1 to MAX_ROUTING_ITERATIONS; InvalidArgumentError (one line)."""
    if (
        isinstance(iterations, bool)
        or not isinstance(iterations, Integral)
        or not 1 <= iterations <= MAX_ROUTING_ITERATIONS
    ):
        raise InvalidArgumentError(f"routing iterations must be from 1 to {MAX_ROUTING_ITERATIONS}, got {iterations!r}")
    return int(iterations)


def manual_backward(backward: Backward, device: torch.device) -> bool:
    """Whether routing takes its hand-written backward: "manual" always, "autograd" never, "auto" on a CPU.

    The hand-written backwards read the votes a few times instead of keeping a vote-sized gradient per operation
    (several times faster on a CPU: `benchmarks/README.md`), but `torch.compile` cannot see into them; on a GPU
    autograd's plain operations fuse into few kernels. Both give the same values and gradients.
    """
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be 'auto', 'manual' or 'autograd', got {backward!r}")
    return backward == "manual" or (backward == "auto" and device.type == "cpu")


def needs_float32(x: Tensor) -> bool:
    """Whether routing `x` must be lifted to float32: under autocast, or when `x` is half precision."""
    return torch.is_autocast_enabled(x.device.type) or x.dtype in LOW_PRECISION


def in_float32(x: Tensor, route: Callable[[Tensor], T]) -> T:
    """`route(x)` in float32 with autocast off: the float32 guard both algorithms run behind (a softmax over
    logits, or a variance, in bfloat16 loses the differences routing is made of)."""
    with torch.autocast(x.device.type, enabled=False):
        return route(x.float())
