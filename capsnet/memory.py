"""Will a training run or a reading fit this machine's memory? Estimated from the network's shapes before anything
is built, and refused in one line if not.

A network's memory grows with the batch: in training, what each image's step keeps for the backward pass (its
activations, the capsules' votes, the routing's couplings or assignments); in a reading (an evaluation), only what
one stage hands the next. `shapes` counts them, in floats, from the config alone (`Shapes`: the parameters too,
exactly), in microseconds and without allocating: the CapsNet on 256x256 pictures (a 2.4 GB weight matrix) is refused
before it is built. A training step's fixed part is the weights, their gradients and Adam's two moments; a reading's
weights are already held. The estimates are set at or above what was measured on this package's networks (the
process's peak resident memory at two batches): `MARGIN` adds what an epoch's other work and the allocator take.
`headroom` is what this process may still take: the memory the kernel says is available, the container's limit
(cgroup v2) and the address-space limit (`ulimit -v`), whichever is least. `check_fits` and `check_reading_fits`
refuse a batch that would need more than that and say one that fits; `reading_batch` picks a smaller batch for a page
instead. A run on a GPU, or on a system without these files, is not checked (an allocation that fails there is one
line all the same: `capsnet.errors.out_of_memory`). A training process on a CPU keeps the memory its steps free for
the next ones (`keep_freed_memory`).
"""

from __future__ import annotations

import ctypes
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from capsnet.errors import OutOfMemoryError
from capsnet.nn.cnn import CNNConfig
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.nn.matrix_capsules import POSE_ENTRIES
from capsnet.nn.registry import AnyConfig, network_of

FLOAT = 4  # bytes: the estimate counts float32 (a bf16 autocast step keeps some of it in half)
MARGIN = 1.5  # the estimate's margin: an epoch's other work (evaluation, the window) and the allocator's slack
SUGGESTED = 0.75  # the batch said to fit, as a share of the largest the estimate allows


@dataclass(frozen=True)
class StepMemory:
    """A training step's or a reading's memory above what the process held before it: `fixed` + `per_image` x
    batch bytes."""

    fixed: float
    per_image: float

    def at(self, batch: int) -> float:
        return MARGIN * (self.fixed + self.per_image * batch)

    def largest_batch(self, room: float) -> int:
        """The largest batch whose step fits `room` bytes (0 when none does)."""
        if self.per_image <= 0:
            return 1 << 30
        return max(0, int((room / MARGIN - self.fixed) // self.per_image))


@dataclass(frozen=True)
class Shapes:
    """A network's sizes from its config alone, in floats: its parameters, what one image's training step keeps for
    the backward pass (activations, votes, routing tensors), and what one image's reading holds at its widest."""

    parameters: int
    kept: int
    widest: int


def _dense(sizes: tuple[int, ...]) -> int:
    """The weights and biases of fully connected layers of these widths."""
    return sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))


def _capsnet(c: CapsNetConfig) -> Shapes:
    conv1_side = c.image_size - c.conv1_kernel + 1
    conv1 = c.conv1_channels * conv1_side**2
    primary = c.num_primary * c.primary_dim
    votes = c.num_classes * c.num_primary * c.digit_dim  # u_hat (K, N, D)
    couplings = c.num_classes * c.num_primary  # b_ij and c_ij (K, N)
    decoder = (c.num_classes * c.digit_dim, *c.decoder_hidden, c.image_pixels)
    parameters = (
        c.in_channels * c.conv1_channels * c.conv1_kernel**2 + c.conv1_channels
        + c.conv1_channels * c.primary_types * c.primary_dim * c.primary_kernel**2 + c.primary_types * c.primary_dim
        + c.num_primary * c.num_classes * c.digit_dim * c.primary_dim + _dense(decoder)
    )  # fmt: skip
    r = c.routing_iterations
    # the votes once and a product of their size an iteration (2.4 MB an image measured for the paper's network at
    # large batches, 4.0 estimated), the squash's parts, the decoder's layers
    kept = c.image_pixels + 2 * conv1 + 3 * primary + (1 + r) * votes + 2 * r * couplings + 2 * sum(decoder[1:])
    widest = max(c.image_pixels + conv1, conv1 + primary, primary + votes, 3 * votes)
    return Shapes(parameters, kept, widest)


def _cnn(c: CNNConfig) -> Shapes:
    side, fan_in, before = c.image_size, c.in_channels, c.in_channels * c.image_size**2
    parameters, kept, widest = 0, before, 0
    for k, width in enumerate(c.channels, start=1):
        parameters += fan_in * width * c.kernel**2 + width
        out = width * side**2
        kept += 2 * out  # the convolution's output, ReLU'd in place, and what reads it
        widest = max(widest, 3 * (before + out))  # its input and output, and the convolution's workspace
        if k in c.pool_after:
            side //= 2
            kept += 3 * width * side**2  # the pooled output and its int64 indices
            out = width * side**2
        before, fan_in = out, width
    dense = (c.channels[-1] * c.feature_size**2, *c.hidden, c.num_classes)
    return Shapes(parameters + _dense(dense), kept + 3 * sum(dense[1:]), widest)


def _em(c: EMCapsNetConfig) -> Shapes:
    cells1, cells2, cells3 = c.conv1_grid**2, c.convcaps1_grid**2, c.convcaps2_grid**2
    window = c.convcaps_kernel**2
    grid = (  # each layer's output: ReLU Conv1's features, then poses and activations
        c.conv1_channels * cells1
        + c.primary_types * (POSE_ENTRIES + 1) * cells1
        + c.convcaps1_types * (POSE_ENTRIES + 1) * cells2
        + c.convcaps2_types * (POSE_ENTRIES + 1) * cells3
    )
    routing = (  # the assignments R_ij each EM layer routes: (positions, parents, children in a window)
        cells2 * c.convcaps1_types * c.primary_types * window
        + cells3 * c.convcaps2_types * c.convcaps1_types * window
        + c.num_classes * c.convcaps2_types * cells3
    )
    decoder = (c.num_classes * POSE_ENTRIES, *c.decoder_hidden, c.image_pixels) if c.decoder else (0,)
    parameters = (
        c.in_channels * c.conv1_channels * c.conv1_kernel**2 + c.conv1_channels
        + (c.conv1_channels + 1) * c.primary_types * (POSE_ENTRIES + 1)
        + window * c.primary_types * c.convcaps1_types * POSE_ENTRIES + 2 * c.convcaps1_types
        + window * c.convcaps1_types * c.convcaps2_types * POSE_ENTRIES + 2 * c.convcaps2_types
        + c.convcaps2_types * c.num_classes * POSE_ENTRIES + 2 * c.num_classes
        + (_dense(decoder) if c.decoder else 0)
    )  # fmt: skip
    # training keeps about 2.5 floats an assignment an iteration (the kernel's passes keep no votes: 8.4 MB an image
    # measured for the paper's network on 28x28, 10.1 estimated); a reading routes image by image, or in chunks
    kept = c.image_pixels + 2 * grid + 5 * c.routing_iterations * routing // 2 + 2 * sum(decoder[1:])
    return Shapes(parameters, kept, 5 * (c.image_pixels + grid) // 2)


ESTIMATES: dict[str, Callable[[Any], Shapes]] = {"capsnet": _capsnet, "cnn": _cnn, "em": _em}  # by `Network.name`


def register_estimate(name: str, estimate: Callable[[Any], Shapes]) -> None:
    """Add the sizes of network `name`'s configs (`Shapes`), from its family's own module."""
    ESTIMATES[name] = estimate


def shapes(config: AnyConfig) -> Shapes | None:
    """`config`'s network's sizes (`Shapes`), computed from its config: nothing is built. None for a network whose
    family gave no estimate (`register_estimate`): its runs are not checked, as where the free memory is unknown."""
    estimate = ESTIMATES.get(network_of(config).name)
    return None if estimate is None else estimate(config)


def training_memory(config: AnyConfig) -> StepMemory | None:
    """What a training step of `config`'s network takes: the weights, their gradients and Adam's two moments, and what
    each image keeps for the backward pass (None: not estimated)."""
    sizes = shapes(config)
    return None if sizes is None else StepMemory(fixed=4 * FLOAT * sizes.parameters, per_image=FLOAT * sizes.kept)


def reading_memory(config: AnyConfig) -> StepMemory | None:
    """What reading a batch with `config`'s network takes (an evaluation's forward pass, no gradients), its weights
    already held (None: not estimated)."""
    sizes = shapes(config)
    return None if sizes is None else StepMemory(fixed=0.0, per_image=FLOAT * sizes.widest)


def _status(field: str) -> int | None:
    """A `/proc/self/status` field in bytes (None where there is no such file)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# glibc's mallopt parameters: the heap's free top kept up to; the most mappings of their own (0: every allocation
# from the heap)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """This process's malloc (glibc's) keeps what a training step frees for the next, for the rest of the process:
    no large block in a mapping of its own (unmapped when freed, every page of the next one's faulting when first
    written: 10,000-30,000 faults a training step) and the heap's free top never handed back. The process then
    holds its peak, which a training run reaches every step anyway. True where it was set (glibc)."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    return mallopt is not None and bool(mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def headroom() -> int | None:
    """The bytes this process may still take: the least of what the kernel says is available, the cgroup's limit
    less its use, and the address-space limit less this process's size; None where none of them is known."""
    room: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                room.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            room.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    size = _status("VmSize")
    if soft != resource.RLIM_INFINITY and size is not None:
        room.append(soft - size)
    return min(room) if room else None


def _refuse(needs: StepMemory, batch: int, room: int, described: str, none_fits: str) -> OutOfMemoryError:
    # a quarter below the estimate's edge: the room varies from one process to the next (15% smaller in the next run,
    # seen), and a batch said to fit must be taken
    fits = int(SUGGESTED * needs.largest_batch(room))
    way_out = f"--batch-size {fits} fits" if fits >= 1 else none_fits
    return OutOfMemoryError(
        f"{described} at a batch of {batch} needs about {needs.at(batch) / 2**30:.1f} GiB "
        f"({needs.fixed / 2**20:,.0f} MiB and {needs.per_image / 2**20:.1f} MiB an image, times {MARGIN:g} to spare), "
        f"more than the {max(room, 0) / 2**30:.1f} GiB free here: "
        f"{way_out}"
    )


def check_fits(config: AnyConfig, batch: int, described: str) -> None:
    """Refuse, in one line, a training run whose batch would not fit this machine's memory, before anything is built;
    say a batch that does."""
    room = headroom()
    needs = training_memory(config)
    if room is not None and needs is not None and needs.at(batch) > room:
        raise _refuse(needs, batch, room, described, "no batch fits: a smaller --image-size or preset does")


def _reading_room(model: torch.nn.Module, config: AnyConfig) -> tuple[int, StepMemory] | None:
    """The room free here and what a reading with `model` needs; None where the room is unknown or the model is not
    on the CPU (a GPU's memory is not this machine's)."""
    room = headroom() if next(model.parameters()).device.type == "cpu" else None
    needs = reading_memory(config)
    return None if room is None or needs is None else (room, needs)


def check_reading_fits(model: torch.nn.Module, config: AnyConfig, batch: int, described: str) -> None:
    """Refuse, in one line, a reading (an evaluation) whose batch would not fit this machine's memory; say a batch
    that does."""
    known = _reading_room(model, config)
    if known is not None and known[1].at(batch) > known[0]:
        raise _refuse(known[1], batch, known[0], described, "no batch fits: this machine has too little memory for it")


def reading_batch(model: torch.nn.Module, config: AnyConfig, wanted: int) -> int:
    """The batch to read with where nobody chose one (a dashboard page, an export, a training run's evaluation):
    `wanted`, or fewer where memory is short (at least 1)."""
    known = _reading_room(model, config)
    if known is None or known[1].at(wanted) <= known[0]:
        return wanted
    return max(1, min(wanted, int(SUGGESTED * known[1].largest_batch(known[0]))))
