"""The two networks a checkpoint can hold, and what differs between them: config, model, loss.

"capsnet" is the paper's Capsule Network (`capsnet.model`), "cnn" its baseline (`capsnet.baseline`).
Both forward passes take (images, labels) and return an output with `scores` (B, K) and
`prediction` (B,), so the trainer and the evaluation treat them alike through these functions.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from capsnet.baseline import BaselineCNN, CNNConfig, CNNOutput, cnn_loss
from capsnet.config import CapsNetConfig
from capsnet.losses import CapsuleLoss, capsule_loss
from capsnet.model import CapsNet, CapsNetOutput

ARCHITECTURES = ("capsnet", "cnn")
AnyConfig = CapsNetConfig | CNNConfig
AnyModel = CapsNet | BaselineCNN


def architecture_of(config: AnyConfig) -> str:
    """The network of `config`: "capsnet" or "cnn"."""
    return "cnn" if isinstance(config, CNNConfig) else "capsnet"


def config_from_dict(architecture: str, data: dict[str, Any]) -> AnyConfig:
    """A stored config of `architecture`; unknown architectures and keys are a ValueError."""
    if architecture == "capsnet":
        return CapsNetConfig.from_dict(data)
    if architecture == "cnn":
        return CNNConfig.from_dict(data)
    raise ValueError(f"unknown architecture {architecture!r}; this capsnet reads {', '.join(ARCHITECTURES)}")


def preset_config(architecture: str, preset: str, **overrides: Any) -> AnyConfig:
    """The named preset of either network, with field overrides."""
    if architecture == "cnn":
        return CNNConfig.preset(preset, **overrides)
    return CapsNetConfig.preset(preset, **overrides)


def build_model(config: AnyConfig) -> AnyModel:
    """A freshly initialised network for `config`."""
    return BaselineCNN(config) if isinstance(config, CNNConfig) else CapsNet(config)


def model_loss(out: CapsNetOutput | CNNOutput, targets: Tensor, labels: Tensor, config: AnyConfig) -> CapsuleLoss:
    """The training loss of either network: margin + reconstruction for the CapsNet, cross-entropy for the CNN.

    `targets` are what a CapsNet's reconstructions are compared with (the images, or MultiMNIST's digits alone).
    """
    if isinstance(config, CNNConfig):
        assert isinstance(out, CNNOutput)
        return cnn_loss(out.logits, labels, config)
    assert isinstance(out, CapsNetOutput)
    return capsule_loss(out.lengths, out.reconstruction, targets, labels, config)
