"""The learning-rate schedules a run can follow.

- "exponential" (the paper's official code): the rate is multiplied by `--lr-decay` after every epoch.
- "cosine" (the fast recipe): a linear warm-up from lr/100 over the first `--warmup` fraction of
  the run's batches, then a cosine decay to zero at its last batch, updated after every batch. The
  run's length is `--epochs` as the run was built: raising it on a resume stretches the rest of the curve.
"""

from __future__ import annotations

import math
from typing import Any

import torch

SCHEDULES = ("exponential", "cosine")
WARMUP_START = 0.01  # the warm-up starts at this fraction of the peak rate


def cosine_factor(step: int, total: int, warmup: int) -> float:
    """The cosine schedule's multiple of the peak rate before batch `step` (0-based) of `total`."""
    if warmup > 0 and step < warmup:
        return WARMUP_START + (1.0 - WARMUP_START) * step / warmup
    span = max(total - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class Schedule:
    """A run's learning-rate schedule: told after every batch and every epoch, it steps when its kind does."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, kind: str, *, lr_decay: float, epochs: int, batches: int, warmup: float
    ) -> None:
        if kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {kind!r}; choose from {', '.join(SCHEDULES)}")
        self.kind = kind
        if kind == "exponential":
            self.scheduler: torch.optim.lr_scheduler.LRScheduler = torch.optim.lr_scheduler.ExponentialLR(
                optimizer, gamma=lr_decay
            )
        else:
            total = max(epochs * batches, 1)
            warm = min(round(warmup * total), total - 1)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_factor(s, total, warm))

    def after_batch(self) -> None:
        if self.kind == "cosine":
            self.scheduler.step()

    def after_epoch(self) -> None:
        if self.kind == "exponential":
            self.scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)
