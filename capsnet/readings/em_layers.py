"""The EM network's two convolutional capsule layers as EM routed them on one input, one child capsule at a time.

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR, section 2.1: in ConvCaps1 and ConvCaps2
every K x K window of child capsules votes for the parent types at that window's position, and a child in several
windows (up to 9 with stride 1) gives its one unit of data to all the parents there together: R_ij summed over
every window it is in and over the parent types is 1 (`capsnet.nn.em_routing`; Gritzman, arXiv:1907.00652, lists
parents that do not compete across positions as a pitfall). A child in no window (the last row and column of a
12x12 grid under 3x3 windows of stride 2) gives its data to nobody. The layers' traces come from the forward pass
that reads the class layer (`capsnet.readings.explain_em.explain_em_with_layers`); no Python loop over capsules.
Runs without Streamlit and returns NumPy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capsnet.nn.em_capsnet import EMCapsNetConfig, EMCapsNetOutput
from capsnet.nn.em_routing import EMTrace

LAYER_NAMES = ("ConvCaps1", "ConvCaps2")


@dataclass(frozen=True)
class ChildSplit:
    """Where one child capsule's unit of data went in one iteration: to `shares[m, j]` of parent type j at the
    window position `positions[m]` (row-major on the parent grid). Empty when no window holds the child."""

    child: int  # i = type * side^2 + y * side + x on the child grid
    positions: np.ndarray  # (M,) the windows holding the child, row-major on the parent grid
    shares: np.ndarray  # (M, J) R_ij, summing to 1 over both axes (0 when M = 0)

    @property
    def total(self) -> float:
        return float(self.shares.sum())


@dataclass
class ConvLayerRouting:
    """One convolutional capsule layer's EM routing on one input, per M-step t = 1..r."""

    name: str  # "ConvCaps1" or "ConvCaps2"
    child_grid: tuple[int, int]  # (types, side) of the grid it reads
    parent_grid: tuple[int, int]  # (types, side) of the grid it makes
    kernel: int
    stride: int
    parent_activations: np.ndarray  # (r, J, n, n) a_j as each M-step fitted it
    child_activations: np.ndarray  # (T, side, side) a_i of the children
    assignments: np.ndarray  # (r, L, J, I) R_ij of every window slot, as each M-step weighed them
    child_index: np.ndarray  # (L, I) the child in each slot of each window

    @property
    def iterations(self) -> int:
        return int(self.assignments.shape[0])

    def child(self, kind: int, y: int, x: int) -> int:
        """The index i of the child of type `kind` (from 0) at row y, column x; ValueError outside the grid."""
        types, side = self.child_grid
        if not (0 <= kind < types and 0 <= y < side and 0 <= x < side):
            raise ValueError(f"{self.name} reads {types} types on a {side}x{side} grid: no child ({kind}, {y}, {x})")
        return kind * side * side + y * side + x

    def position(self, child: int) -> tuple[int, int, int]:
        """(type, row, column) of child i."""
        side = self.child_grid[1]
        return child // (side * side), (child // side) % side, child % side

    def most_active_child(self) -> int:
        """The child with the highest activation a_i (the first of ties)."""
        return int(np.argmax(self.child_activations.reshape(-1)))

    def default_child(self) -> int:
        """A view's first child: the most active of those in more than one window, where positions compete (a
        corner child under one window shows none); the most active of all if no child is in two windows."""
        counts = np.bincount(self.child_index.reshape(-1), minlength=self.child_activations.size)  # (T*side^2,)
        shared = counts > 1
        if not shared.any():
            return self.most_active_child()
        return int(np.argmax(np.where(shared, self.child_activations.reshape(-1), -1.0)))

    def split(self, child: int, step: int) -> ChildSplit:
        """Where child i's data went at M-step `step` (from 1): one row per window that holds it."""
        if not 1 <= step <= self.iterations:
            raise ValueError(f"step must be in 1..{self.iterations}, got {step}")
        window, slot = np.nonzero(self.child_index == child)  # (M,) each: every window holding it, its slot there
        shares = self.assignments[step - 1][window, :, slot]  # (M, J)
        return ChildSplit(child=child, positions=window, shares=shares)


def layers_of(c: EMCapsNetConfig, out: EMCapsNetOutput) -> tuple[ConvLayerRouting, ConvLayerRouting]:
    """ConvCaps1's and ConvCaps2's routing from a forward pass that kept the layers' traces and the primary capsules
    (`return_layer_traces=True, return_primary=True`), of its first example."""
    assert out.layer_traces is not None and out.primary is not None  # asked for
    primary = out.primary[1][0].float().cpu().numpy()  # (T, G, G) the primary capsules' activations
    first = _layer(LAYER_NAMES[0], out.layer_traces[0], primary, c.convcaps1_types, c.convcaps_kernel,
                   c.convcaps1_stride)  # fmt: skip
    second = _layer(LAYER_NAMES[1], out.layer_traces[1], first.parent_activations[-1], c.convcaps2_types,
                    c.convcaps_kernel, c.convcaps2_stride)  # fmt: skip
    return first, second


def _layer(
    name: str, trace: EMTrace, child_a: np.ndarray, parent_types: int, kernel: int, stride: int
) -> ConvLayerRouting:
    """One layer's routing from its trace; `child_a` (T, side, side) the grid it reads (its children's a_i)."""
    types, side = child_a.shape[0], child_a.shape[-1]
    n = (side - kernel) // stride + 1
    r = trace.activations.shape[1]
    acts = trace.activations[0].float().cpu()  # (r, L, J)
    return ConvLayerRouting(
        name=name,
        child_grid=(types, side),
        parent_grid=(parent_types, n),
        kernel=kernel,
        stride=stride,
        parent_activations=acts.permute(0, 2, 1).reshape(r, parent_types, n, n).numpy(),  # (r, J, n, n)
        child_activations=child_a,
        assignments=trace.assignments[0].float().cpu().numpy(),  # (r, L, J, I)
        child_index=trace.child_index.cpu().numpy(),  # (L, I)
    )
