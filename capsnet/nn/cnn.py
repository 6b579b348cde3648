"""The CNN baseline that Sabour, Frosst & Hinton (2017) compare CapsNet with, scaled to ship.

"Dynamic Routing Between Capsules", NeurIPS 2017, section 5: "a standard CNN with three
convolutional layers of 256, 256, 128 channels. Each has 5x5 kernels and stride of 1. The last
convolutional layers are followed by two fully connected layers of size 328, 192. The last fully
connected layer is connected with dropout to a 10 class softmax layer with cross entropy loss."

That network has 35.4M parameters on 28x28 inputs, almost all in the first fully connected layer
(128 x 28 x 28 inputs). Ours keeps every layer and width and adds a 2x2 max-pool after the first
and second convolutions, so that layer reads 128 x 7 x 7: 4.59M parameters, 9.2 MB in float16
(`CNNConfig(pool_after=())` is the paper's 35.4M network, and is tested to be). For MultiMNIST
the paper describes its baseline only by its size (24.56M parameters); ours is the same network
on 36x36 pairs (5.93M parameters) with one sigmoid per class and binary cross-entropy on the
two-hot target, judged like the CapsNet: right when its two highest scores are the two digits.

    image (B, 1, 28, 28)
      -> conv 256 x 5x5, ReLU, 2x2 max-pool   (B, 256, 14, 14)
      -> conv 256 x 5x5, ReLU, 2x2 max-pool   (B, 256, 7, 7)
      -> conv 128 x 5x5, ReLU                 (B, 128, 7, 7)
      -> FC 328, ReLU -> FC 192, ReLU, dropout (B, 192)
      -> FC 10                                (B, 10) logits -> softmax (or sigmoid) scores
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capsnet.nn.config import config_from_fields, preset_of
from capsnet.nn.family import Network, register
from capsnet.nn.losses import CapsuleLoss, targets_of


@dataclass(frozen=True)
class CNNConfig:
    """Hyper-parameters of the baseline CNN."""

    in_channels: int = 1
    image_size: int = 28
    num_classes: int = 10
    channels: tuple[int, ...] = (256, 256, 128)  # 5x5 convolutions, stride 1, 'same' padding, ReLU
    kernel: int = 5
    pool_after: tuple[int, ...] = (1, 2)  # a 2x2 max-pool after these convolutions (1-based); () is the paper's
    hidden: tuple[int, ...] = (328, 192)  # fully connected, ReLU
    dropout: float = 0.5  # before the output layer
    multi_label: bool = False  # MultiMNIST: a sigmoid per class (several digits present), else a softmax

    def __post_init__(self) -> None:
        for name in ("in_channels", "image_size", "num_classes", "kernel"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        for name in ("channels", "hidden", "pool_after"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not all(isinstance(n, int) and n >= 1 for n in value):
                raise ValueError(f"{name} must be a sequence of whole numbers >= 1, got {value!r}")
        if not self.channels:
            raise ValueError("channels must name at least one convolution")
        if list(self.pool_after) != sorted(set(self.pool_after)):
            raise ValueError(f"pool_after must name each convolution once, in order, got {self.pool_after}")
        if any(k > len(self.channels) for k in self.pool_after):
            raise ValueError(f"pool_after {self.pool_after} names a convolution past the last ({len(self.channels)})")
        if self.feature_size < 1:
            raise ValueError(f"image_size {self.image_size} is too small for {len(self.pool_after)} 2x2 pools")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout!r}")

    @property
    def feature_size(self) -> int:
        """Side of the last convolution's output: 7 for 28x28 inputs and two pools."""
        return self.image_size // 2 ** len(self.pool_after)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CNNConfig:
        """Rebuild a config from `to_dict` output; unknown keys are an error."""
        return config_from_fields(cls, data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> CNNConfig:
        """The CNN of a named preset (the same names as the CapsNet's), with optional field overrides."""
        return preset_of(CNN_PRESETS, name, overrides)


CNN_PRESETS: dict[str, CNNConfig] = {
    # the paper's baseline with two 2x2 pools: 4,587,282 parameters on 28x28 inputs
    "paper": CNNConfig(),
    # the same network on MultiMNIST's 36x36 pairs, a sigmoid per class: 5,930,770 parameters
    "multimnist": CNNConfig(image_size=36, multi_label=True),
    # a small network for tests and quick demos
    "tiny": CNNConfig(channels=(16, 16, 8), hidden=(32, 16)),
}


@dataclass
class CNNOutput:
    """What the baseline's forward pass computed."""

    logits: Tensor  # (B, K)
    scores: Tensor  # (B, K): softmax probabilities, or one sigmoid per class for multi_label
    prediction: Tensor  # (B,) the highest score


class BaselineCNN(nn.Module):
    """Three 5x5 convolutions, two fully connected layers, dropout, and a softmax (or sigmoid) output."""

    def __init__(self, config: CNNConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or CNNConfig()
        layers: list[nn.Module] = []
        fan_in = config.in_channels
        for k, width in enumerate(config.channels, start=1):
            layers += [nn.Conv2d(fan_in, width, config.kernel, padding=config.kernel // 2), nn.ReLU(inplace=True)]
            if k in config.pool_after:
                layers.append(nn.MaxPool2d(2))
            fan_in = width
        self.features = nn.Sequential(*layers)
        sizes = (config.channels[-1] * config.feature_size**2, *config.hidden)
        dense: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            dense += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        self.classifier = nn.Sequential(*dense, nn.Dropout(config.dropout), nn.Linear(sizes[-1], config.num_classes))

    def num_parameters(self) -> int:
        """Parameter count: 4,587,282 for the shipped MNIST baseline, 35,445,522 for the paper's (no pools)."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, images: Tensor, labels: Tensor | None = None) -> CNNOutput:
        """Classify a batch (B, C, H, W) in [0, 1]. `labels` are accepted for the trainer's sake and not used."""
        c = self.config
        expected = (c.in_channels, c.image_size, c.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"expected images of shape (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}"
            )
        features = self.features(images)  # (B, 128, 7, 7)
        logits = self.classifier(features.flatten(1))  # (B, 128*7*7) -> (B, K)
        scores = torch.sigmoid(logits.float()) if c.multi_label else logits.float().softmax(dim=1)  # (B, K) float32
        return CNNOutput(logits=logits, scores=scores, prediction=logits.argmax(dim=1))


def cnn_loss(logits: Tensor, labels: Tensor, config: CNNConfig) -> CapsuleLoss:
    """Cross-entropy on labels (B,), or, for multi_label, binary cross-entropy on the targets of labels (B, L).

    Returned in the CapsNet's loss record: `margin` holds the classification loss, `reconstruction` is 0.
    """
    logits = logits.float()
    if config.multi_label:
        loss = F.binary_cross_entropy_with_logits(logits, targets_of(labels, config.num_classes).to(logits.dtype))
        loss = loss * config.num_classes  # summed over the classes, averaged over the batch, like the margin loss
    else:
        if labels.dim() != 1:
            raise ValueError(f"a softmax CNN takes one label per image (B,), got {tuple(labels.shape)}")
        loss = F.cross_entropy(logits, labels)
    return CapsuleLoss(total=loss, margin=loss, reconstruction=torch.zeros((), device=logits.device))


def _cnn_loss(out: CNNOutput, targets: Tensor, labels: Tensor, config: CNNConfig, _: float) -> CapsuleLoss:
    return cnn_loss(out.logits, labels, config)


register(
    Network(
        "cnn", "CNN baseline", "CNN", "class probabilities", "p", "cross-entropy", "a CNN baseline",
        CNNConfig, BaselineCNN, tuple(CNN_PRESETS), routing=None, baseline=True,
        pairs=True, pairs_field="multi_label", _loss=_cnn_loss, _redraws=lambda config: False,
    )
)  # fmt: skip
