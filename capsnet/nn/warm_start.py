"""Warm starts: a network for a larger canvas (36x36 MultiMNIST, 40x40 mnist-40) started from one trained on 28x28.

What carries over, for the CapsNet and the CNN (an EM network is started from one of its own size only):
- the convolutions, as they are (they do not depend on the input's size);
- the weights that depend on a position (the CapsNet's DigitCaps matrices W_ij, one per primary
  capsule; the CNN's first fully connected layer, one block per feature-map cell) are laid from the
  small grid onto the large one *in image coordinates*: the 28x28 digit sits centred on the larger
  canvas, so the target position that sees the same pixels as a source position takes its weights
  (6x6 -> 10x10: source (y, x) lands on (y + 2, x + 2)), and positions beyond the source grid start
  at zero, so the larger network computes exactly what the source did on a centred digit (copying the
  nearest edge position's weights there instead adds votes from the blank margin that saturate every
  capsule: all ten lengths 0.99 on the shipped MNIST model, and centred digits then read 56% right);
- everything else (the decoder, whose output has another size; the CNN's later layers) carries over
  where its shape is unchanged and starts new where it is not.
The source's config is kept but for the input size, so a trained network's scales (primary_scale)
stay those it learned with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.cnn import BaselineCNN, CNNConfig
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.registry import AnyConfig, AnyModel, network_of

# the fields a warm start may change: the input size, and what follows from the task (several labels)
CHANGEABLE = {"image_size", "multi_label"}
# fields of the target preset that a trained source overrides (its own scales)
KEPT_FROM_SOURCE = {"primary_scale", "init"}


def grid_sources(source: int, target: int) -> Tensor:
    """For each cell of a target x target grid (row-major), the source x source cell whose pixels it sees when the
    source's canvas sits centred on the target's, or -1 for a cell beyond the source grid. (target**2,) long."""
    if target < source:
        raise ValueError(f"a warm start lays a {source}x{source} grid onto a larger one, not onto {target}x{target}")
    offset = (target - source) // 2
    along = torch.arange(target) - offset  # (T,)
    inside = (along >= 0) & (along < source)  # (T,)
    cells = along.view(-1, 1) * source + along.view(1, -1)  # (T, T) row-major (y, x)
    return cells.where(inside.view(-1, 1) & inside.view(1, -1), -1).flatten()  # (T*T,)


def lay_on_grid(weight: Tensor, channels: int, source: int, target: int) -> Tensor:
    """Weights laid out (channels * source * source, ...) in row-major (channel, y, x) order, re-laid onto the
    target grid: (channels * target * target, ...), zero at the cells beyond the source grid."""
    assert weight.shape[0] == channels * source * source, (weight.shape, channels, source)
    cells = grid_sources(source, target)  # (T*T,)
    per_channel = weight.view(channels, source * source, *weight.shape[1:])  # (C, S*S, ...)
    laid = per_channel[:, cells.clamp(min=0)]  # (C, T*T, ...)
    laid[:, cells < 0] = 0
    return laid.reshape(channels * target * target, *weight.shape[1:])  # (C*T*T, ...)


def warm_config(source: AnyConfig, target: AnyConfig) -> AnyConfig:
    """The config of a warm-started network: the source's, at the target's input size (and task).

    ValueError when the two differ in more than that: another architecture, width or class count.
    """
    if network_of(source) is not network_of(target):
        raise ValueError(
            "a warm start needs the same network on both sides (a CapsNet from a CapsNet, a CNN from a CNN)"
        )
    changed = CHANGEABLE & {f.name for f in dataclasses.fields(target)}
    normalised = dataclasses.replace(
        target,
        **{f: getattr(source, f) for f in KEPT_FROM_SOURCE if hasattr(target, f)},
        **{f: getattr(source, f) for f in changed},
    )
    if normalised != source:
        differs = sorted(
            f.name for f in dataclasses.fields(source) if getattr(source, f.name) != getattr(normalised, f.name)
        )
        raise ValueError(
            f"the checkpoint's network differs from this run's in more than its input size: {', '.join(differs)}"
        )
    return dataclasses.replace(source, **{f: getattr(target, f) for f in changed})


@torch.no_grad()
def warm_start(model: AnyModel, source: AnyModel) -> list[str]:
    """Fill `model` (a fresh network for a larger canvas) from `source`; returns what was carried and what starts new."""
    kind = network_of(model)
    if network_of(source) is not kind:
        raise ValueError("a warm start needs the same network on both sides")
    fill = WARM_STARTS.get(kind.name)
    if fill is None:
        raise ValueError(
            f"{kind.described} starts from a checkpoint of its own input size only (no warm start onto another)"
        )
    return fill(model, source)


def _copy_matching(model: torch.nn.Module, source: torch.nn.Module, skip: set[str]) -> tuple[list[str], list[str]]:
    target_state, source_state = model.state_dict(), source.state_dict()
    carried, fresh = [], []
    for name, tensor in target_state.items():
        if name in skip:
            continue
        if name in source_state and source_state[name].shape == tensor.shape:
            tensor.copy_(source_state[name])
            carried.append(name)
        else:
            fresh.append(name)
    return carried, fresh


def _capsnet(model: CapsNet, source: CapsNet) -> list[str]:
    c, s = model.config, source.config
    assert isinstance(c, CapsNetConfig) and isinstance(s, CapsNetConfig)
    carried, fresh = _copy_matching(model, source, skip={"digits.weight"})
    model.digits.weight.copy_(lay_on_grid(source.digits.weight, s.primary_types, s.primary_grid, c.primary_grid))
    return [
        f"Conv1 and PrimaryCaps carried as they are; W_ij laid from the {s.primary_grid}x{s.primary_grid} grid "
        f"onto the {c.primary_grid}x{c.primary_grid} one ({s.num_primary} -> {c.num_primary} primary capsules)",
        f"started new: {', '.join(fresh) or 'nothing'}",
    ]


def _cnn(model: BaselineCNN, source: BaselineCNN) -> list[str]:
    c, s = model.config, source.config
    assert isinstance(c, CNNConfig) and isinstance(s, CNNConfig)
    first = "classifier.0.weight"  # (hidden, channels * cells): one block of columns per feature-map cell
    carried, fresh = _copy_matching(model, source, skip={first})
    weight = source.state_dict()[first]  # (H, C*S*S)
    laid = lay_on_grid(weight.t().contiguous(), s.channels[-1], s.feature_size, c.feature_size).t()  # (H, C*T*T)
    model.state_dict()[first].copy_(laid)
    return [
        f"convolutions carried as they are; the first fully connected layer laid from the {s.feature_size}x"
        f"{s.feature_size} feature grid onto the {c.feature_size}x{c.feature_size} one",
        f"started new: {', '.join(fresh) or 'nothing'}",
    ]


WARM_STARTS: dict[str, Callable[[Any, Any], list[str]]] = {"capsnet": _capsnet, "cnn": _cnn}  # by network name
