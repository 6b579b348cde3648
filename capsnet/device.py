"""Device choice, thread counts, seeding and exact float32 for measurements: shared by training, evaluation and the
dashboard."""

from __future__ import annotations

import contextlib
import os
import platform
import random
from collections.abc import Iterator

import numpy as np
import torch

from capsnet.errors import InvalidArgumentError

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
THREADS_ENV = "CAPSNET_DASHBOARD_THREADS"


def inference_threads() -> int:
    """Torch threads for interactive inference (the dashboard): $CAPSNET_DASHBOARD_THREADS, else 1.

    One image at a time gains little from more threads, and a training run on the
    same machine (started from the dashboard) keeps every core busy: then a second
    inference thread waits for a core and a 15 ms forward pass takes 150 ms.
    """
    try:
        return max(1, int(os.environ.get(THREADS_ENV, "1")))
    except ValueError:
        return 1


def available_devices() -> tuple[str, ...]:
    """The device choices that this machine has: auto and cpu, then cuda and mps where present."""
    mps = getattr(torch.backends, "mps", None)
    present = {"cuda": torch.cuda.is_available(), "mps": bool(mps and mps.is_available())}
    return tuple(d for d in DEVICE_CHOICES if present.get(d, True))


def pick_device(name: str = "auto") -> torch.device:
    """`auto`: CUDA if present, else Apple MPS, else CPU. A named device that is absent is an InvalidArgumentError (a ValueError)."""
    if name not in DEVICE_CHOICES and not name.startswith("cuda:"):
        raise InvalidArgumentError(f"unknown device {name!r}; choose from {', '.join(DEVICE_CHOICES)}")
    mps = getattr(torch.backends, "mps", None)
    mps_ok = bool(mps and mps.is_available())
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps_ok else "cpu")
    index = name.removeprefix("cuda:") if name.startswith("cuda:") else None
    if index is not None and not (index.isascii() and index.isdigit()):  # cuda:abc reached torch as a traceback
        raise InvalidArgumentError(f"unknown device {name!r}: a GPU is named cuda or cuda:N, N its number from 0")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidArgumentError("device 'cuda' asked for, but no CUDA GPU is available")
    if index is not None and int(index) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise InvalidArgumentError(
            f"device {name!r} asked for, but this machine has {count} CUDA GPU{'s' if count != 1 else ''} "
            f"(cuda:0 to cuda:{count - 1})"
        )
    if name == "mps" and not mps_ok:
        raise InvalidArgumentError("device 'mps' asked for, but Apple MPS is not available")
    return torch.device(name)


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """Within it (a `with` block or a decorator), float32 convolutions and matrix products on a CUDA GPU are computed
    in float32, not TF32: a measurement then gives the CPU's answers. torch's default lets cuDNN's convolutions use
    TF32, and with it the shipped EM network's answers at r = 3 to 5 differed from the CPU's on 67 of the 10,000
    MNIST test digits (the TF32-free run agreed on all 67). Training keeps the default (bf16 autocast there)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def describe_device(device: torch.device) -> str:
    """A human description of the hardware, for checkpoints and benchmark tables."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA)"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{device.type.upper()}: {cpu}, {threads} thread{'s' if threads != 1 else ''}"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
