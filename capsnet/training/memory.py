"""Will a training run fit this machine's memory? Measured before the run begins, refused in one line if not.

A network's memory in training grows with the batch: its activations, kept for the backward pass, are so many bytes
an image (the paper's EM network on 28x28 digits: about 45 MB; the CapsNet: about 3 MB). `step_memory` measures it
where the operating system can say so (Linux: the process's peak resident memory, `VmHWM`, reset through
`/proc/self/clear_refs`): a throwaway copy of the network takes one training step at a batch of 2 and one of 8 on
random images (after one to warm up), and the two peaks give the bytes an image; the fixed part adds the weights,
their gradients and Adam's two moments. `headroom` is what this process may
still take: the memory the kernel says is available, the container's limit (cgroup v2) and the address-space limit
(`ulimit -v`), whichever is least. `check_fits` refuses a run whose batch would need more than that, and says the
largest batch that fits; a run on a GPU, or on a system without these files, is not measured (an allocation that
fails there is one line all the same: `capsnet.errors.out_of_memory`).
"""

from __future__ import annotations

import copy
import ctypes
import json
import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from capsnet.errors import OutOfMemoryError
from capsnet.nn.registry import AnyConfig
from capsnet.training.acceleration import Acceleration
from capsnet.training.step import training_step

PROBE_BATCHES = (2, 8)
_MEASURED: dict[tuple[str, str, bool], StepMemory | None] = {}  # `check_fits`' measures, by network and precision
MARGIN = 1.5  # the estimate's margin: an epoch's other work (evaluation, the window) and the allocator's slack


@dataclass(frozen=True)
class StepMemory:
    """A training step's peak memory above what the process held before it: `fixed` + `per_image` x batch bytes."""

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


def _reset_peak() -> bool:
    """Hand freed memory back to the system (glibc's `malloc_trim`), then reset the process's peak resident memory
    to its current one (Linux); False where it cannot be. Without the trim a step would reuse what the last one
    freed, and its peak would not show it."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
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


def step_memory(model: torch.nn.Module, config: AnyConfig, acceleration: Acceleration) -> StepMemory | None:
    """What a training step of `model` takes, measured on a throwaway copy (the model and the random generators are
    left as they were); None where the peak cannot be read (not Linux) or the model is not on the CPU."""
    if next(model.parameters()).device.type != "cpu" or _status("VmHWM") is None:
        return None
    probe = copy.deepcopy(model).train()
    optimizer = torch.optim.Adam(probe.parameters(), lr=1e-6)
    side, channels = config.image_size, config.in_channels
    peaks = []
    with torch.random.fork_rng(devices=[]):
        for batch in (PROBE_BATCHES[0], *PROBE_BATCHES):  # a first step warms up (Adam's state, the kernels' caches)
            images = torch.rand(batch, channels, side, side)
            labels = torch.randint(0, config.num_classes, (batch,))
            if not _reset_peak():
                return None
            before = _status("VmRSS") or 0
            training_step(probe, optimizer, images, labels, images, config, acceleration.amp)
            peaks.append((_status("VmHWM") or 0) - before)
    kept = 4 * sum(p.numel() * p.element_size() for p in probe.parameters())  # weights, gradients, Adam's m and v
    del probe, optimizer
    small, large = PROBE_BATCHES
    per_image = max(peaks[2] - peaks[1], 0) / (large - small)
    return StepMemory(fixed=kept + max(peaks[1] - per_image * small, 0.0), per_image=per_image)


def check_fits(
    model: torch.nn.Module, config: AnyConfig, acceleration: Acceleration, batch: int, described: str
) -> None:
    """Refuse, in one line, a run whose batch would not fit this machine's memory; say the largest batch that does."""
    room = headroom()
    if room is None:
        return
    key = (type(model).__name__, json.dumps(config.to_dict(), sort_keys=True), acceleration.amp)
    if key not in _MEASURED:  # once a process for each network and precision (a test session trains many alike)
        _MEASURED[key] = step_memory(model, config, acceleration)
    needs = _MEASURED[key]
    if needs is None or needs.at(batch) <= room:
        return
    fits = int(0.9 * needs.largest_batch(room))  # a tenth below the estimate's edge: the measure varies by a few
    way_out = (
        f"--batch-size {fits} fits" if fits >= 1
        else "no batch fits: a smaller --image-size or preset does"
    )  # fmt: skip
    raise OutOfMemoryError(
        f"{described} at a batch of {batch} needs about {needs.at(batch) / 2**30:.1f} GiB "
        f"({needs.per_image / 2**20:.0f} MiB an image), more than the {max(room, 0) / 2**30:.1f} GiB free here: "
        f"{way_out}"
    )
