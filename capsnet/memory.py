"""Will a training run or a reading fit this machine's memory? Measured before it begins, refused in one line if not.

A network's memory grows with the batch: in training its activations, kept for the backward pass, are so many bytes
an image (the paper's EM network on 28x28 digits: about 45 MB; the CapsNet: about 3 MB); a reading (an evaluation)
keeps only what one layer hands the next. `step_memory` and `reading_memory` measure it where the operating system
can say so (Linux: the process's peak resident memory, `VmHWM`, reset through `/proc/self/clear_refs`): the network
takes a training step (on a throwaway copy) or reads a batch at 2 and at 8 random images (after one to warm up), and
the two peaks give the bytes an image; a training step's fixed part adds the weights, their gradients and Adam's two
moments. `headroom` is what this process may still take: the memory the kernel says is available, the container's
limit (cgroup v2) and the address-space limit (`ulimit -v`), whichever is least. `check_fits` and
`check_reading_fits` refuse a batch that would need more than that and say one that fits; `reading_batch` picks a
smaller batch for a page instead. A run on a GPU, or on a system without these files, is not measured (an allocation
that fails there is one line all the same: `capsnet.errors.out_of_memory`). A training process on a CPU then keeps
the memory its steps free for the next ones (`keep_freed_memory`); the measuring switches glibc back to its own way
while it runs, so a step is measured as without (its peak was found about the same either way).
"""

from __future__ import annotations

import copy
import ctypes
import json
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from capsnet.errors import OutOfMemoryError
from capsnet.nn.registry import AnyConfig

# one training step as the trainer takes it: (model, optimizer, images, labels); the trainer hands its own in
TrainingStep = Callable[[torch.nn.Module, torch.optim.Optimizer, Tensor, Tensor], object]

PROBE_BATCHES = (2, 8)  # a training step's, about the trainer's smallest batches
READING_BATCHES = (16, 80)  # a reading's: past the EM layers' routing chunks (`matrix_capsules.CPU_CHUNK_BYTES`)
_MEASURED: dict[tuple[str, str, str], StepMemory | None] = {}  # the measures, by network and what was measured
MARGIN = 1.5  # the estimate's margin: an epoch's other work (evaluation, the window) and the allocator's slack
SUGGESTED = 0.75  # the batch said to fit, as a share of the largest the estimate allows


@dataclass(frozen=True)
class StepMemory:
    """A training step's or a reading's peak memory above what the process held before it: `fixed` + `per_image` x
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


def _status(field: str) -> int | None:
    """A `/proc/self/status` field in bytes (None where there is no such file)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


# glibc's mallopt parameters: the heap's free top kept up to; the size from which an allocation is a mapping of its
# own; the most such mappings (0: none, every allocation from the heap)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4
PROBE_MMAP = 128 << 10  # while probing: glibc's first threshold, held (it grows as mappings are freed, by default)
AFTER_MMAP = 32 << 20  # after: the most it grows to, where a long run ends up anyway
MMAP_MAX = 65536  # glibc's own most mappings
_KEEPING: list[bool] = []  # [True] once `keep_freed_memory` has set this process's malloc to keep what it frees


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
    if mallopt is None or not (mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1)):
        return False
    _KEEPING[:] = [True]
    return True


def _reset_peak() -> bool:
    """Hand freed memory back to the system (glibc's `malloc_trim`), then reset the process's peak resident memory
    to its current one (Linux); False where it cannot be. Without the trim a step would reuse what the last one
    freed, and its peak would not show it."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


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


def _probe(run: Callable[[int], object], batches: tuple[int, int] = PROBE_BATCHES) -> tuple[float, float] | None:
    """Peak resident bytes above the start of `run(batch)` at two `batches` (after one warm-up at the first): the
    (fixed, per image) parts of a straight line through the two; None where the peak cannot be reset."""
    peaks = []
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    # While probing, every tensor of 128 KiB or more is a mapping of its own, which leaves the resident memory at once
    # when freed (under glibc's growing threshold one process measured a reading at 0.4 MiB an image and the next at
    # 6.3: a pass reused, or not, what the last had freed), in a process that keeps what it frees too
    if mallopt is not None:
        mallopt(M_MMAP_MAX, MMAP_MAX)
        mallopt(M_MMAP_THRESHOLD, PROBE_MMAP)
    try:
        with torch.random.fork_rng(devices=[]):
            for batch in (batches[0], *batches):  # a first pass warms up (Adam's state, the kernels' caches)
                if not _reset_peak():
                    return None
                before = _status("VmRSS") or 0
                run(batch)
                peaks.append((_status("VmHWM") or 0) - before)
    finally:
        if mallopt is not None:
            mallopt(M_MMAP_THRESHOLD, AFTER_MMAP)
            if _KEEPING:
                mallopt(M_MMAP_MAX, 0)
    small, large = batches
    per_image = max(peaks[2] - peaks[1], 0) / (large - small)
    return max(peaks[1] - per_image * small, 0.0), per_image


def _measurable(model: torch.nn.Module) -> bool:
    return next(model.parameters()).device.type == "cpu" and _status("VmHWM") is not None


def step_memory(model: torch.nn.Module, config: AnyConfig, take_step: TrainingStep) -> StepMemory | None:
    """What a training step of `model` takes, measured on a throwaway copy (the model and the random generators are
    left as they were); None where the peak cannot be read (not Linux) or the model is not on the CPU."""
    if not _measurable(model):
        return None
    probe = copy.deepcopy(model).train()
    optimizer = torch.optim.Adam(probe.parameters(), lr=1e-6)
    side, channels = config.image_size, config.in_channels

    def step(batch: int) -> None:
        images = torch.rand(batch, channels, side, side)
        labels = torch.randint(0, config.num_classes, (batch,))
        take_step(probe, optimizer, images, labels)

    measured = _probe(step)
    kept = 4 * sum(p.numel() * p.element_size() for p in probe.parameters())  # weights, gradients, Adam's m and v
    return None if measured is None else StepMemory(fixed=kept + measured[0], per_image=measured[1])


def reading_memory(model: torch.nn.Module, config: AnyConfig) -> StepMemory | None:
    """What reading a batch with `model` takes (an evaluation's forward pass, no gradients), measured as a training
    step is; the model is left in the mode it was in. None where it cannot be measured."""
    if not _measurable(model):
        return None
    was_training = model.training
    side, channels = config.image_size, config.in_channels

    def read(batch: int) -> None:
        model(torch.rand(batch, channels, side, side))

    model.eval()
    try:
        with torch.inference_mode():
            measured = _probe(read, READING_BATCHES)
    finally:
        model.train(was_training)
    return None if measured is None else StepMemory(*measured)


def _measured(
    model: torch.nn.Module, config: AnyConfig, what: str, measure: Callable[[], StepMemory | None]
) -> StepMemory | None:
    key = (type(model).__name__, json.dumps(config.to_dict(), sort_keys=True), what)
    if key not in _MEASURED:  # once a process for each network, and what is measured (a test session reads many alike)
        _MEASURED[key] = measure()
    return _MEASURED[key]


def _refuse(needs: StepMemory, batch: int, room: int, described: str, none_fits: str) -> OutOfMemoryError:
    # a quarter below the estimate's edge: the measure and the room vary from one process to the next (a batch said to
    # fit at 32 was refused at 27 by the next run, its room 15% smaller), and a batch said to fit must be taken
    fits = int(SUGGESTED * needs.largest_batch(room))
    way_out = f"--batch-size {fits} fits" if fits >= 1 else none_fits
    return OutOfMemoryError(
        f"{described} at a batch of {batch} needs about {needs.at(batch) / 2**30:.1f} GiB "
        f"({needs.fixed / 2**20:,.0f} MiB and {needs.per_image / 2**20:.1f} MiB an image, times {MARGIN:g} to spare), "
        f"more than the {max(room, 0) / 2**30:.1f} GiB free here: "
        f"{way_out}"
    )


def check_fits(
    model: torch.nn.Module, config: AnyConfig, take_step: TrainingStep, precision: str, batch: int, described: str
) -> None:
    """Refuse, in one line, a run whose batch would not fit this machine's memory; say a batch that does. `take_step`
    is the trainer's step, `precision` what it computes in (measured once a process for each)."""
    room = headroom()
    if room is None:
        return
    needs = _measured(model, config, f"training {precision}", lambda: step_memory(model, config, take_step))
    if needs is not None and needs.at(batch) > room:
        raise _refuse(needs, batch, room, described, "no batch fits: a smaller --image-size or preset does")


def _reading_room(model: torch.nn.Module, config: AnyConfig) -> tuple[int, StepMemory] | None:
    """The room free here and what a reading with `model` needs (measured once a process); None where either is
    unknown."""
    room = headroom()
    needs = None if room is None else _measured(model, config, "reading", lambda: reading_memory(model, config))
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
