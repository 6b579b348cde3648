"""A fourth network family, made in a test: a toy capsule network with its own routing ("mean": every primary
capsule's vote for a class weighs the same, one pass), registered from here the way a family's own module does,
so that the tests can ask whether the CLI, the checkpoints and every dashboard page take a family nobody edited
them for (tests/test_open_registry.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from capsnet.nn.config import config_from_fields, preset_of
from capsnet.nn.family import NETWORKS, Network, Routing, register
from capsnet.nn.losses import CapsuleLoss, margin_loss
from capsnet.nn.squash import squash
from capsnet.readings import reading

NAME = "toy"
KIND = "mean"


@dataclass(frozen=True)
class ToyConfig:
    """A few primary capsules from one strided convolution; class capsules from the mean of their votes."""

    in_channels: int = 1
    image_size: int = 28
    num_classes: int = 10
    types: int = 4  # primary capsule types
    dim: int = 8  # a capsule's length of pose
    routing_iterations: int = 1  # the mean is one pass, whatever is asked

    @property
    def grid(self) -> int:
        return (self.image_size - 8) // 4 + 1  # a 8x8 convolution, stride 4: 6 for 28x28

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToyConfig:
        return config_from_fields(cls, data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ToyConfig:
        return preset_of({"tiny": ToyConfig(), "paper": ToyConfig(types=8)}, name, overrides)


@dataclass
class ToyOutput:
    scores: Tensor  # (B, K) the class capsules' lengths
    prediction: Tensor  # (B,)
    poses: Tensor  # (B, K, D)


class ToyNet(nn.Module):
    def __init__(self, config: ToyConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or ToyConfig()
        self.conv = nn.Conv2d(c.in_channels, c.types * c.dim, 8, stride=4)
        self.W = nn.Parameter(0.05 * torch.randn(c.types * c.grid**2, c.num_classes, c.dim, c.dim))

    def forward(self, images: Tensor, labels: Tensor | None = None) -> ToyOutput:
        c = self.config
        u = self.conv(images)  # (B, T*D, G, G)
        u = u.view(len(images), c.types, c.dim, c.grid, c.grid).permute(0, 1, 3, 4, 2).reshape(len(images), -1, c.dim)
        u = squash(u)  # (B, N, D)
        votes = torch.einsum("nkde,bne->bnkd", self.W, u)  # (B, N, K, D)
        v = squash(votes.mean(dim=1))  # (B, K, D): every vote weighs the same
        scores = v.norm(dim=-1)
        return ToyOutput(scores=scores, prediction=scores.argmax(dim=1), poses=v)


def _loss(out: ToyOutput, targets: Tensor, labels: Tensor, config: ToyConfig, _: float) -> CapsuleLoss:
    margin = margin_loss(out.scores.float(), labels)
    zero = margin.new_zeros(())
    return CapsuleLoss(total=margin, margin=margin, reconstruction=zero)


def _read(model: Any, image: Any, iterations: Any, decode_class: Any, layers: bool) -> reading.Reading:
    picture = np.asarray(image, dtype=np.float32)
    with torch.no_grad():
        out = model(torch.as_tensor(picture).reshape(1, 1, *picture.shape[-2:]))
    scores = out.scores[0].numpy()
    prediction = int(out.prediction[0])
    return reading.Reading(
        "|v|", picture, scores, prediction, out.poses[0].numpy(), None,
        prediction if decode_class is None else decode_class, 1, None,  # type: ignore[arg-type]
    )  # fmt: skip


NETWORK = Network(
    NAME, "Toy capsules", "Toy", "capsule lengths", "|v|", "margin loss", "a toy capsule network",
    ToyConfig, ToyNet, ("tiny", "paper"), routing=Routing(KIND, "mean routing"),  # type: ignore[arg-type]
    baseline=False, pairs=False, pairs_field=None, _loss=_loss, _redraws=lambda config: False,
    _score_margins=lambda config: (0.9, 0.1),
)  # fmt: skip


def install() -> None:
    """Register the toy family and its reader, as its own module would on import."""
    register(NETWORK)
    reading.register_reader(KIND, _read)


def uninstall() -> None:
    NETWORKS.pop(NAME, None)
    reading.READERS.pop(KIND, None)
