"""Adam for a training run: its parameter groups, and the fused kernel where the hardware has one.

Every weight learns at `--lr`, on the run's schedule, except where `--beta-lr K` gives the EM layers' learned
costs (beta_u and beta_a, one number per capsule type: `capsnet.nn.matrix_capsules`) K times that rate. Adam moves
a weight by about the learning rate a step however far it must go, and the class layer's beta_a must fall to about
-100 before a class that no vote reaches sits near activation 0, where the spread loss's margin of 0.9 can be met
(the model card has the measurements).
"""

from __future__ import annotations

from typing import Any

import torch

from capsnet.errors import CapsNetError
from capsnet.nn.matrix_capsules import BETA_NAMES
from capsnet.training.acceleration import make_adam


def parameter_groups(model: torch.nn.Module, lr: float, beta_lr: float) -> list[dict[str, Any]]:
    """Adam's parameter groups: all at `lr`, or, with a `beta_lr` multiplier, the EM layers' beta_u and beta_a apart.

    A schedule scales every group's rate by the same factor, so the multiplier holds over the run. One group when
    `beta_lr` is 1: the optimizer state of a run begun before the option existed still resumes.
    """
    named = list(model.named_parameters())
    if beta_lr == 1.0:
        return [{"params": [p for _, p in named]}]
    betas = [p for name, p in named if name.rsplit(".", 1)[-1] in BETA_NAMES]
    if not betas:
        raise CapsNetError(f"--beta-lr {beta_lr}: this network has no beta_u or beta_a to apply it to")
    chosen = {id(p) for p in betas}
    return [{"params": [p for _, p in named if id(p) not in chosen]}, {"params": betas, "lr": lr * beta_lr}]


def run_optimizer(model: torch.nn.Module, lr: float, beta_lr: float, fused: bool) -> torch.optim.Adam:
    """Adam over `model`'s parameter groups (`parameter_groups`), fused into one kernel a step when `fused`."""
    return make_adam(parameter_groups(model, lr, beta_lr), lr, fused)
