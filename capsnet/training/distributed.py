"""Distributed data parallel training under torchrun: rank, world, and the few collectives the trainer uses.

Launched without torchrun (no RANK and WORLD_SIZE in the environment) everything here is an
identity: world 1, rank 0, no process group.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Distributed:
    """Rank and world size; world 1 when not launched by torchrun."""

    rank: int = 0
    local_rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1 or dist.is_initialized()


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


@contextmanager
def distributed_session(device_name: str) -> Iterator[Distributed]:
    """Join the process group when launched by torchrun, and always leave it: on return, early return or error."""
    if not launched_by_torchrun():
        yield Distributed()
        return
    use_cuda = torch.cuda.is_available() and device_name in ("auto", "cuda")
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    try:
        yield Distributed(rank=dist.get_rank(), local_rank=local_rank, world=dist.get_world_size())
    finally:
        if joined and dist.is_initialized():
            dist.destroy_process_group()


def reduce_sum(values: list[float], env: Distributed, device: torch.device) -> list[float]:
    """Sum numbers over all ranks (identity without torchrun)."""
    if not env.enabled:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def from_main(value: Any, env: Distributed) -> Any:
    """Rank 0's `value` on every rank (a picklable object: a folder name, say)."""
    if not env.enabled:
        return value
    box = [value if env.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(env: Distributed) -> None:
    if env.enabled:
        dist.barrier()
