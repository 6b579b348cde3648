"""What both routing algorithms share: the bound on the number of iterations, its check, the backward choice, the
float32 guard, and the axis order of their traces.

Dynamic routing (Sabour, Frosst & Hinton 2017, https://arxiv.org/abs/1710.09829; `capsnet.nn.dynamic_routing`) and
EM routing (Hinton, Sabour & Frosst 2018, https://openreview.net/forum?id=HJWLfGWRb; `capsnet.nn.em_routing`) are
both an iterated assignment of child capsules to parent capsules. Each imports this module, never the other.

Both traces keep one entry per iteration on axis 1 and the assignment of children to parents with the parents
before the children: dynamic routing's coupling c_ij as (B, r, K, N), EM's R_ij as (B, r, P, J, I).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral
from typing import Literal, NamedTuple, TypeVar

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


_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit constant as torch's int64 holds it."""
    return value - (1 << 64) if value >= 1 << 63 else value


DRAWS_AT_ONCE = 2**20  # random couplings hashed at a time (`RandomCouplings.logits`): 8 MB of each int64 temporary
_GOLDEN, _MIX1, _MIX2 = (_signed(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _shifted(x: Tensor, bits: int) -> Tensor:
    """x >> bits as an unsigned 64-bit shift (torch shifts int64 arithmetically)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x: Tensor) -> Tensor:
    """SplitMix64's finaliser (Steele, Lea & Flood 2014) on int64 counters, wrapping as uint64 would."""
    x = x + _GOLDEN
    x = (x ^ _shifted(x, 30)) * _MIX1
    x = (x ^ _shifted(x, 27)) * _MIX2
    return x ^ _shifted(x, 31)


@dataclass(frozen=True)
class RandomCouplings:
    """Random couplings for a batch, each image's drawn from (seed, the image's index, the layer) alone: the same
    whatever batch or chunk the image is read in, on any device. Where routing matters puts them, fixed and not
    routed, beside the routed ones (Paik, Kwak & Kim 2019, "Capsule Networks Need an Improved Routing Algorithm",
    https://arxiv.org/abs/1907.13327)."""

    seed: int
    ids: Tensor  # (B,) int64: each image's index in its set
    layer: int = 0  # which routing layer draws (a network with several gives each its own `for_layer`)

    def for_layer(self, layer: int) -> RandomCouplings:
        return RandomCouplings(self.seed, self.ids, layer)

    def rows(self, start: int, stop: int) -> RandomCouplings:
        """The draws of images start .. stop - 1 of the batch (a chunk of it)."""
        return RandomCouplings(self.seed, self.ids[start:stop], self.layer)

    def logits(self, shape: tuple[int, ...], device: torch.device) -> Tensor:
        """Start logits of `shape` (B, ...) whose softmax over a child's parents is uniform on the simplex
        (Dirichlet(1, .., 1)): log E with E = -log U ~ Exp(1), U from a counter-based hash (SplitMix64), float32."""
        if shape[0] != len(self.ids):
            raise ValueError(f"random couplings for {len(self.ids)} images, asked for {shape[0]}")
        count = math.prod(shape[1:])
        key = _splitmix64(_splitmix64(torch.tensor(self.seed * 1_000_003 + self.layer)) ^ self.ids.long().cpu())  # (B,)
        out = torch.empty(len(self.ids), count, dtype=torch.float32)  # (B, count)
        # a few images' draws at a time: the hash's int64 temporaries stay small enough for the allocator to serve
        # them again from its heap (a whole batch's were hundreds of MB of fresh pages each, most of the time spent)
        rows = max(1, DRAWS_AT_ONCE // count)
        for first in range(0, len(self.ids), rows):
            bits = _splitmix64(key[first : first + rows].unsqueeze(1) * count + torch.arange(count))  # (rows, count)
            uniform = (_shifted(bits, 11).double() + 0.5) * 2.0**-53  # in (0, 1)
            out[first : first + rows] = torch.log(-torch.log(uniform))  # log E
        return out.view(shape).to(device)


def coupling_entropy(couplings: Tensor) -> Tensor:
    """How peaked couplings are: each child's entropy over the parents, divided by log(parents) (1: uniform, 0: all on
    one parent), averaged over the children. Both algorithms' assignments, parents before children: c_ij or a class
    layer's R_ij as (..., K, N) -> (...)."""
    parents = couplings.shape[-2]
    per_child = -torch.special.xlogy(couplings, couplings).sum(dim=-2)  # 0 log 0 = 0: (..., N)
    return per_child.mean(dim=-1) / math.log(parents) if parents > 1 else torch.ones_like(per_child[..., 0])


class CouplingScores(NamedTuple):
    """A batch read under several coupling rules (`scores_by_coupling` of a routing network), one column each: routed
    r times from even couplings for each r asked for, then (when a generator is given) random couplings drawn from it
    and not routed."""

    scores: Tensor  # (B, R, K) the class scores: capsule lengths |v_j| or activations a_j
    entropy: Tensor  # (B, R) the class layer's coupling entropy (`coupling_entropy`) in the last iteration
