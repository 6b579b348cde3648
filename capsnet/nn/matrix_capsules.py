"""Layers of matrix capsules: primary capsules, convolutional capsules and class capsules, routed by EM.

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR. https://openreview.net/forum?id=HJWLfGWRb

A capsule grid is held as poses (B, T, 16, H, W), the 4x4 pose matrix of each of T types at each cell flattened
row-major, and activations (B, T, H, W). A child's vote for a parent is its pose times a learned 4x4 matrix,
V_ij = M_i W_ij; W depends on the child's type, the parent's type and (in a convolutional layer) the child's place
in the kernel, never on the position of the kernel: transformation matrices are shared like convolution weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capsnet.nn import em_native, em_native_training
from capsnet.nn.em_routing import (
    LOG_WEIGHT_FLOOR,
    EMTrace,
    child_softmax,
    em_routing,
    em_routing_by_iterations,
    inverse_temperature,
)
from capsnet.nn.routing import RandomCouplings, check_iterations, in_float32

POSE = 4  # a pose is a 4x4 matrix
POSE_ENTRIES = POSE * POSE  # 16
BETA_NAMES = ("beta_u", "beta_a")  # the parameters that hold each parent type's learned costs
# the most bytes of votes and [V, V^2] one chunk of a batch routes at a time (`_in_chunks`). On a CPU, 32 MiB: what
# glibc's allocator serves again from its own heap (a larger tensor is fresh pages from the kernel every time, a page
# fault per 4 KB), so that training and reading run 1.3-2x faster than with the whole batch at once and a reading
# holds about 1 MB an image (`benchmarks/README.md`); on a GPU, whose allocator keeps its blocks, a reading routes up
# to 1 GiB at a time and training the whole batch
CPU_CHUNK_BYTES = 32 * 2**20
DEVICE_CHUNK_BYTES = 2**30


class PrimaryMatrixCapsules(nn.Module):
    """A 1x1 convolution per cell: B pose matrices (16 linear outputs each) and B sigmoid activations."""

    def __init__(self, in_channels: int, types: int) -> None:
        super().__init__()
        self.types = types
        self.pose = nn.Conv2d(in_channels, types * POSE_ENTRIES, kernel_size=1)
        self.activation = nn.Conv2d(in_channels, types, kernel_size=1)

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        batch, _, height, width = features.shape
        poses = self.pose(features).view(batch, self.types, POSE_ENTRIES, height, width)  # (B, T, 16, H, W)
        return poses, torch.sigmoid(self.activation(features))  # (B, T, H, W)


def _route_float32(
    votes: Tensor,
    child_a: Tensor,
    layer: _EMRoutedLayer,
    iterations: int,
    trace: bool,
    every: bool,
    start: Tensor | None = None,
) -> tuple[Tensor, Tensor, EMTrace | None]:
    """EM routing in float32 (under autocast and in a half-precision model alike), results in float32; with `every`,
    the results at r = 1 .. iterations stacked r-major along the batch: (r*B, P, J, H), (r*B, P, J). `start`: the
    first R_ij's logits (B, P, J, I), when not even (`em_routing`)."""
    if every:
        means, acts = in_float32(votes, lambda v: em_routing_by_iterations(
            v, child_a.float(), layer.child_index, layer.children_count,
            layer.beta_u.float(), layer.beta_a.float(), iterations,
        ))  # fmt: skip
        return means.flatten(0, 1), acts.flatten(0, 1), None
    return in_float32(votes, lambda v: em_routing(
        v, child_a.float(), layer.child_index, layer.children_count,
        layer.beta_u.float(), layer.beta_a.float(), iterations, trace, start=start,
    ))  # fmt: skip


def _in_chunks(
    layer: _EMRoutedLayer,
    poses: Tensor,
    activations: Tensor,
    iterations: int,
    trace: bool,
    every: bool = False,
    random: RandomCouplings | None = None,
) -> tuple[Tensor, Tensor, EMTrace | None]:
    """`layer._route` over the batch in chunks of at most CPU_CHUNK_BYTES of routing tensors each on a CPU (training
    and reading alike: each chunk's routing is its own autograd node, so gradients are the whole batch's) and
    DEVICE_CHUNK_BYTES in a reading elsewhere; one pass over the whole batch for a trace (which keeps every example's
    votes), under torch.compile (which fuses the whole pass) and in training off the CPU. With `every`, the results
    at r = 1 .. iterations, r-major along the batch (r*B, ...). With `random`, the first R_ij are drawn from it,
    each image's the same in any chunk."""
    batch = poses.shape[0]
    positions, slots = layer.child_index.shape

    def start(rows: slice) -> Tensor | None:  # the first R_ij's logits of these images: (b, P, J, I)
        if random is None:
            return None
        chunk = random.rows(rows.start, min(rows.stop, batch))
        return chunk.logits((len(chunk.ids), positions, layer.beta_u.numel(), slots), poses.device)

    check_iterations(iterations)
    grid = (layer.in_types, layer.in_size, layer.in_size)
    if poses.shape[1:] != (grid[0], POSE_ENTRIES, *grid[1:]) or activations.shape != (poses.shape[0], *grid):
        raise ValueError(
            f"{type(layer).__name__} reads poses (B, {grid[0]}, 16, {grid[1]}, {grid[2]}) and activations (B, "
            f"{grid[0]}, {grid[1]}, {grid[2]}), got {tuple(poses.shape)} and {tuple(activations.shape)}"
        )
    on_cpu = poses.device.type == "cpu"
    learnt = (poses, activations, layer.weight, layer.beta_u, layer.beta_a)
    needs_grad = torch.is_grad_enabled() and any(p.requires_grad for p in learnt)
    plain = not (trace or needs_grad or torch.compiler.is_compiling() or torch.is_autocast_enabled("cpu"))
    library = em_native.kernel() if on_cpu and plain and poses.dtype == torch.float32 else None
    if library is not None:  # a CPU reading in float32: the compiled kernel, image by image (`em_native`)
        logits = start(slice(0, batch))
        first = None if logits is None else child_softmax(logits, layer.child_index, layer.children_count)
        return _native(layer, library, poses, activations, iterations, every, first)
    trains = on_cpu and needs_grad and not (trace or every or random or torch.compiler.is_compiling())
    library = em_native.kernel() if trains and em_native_training.supports(iterations) else None
    if library is not None:  # CPU training: Procedure 1 and its backward on the kernel's passes, no vote-sized tensor
        return _native_training(layer, library, poses, activations, iterations)
    kron = _kron(layer.weight, poses)  # once for every chunk
    chunk = max(1, (CPU_CHUNK_BYTES if on_cpu else DEVICE_CHUNK_BYTES) // layer.routing_bytes_per_image())
    if trace or (needs_grad and not on_cpu) or chunk >= batch or torch.compiler.is_compiling():
        return layer._route(poses, activations, kron, iterations, trace, every, start(slice(0, batch)))
    parts = [
        layer._route(p, a, kron, iterations, False, every, start(slice(n, n + chunk)))
        for n, p, a in zip(range(0, batch, chunk), poses.split(chunk), activations.split(chunk))
    ]
    out_poses, out_a = [p[0] for p in parts], [p[1] for p in parts]
    if every:  # each chunk's results are r-major, (r*b, ...): joined along the batch within each r
        out_poses, out_a = ([x.unflatten(0, (iterations, -1)) for x in xs] for xs in (out_poses, out_a))
        return torch.cat(out_poses, 1).flatten(0, 1), torch.cat(out_a, 1).flatten(0, 1), None
    return torch.cat(out_poses), torch.cat(out_a), None


def _by_iterations(layer: _EMRoutedLayer, poses: Tensor, activations: Tensor, iterations: int) -> tuple[Tensor, Tensor]:
    """A layer's poses and activations at r = 1 .. iterations from one routing run, each with a leading r axis."""
    out_poses, out_a, _ = _in_chunks(layer, poses, activations, iterations, False, every=True)
    return out_poses.unflatten(0, (iterations, -1)), out_a.unflatten(0, (iterations, -1))


def _kron(weight: Tensor, poses: Tensor) -> Tensor:
    """W (I, J, 4, 4) as the matrices that take a pose's 16 entries to its votes, kron(I_4, W_ij) side by side:
    (I, 16, J*16), in the dtype the votes of `poses` are computed in (autocast's where it is on, else the poses')."""
    slots, parents = weight.shape[:2]
    eye = torch.eye(POSE, dtype=weight.dtype, device=weight.device)
    kron = torch.einsum("rs,ijkc->irkjsc", eye, weight)  # (I, 4, 4, J, 4, 4): (r, k) -> (j, s, c), r = s
    kron = kron.reshape(slots, POSE_ENTRIES, parents * POSE_ENTRIES)  # (I, 16, J*16)
    device_type = poses.device.type
    autocast = torch.is_autocast_enabled(device_type)
    return kron.to(torch.get_autocast_dtype(device_type) if autocast else poses.dtype)  # once, not once a chunk


def _votes(rows: Tensor, kron: Tensor) -> Tensor:
    """V = M W for every slot: poses (I, N, 16) and kron(I_4, W) (I, 16, J*16) (`_kron`) -> votes (I, N, J, 16).

    A pose's 16 entries (row-major) map to its vote's by the 16x16 matrix kron(I_4, W): V[r, c] = sum_k M[r, k] W[k, c]
    takes entry (r, k) to (r, c). So each slot's votes are one product over all N poses, (N, 16) @ (16, J*16), whose
    rows are whole votes: the routing layout (B, P, J, I, 16) is then a view that copies 16 entries at a time (a 4x4
    product has rows (n, r) and columns (j, c), and moving its columns into place costs more than the product).
    """
    out = torch.bmm(rows, kron)  # (I, N, J*16)
    return out.view(rows.shape[0], rows.shape[1], -1, POSE_ENTRIES)  # (I, N, J, 16)


@dataclass
class _KernelInputs:
    """What the kernel reads of one layer's input (`em_native`): each child's pose by rows (B, 4, C, 4) and the child
    in each slot as it numbers them (P, I) (`em_native.child_rows`, `cell_major`), each slot's child activation (B, P,
    I), W per slot (I, J, 4, 4), what is added to each slot's votes (I, 16) or None, each parent's centre (B, P, 16,
    Jp), and the children in the order to visit them (None: 0 .. C - 1)."""

    grid: Tensor
    child: Tensor
    activations: Tensor
    weights: Tensor
    offsets: Tensor | None
    centre: Tensor
    order: Tensor | None = None


def _native(
    layer: _EMRoutedLayer,
    library: em_native.Kernel,
    poses: Tensor,
    activations: Tensor,
    iterations: int,
    every: bool,
    start: Tensor | None,
) -> tuple[Tensor, Tensor, EMTrace | None]:
    """`layer._route`'s results from the compiled kernel (`em_native.route`), with `every` r-major along the batch
    ((r*B, ...), as `_route_float32` gives them); `start`: the first R_ij (B, P, J, I) where not even."""
    given = layer._kernel_inputs(poses, activations, em_native.padded_types(library, layer.beta_u.numel()))
    slots, even = em_native.slot_table(layer.child_index, layer.children_count, layer.beta_u.numel(), given.order)
    mean, out_a = em_native.route(
        library, given.grid, given.activations, given.weights.detach(), given.offsets, given.centre, given.child,
        slots, even, layer.beta_u, layer.beta_a,
        tuple(inverse_temperature(t + 1) for t in range(iterations)),
        layer.beta_u.numel() / layer.child_index.shape[1], LOG_WEIGHT_FLOOR, every, start,
    )  # fmt: skip
    if every:  # (r, B, ...) -> (r*B, ...)
        mean, out_a = mean.flatten(0, 1), out_a.flatten(0, 1)
    return *layer._parents(mean, out_a), None


def _native_training(
    layer: _EMRoutedLayer, library: em_native.Kernel, poses: Tensor, activations: Tensor, iterations: int
) -> tuple[Tensor, Tensor, EMTrace | None]:
    """`layer._route`'s results with gradients from the kernel's passes (`em_native_training.route`)."""
    given = layer._kernel_inputs(poses, activations, em_native.padded_types(library, layer.beta_u.numel()))
    mean, out_a = em_native_training.route(
        library, given.grid, given.activations, given.weights, layer.beta_u, layer.beta_a, given.offsets,
        given.centre, given.child, layer.children_count, iterations,
    )  # fmt: skip
    return *layer._parents(mean, out_a), None


class _EMRoutedLayer(nn.Module):
    """What both layers routed by EM share: a forward pass over the batch in chunks (`_in_chunks`) and the results at
    every r from one routing run (`_by_iterations`). Each says its shapes and makes its votes in `_route`."""

    child_index: Tensor  # a buffer: the child in each slot of each position (P, I)
    in_types: int  # the child grid it reads: (B, in_types, 16, in_size, in_size)
    in_size: int
    weight: nn.Parameter
    beta_u: nn.Parameter
    beta_a: nn.Parameter
    children_count: int

    def forward(
        self,
        poses: Tensor,
        activations: Tensor,
        iterations: int,
        trace: bool = False,
        random: RandomCouplings | None = None,
    ) -> tuple[Tensor, Tensor, EMTrace | None]:
        """Child grid (B, T_in, 16, H, W), (B, T_in, H, W) -> the layer's poses and activations (its class docstring
        says their shapes), and the trace when asked for; `random`: routing starts from these random assignments."""
        return _in_chunks(self, poses, activations, iterations, trace, random=random)

    def by_iterations(self, poses: Tensor, activations: Tensor, iterations: int) -> tuple[Tensor, Tensor]:
        """`forward`'s poses and activations at r = 1 .. `iterations` from one routing run (`em_routing_by_iterations`),
        each with a leading r axis."""
        return _by_iterations(self, poses, activations, iterations)

    def routing_bytes_per_image(self) -> int:  # each layer's own: the bytes it routes for one image
        raise NotImplementedError

    def _kernel_inputs(self, poses: Tensor, activations: Tensor, padded: int) -> _KernelInputs:
        raise NotImplementedError  # each layer's own: its slots as the kernel reads them, J padded to `padded`

    def _parents(self, mean: Tensor, out_a: Tensor) -> tuple[Tensor, Tensor]:
        raise NotImplementedError  # each layer's own: routing's parents (B, P, J, 16), (B, P, J) in its output shapes

    def _route(  # each layer's own: its votes, routed by `_route_float32`
        self,
        poses: Tensor,
        activations: Tensor,
        kron: Tensor,
        iterations: int,
        trace: bool,
        every: bool = False,
        start: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, EMTrace | None]:
        raise NotImplementedError


class ConvCapsules(_EMRoutedLayer):
    """A convolutional capsule layer: each K x K window of child capsules routed by EM to J parent types there.

    Holds one 4x4 W per (child type, kernel cell, parent type) and a beta_u and beta_a per parent type:
    K*K*T_in*J*16 + 2J parameters (147,520 for 3x3, 32 -> 32). Child grid (B, T_in, 16, H, W), (B, T_in, H, W) ->
    parent grid (B, J, 16, H', W'), (B, J, H', W').
    """

    child_index: Tensor  # a buffer: the child in each slot of each window (L, I)

    def __init__(self, in_types: int, out_types: int, kernel: int, stride: int, in_size: int) -> None:
        super().__init__()
        if in_size < kernel:
            raise ValueError(
                f"a {kernel}x{kernel} capsule convolution needs a grid of at least {kernel}, got {in_size}"
            )
        self.in_types, self.out_types, self.kernel, self.stride, self.in_size = (
            in_types,
            out_types,
            kernel,
            stride,
            in_size,
        )
        self.out_size = (in_size - kernel) // stride + 1
        slots = in_types * kernel * kernel
        self.weight = nn.Parameter(torch.empty(slots, out_types, POSE, POSE))  # W: (T_in*K*K, J, 4, 4)
        nn.init.normal_(self.weight, std=1.0)
        self.beta_u = nn.Parameter(torch.zeros(out_types))
        self.beta_a = nn.Parameter(torch.zeros(out_types))
        self.children_count = in_types * in_size * in_size
        # the child in each slot (type, ky, kx) of each window: type * H * W + the cell under that kernel entry (on
        # the CPU even when the network is built on the meta device to be loaded: these are derived, never stored)
        cells = torch.arange(in_size * in_size, dtype=torch.float64, device="cpu").view(1, 1, in_size, in_size)
        under = F.unfold(cells, kernel, stride=stride).round().long()[0]  # (K*K, L) the cell of each kernel entry
        index = torch.arange(in_types, device="cpu").view(-1, 1, 1) * in_size * in_size + under  # (T_in, K*K, L)
        self.register_buffer("child_index", index.reshape(slots, -1).t().contiguous(), persistent=False)  # (L, I)

    def routing_bytes_per_image(self) -> int:
        """Bytes of votes V and [V, V^2] one image routes through in float32: (P, J, I, 16 + 32) x 4, 44 MB for the
        paper's ConvCaps1 (25 positions x 32 types x 288 slots)."""
        return self.out_size**2 * self.out_types * self.child_index.shape[1] * 3 * POSE_ENTRIES * 4

    def _route(
        self,
        poses: Tensor,
        activations: Tensor,
        kron: Tensor,
        iterations: int,
        trace: bool,
        every: bool = False,
        start: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, EMTrace | None]:
        batch = poses.shape[0]
        n = self.out_size
        windows = self._windows(poses)  # (B, T_in, 16, K*K, L)
        rows = windows.permute(1, 3, 0, 4, 2).reshape(-1, batch * n * n, POSE_ENTRIES)  # (T_in*K*K, B*L, 16)
        child_a = F.unfold(activations, self.kernel, stride=self.stride).transpose(1, 2)  # (B, L, T_in*K*K)
        votes = _votes(rows, kron).view(-1, batch, n * n, self.out_types, POSE_ENTRIES)  # (I, B, L, J, 16)
        votes = votes.permute(1, 2, 3, 0, 4)  # (B, L, J, I, 16), a view: routing copies it once, into [V, V^2]
        # (B, L, J, 16), (B, L, J); with `every`, r*B in place of B (as in the lines below)
        mean, out_a, routed = _route_float32(votes, child_a, self, iterations, trace, every, start)
        return *self._grid(mean, out_a), routed

    def _windows(self, poses: Tensor) -> Tensor:
        """Each window's child poses: (B, T_in, 16, H, W) -> (B, T_in, 16, K*K, L), slot i = (type, kernel cell)."""
        k, n = self.kernel, self.out_size
        windows = F.unfold(poses.flatten(1, 2), k, stride=self.stride)  # (B, T_in*16*K*K, L)
        return windows.view(poses.shape[0], self.in_types, POSE_ENTRIES, k * k, n * n)  # (B, T_in, 16, K*K, L)

    def _grid(self, mean: Tensor, out_a: Tensor) -> tuple[Tensor, Tensor]:
        """Routing's parents (B, L, J, 16), (B, L, J) as the parent grid (B, J, 16, H', W'), (B, J, H', W')."""
        n = self.out_size
        out_poses = mean.permute(0, 2, 3, 1).reshape(-1, self.out_types, POSE_ENTRIES, n, n)  # (B, J, 16, H', W')
        return out_poses, out_a.transpose(1, 2).reshape(-1, self.out_types, n, n)  # (B, J, H', W')

    def _parents(self, mean: Tensor, out_a: Tensor) -> tuple[Tensor, Tensor]:
        return self._grid(mean, out_a)

    def _kernel_inputs(self, poses: Tensor, activations: Tensor, padded: int) -> _KernelInputs:
        batch, k, n, cells = poses.shape[0], self.kernel, self.out_size, self.in_size * self.in_size
        grid = em_native.child_rows(poses)  # (B, 4, H*W*T, 4)
        with torch.no_grad():
            # each parent's centre, the mean of its votes sum_i M_i W_ij / I, as a convolution of the grid: its rows
            # in the batch, a channels-last image (B*4, T_in*4, H, W), and W as (4*J, T_in*4, K, K); in bf16 under
            # autocast (the moments are exact about any centre: it only keeps sigma^2 from cancelling away)
            image = grid.view(batch * 4, self.in_size, self.in_size, -1).permute(0, 3, 1, 2)
            kernel = self.weight.float().view(self.in_types, k, k, self.out_types, 4, 4).permute(5, 3, 0, 4, 1, 2)
            kernel = kernel.reshape(4 * self.out_types, self.in_types * 4, k, k)
            centre = F.conv2d(image, kernel, stride=self.stride) / self.child_index.shape[1]  # (B*4, 4*J, n, n)
            centre = centre.permute(0, 2, 3, 1).reshape(batch, 4, n * n, 4, self.out_types).transpose(1, 2)
            centre = F.pad(centre.reshape(batch, n * n, POSE_ENTRIES, self.out_types), (0, padded - self.out_types))
        # the children cell by cell (child = type * H * W + cell): the types of one cell share their parent positions
        order = torch.arange(self.children_count).view(self.in_types, cells).t().flatten()
        child = em_native.cell_major(self.child_index, self.in_types, cells)
        # index_select, whose backward adds into place (index_add_) where indexing's sorts first: 4x faster
        slots = activations.flatten(1).index_select(1, self.child_index.flatten())  # (B, L*I)
        child_a = slots.view(batch, *self.child_index.shape)  # (B, L, I)
        return _KernelInputs(grid, child, child_a, self.weight, None, centre, order)


class ClassCapsules(_EMRoutedLayer):
    """The class capsules: every child capsule of the last grid routed by EM to one capsule per class.

    One 4x4 W per (child type, class), shared by every position of that type, and coordinate addition: the scaled
    (row, column) of the centre of each child's receptive field is added to the first two entries of the right-hand
    column of its votes (pose entries 3 and 7), so the class poses can still say where the parts were. Child grid
    (B, T_in, 16, H, W), (B, T_in, H, W) -> class poses (B, K, 16), activations (B, K).
    """

    child_index: Tensor  # buffers: every child (1, I), and what coordinate addition adds to each cell's votes (H*W, 16)
    offsets: Tensor

    def __init__(self, in_types: int, classes: int, in_size: int, coordinate_addition: bool = True) -> None:
        super().__init__()
        self.in_types, self.classes, self.in_size = in_types, classes, in_size
        self.weight = nn.Parameter(torch.empty(in_types, classes, POSE, POSE))  # W: (T_in, K, 4, 4)
        nn.init.normal_(self.weight, std=1.0)
        self.beta_u = nn.Parameter(torch.zeros(classes))
        self.beta_a = nn.Parameter(torch.zeros(classes))
        self.children_count = in_types * in_size * in_size
        index = torch.arange(self.children_count, device="cpu").view(1, -1)  # (1, I); derived, on the CPU (see above)
        self.register_buffer("child_index", index, persistent=False)
        centre = (torch.arange(in_size, dtype=torch.float32, device="cpu") + 0.5) / in_size  # (H,) in (0, 1)
        offsets = torch.zeros(in_size, in_size, POSE_ENTRIES, device="cpu")  # (H, W, 16)
        if coordinate_addition:
            offsets[:, :, 3] = centre.view(-1, 1)  # row, into entry (0, 3)
            offsets[:, :, 7] = centre.view(1, -1)  # column, into entry (1, 3)
        self.register_buffer("offsets", offsets.view(-1, POSE_ENTRIES), persistent=False)  # (H*W, 16)

    def routing_bytes_per_image(self) -> int:
        """Bytes of votes V and [V, V^2] one image routes through in float32: (K, I, 16 + 32) x 4."""
        return self.classes * self.children_count * 3 * POSE_ENTRIES * 4

    def _route(
        self,
        poses: Tensor,
        activations: Tensor,
        kron: Tensor,
        iterations: int,
        trace: bool,
        every: bool = False,
        start: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, EMTrace | None]:
        batch, types, _, height, width = poses.shape
        cells = height * width
        # a type's children share their W: every (example, cell) is a "position" and the child types are the slots
        rows = poses.permute(1, 0, 3, 4, 2).reshape(types, batch * cells, POSE_ENTRIES)  # (T, B*H*W, 16)
        votes = _votes(rows, kron).view(types, batch, cells, self.classes, POSE_ENTRIES)  # (T, B, H*W, K, 16)
        votes = votes.permute(1, 3, 0, 2, 4) + self.offsets.to(votes.dtype)  # coordinate addition: (B, K, T, H*W, 16)
        votes = votes.reshape(batch, 1, self.classes, types * cells, POSE_ENTRIES)  # (B, 1, K, I, 16), i = (type, y, x)
        child_a = activations.reshape(batch, 1, types * cells)  # (B, 1, I), slot (type, y, x)
        # (B, 1, K, 16), (B, 1, K); with `every`, r*B in place of B
        mean, out_a, routed = _route_float32(votes, child_a, self, iterations, trace, every, start)
        return mean[:, 0], out_a[:, 0], routed

    def _parents(self, mean: Tensor, out_a: Tensor) -> tuple[Tensor, Tensor]:
        return mean[:, 0], out_a[:, 0]  # (B, K, 16), (B, K)

    def _kernel_inputs(self, poses: Tensor, activations: Tensor, padded: int) -> _KernelInputs:
        batch, types, _, height, width = poses.shape
        cells = height * width
        grid = em_native.child_rows(poses)  # (B, 4, H*W*T, 4)
        with torch.no_grad(), torch.autocast(poses.device.type, enabled=False):
            # each class's centre, the mean of its votes: sum over the types of (their poses summed over the cells)
            # times the type's W, over the I = T*H*W children, plus the mean coordinate added: (B, 1, 16, Jp)
            summed = grid.float().view(batch, 4, cells, types, 4).sum(dim=2)  # (B, 4, T, 4)
            centre = torch.einsum("brtk,tjkc->brcj", summed, self.weight.float()) / (types * cells)  # (B, 4, 4, K)
            centre = centre.reshape(batch, 1, POSE_ENTRIES, self.classes) + self.offsets.mean(dim=0).view(1, 1, -1, 1)
            centre = F.pad(centre, (0, padded - self.classes))
        weights = self.weight.repeat_interleave(cells, dim=0)  # a type's W for each of its cells: (I, K, 4, 4)
        offsets = self.offsets.repeat(types, 1)  # coordinate addition, each slot its cell's: (I, 16)
        child = em_native.cell_major(self.child_index, types, cells)
        return _KernelInputs(grid, child, activations.reshape(batch, 1, types * cells), weights, offsets, centre)
