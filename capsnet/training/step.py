"""One optimisation step, the same for the trainer, the time estimate and the benchmarks."""

from __future__ import annotations

from typing import Any

import torch
from torch.profiler import record_function

from capsnet.nn.registry import AnyConfig, network_of


def training_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    targets: torch.Tensor,
    config: AnyConfig,
    amp: bool,
    progress: float = 1.0,
) -> tuple[Any, Any]:
    """One optimisation step: forward (bf16 autocast if `amp`), the network's loss, backward, update.

    `targets` are what the reconstructions are compared with: the images, or MultiMNIST's digits alone;
    `progress` is how far the run is (0 to 1), which a loss with a schedule reads (the EM network's spread margin).
    Returns the model's output and the `CapsuleLoss`, still on the device.
    """
    with record_function("step: forward and loss"), torch.autocast(images.device.type, torch.bfloat16, enabled=amp):
        out = model(images, labels)
        loss = network_of(config).loss(out, targets, labels, config, progress)
    optimizer.zero_grad(set_to_none=True)
    with record_function("step: backward"):  # the scopes name the phases in a profile (`benchmarks/profile_em.py`)
        loss.total.backward()
    with record_function("step: optimizer"):
        optimizer.step()
    return out, loss
