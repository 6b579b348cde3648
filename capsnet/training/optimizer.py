"""Adam for a training run: the network's parameter groups, and the fused kernel where the hardware has one.

Every weight learns at `--lr`, on the run's schedule, except where the network keeps parameters apart
(`Network.parameter_groups`): `--beta-lr K` gives the EM layers' learned costs (beta_u and beta_a, one number per
capsule type) K times that rate. Adam moves a weight by about the learning rate a step however far it must go, and
the class layer's beta_a must fall to about -100 before a class that no vote reaches sits near activation 0, where
the spread loss's margin of 0.9 can be met (the model card has the measurements).
"""

from __future__ import annotations

from typing import Any

import torch

from capsnet.errors import CapsNetError
from capsnet.nn.registry import network_of
from capsnet.training.acceleration import make_adam


def parameter_groups(model: torch.nn.Module, lr: float, beta_lr: float) -> list[dict[str, Any]]:
    """Adam's parameter groups, as the network declares them; CapsNetError (one line) where `beta_lr` has nothing
    to apply to. A schedule scales every group's rate by the same factor, so a multiplier holds over the run."""
    try:
        return network_of(model).parameter_groups(model, lr, beta_lr)
    except ValueError as error:
        raise CapsNetError(str(error)) from None


def run_optimizer(model: torch.nn.Module, lr: float, beta_lr: float, fused: bool) -> torch.optim.Adam:
    """Adam over `model`'s parameter groups (`parameter_groups`), fused into one kernel a step when `fused`."""
    return make_adam(parameter_groups(model, lr, beta_lr), lr, fused)
