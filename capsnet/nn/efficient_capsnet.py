"""Efficient-CapsNet: capsules routed by one pass of self-attention (Mazzia, Salvetti & Chiaberge 2021).

"Efficient-CapsNet: capsule network with self-attention routing", Scientific Reports 11, 14634.
https://arxiv.org/abs/2101.12491, code https://github.com/EscVM/Efficient-CapsNet. For MNIST:

    image (B, 1, 28, 28)
      -> conv 32 x 5x5, ReLU, BatchNorm            (B, 32, 24, 24)
      -> conv 64 x 3x3, ReLU, BatchNorm            (B, 64, 22, 22)
      -> conv 64 x 3x3, ReLU, BatchNorm            (B, 64, 20, 20)
      -> conv 128 x 3x3 stride 2, ReLU, BatchNorm  (B, 128, 9, 9)
      -> depthwise 9x9 (PrimaryCaps)               (B, 128, 1, 1) -> 16 capsules of 8, squashed  (B, 16, 8)
      -> FCCaps: votes u_hat = W u                 (B, 10, 16, 16)
         attention a_ji = u_hat_ji . sum_m u_hat_jm / sqrt(16), softmax over the classes j, plus a learned bias b_ji
         s_j = sum_i c_ji u_hat_ji, v_j = squash(s_j)                                                 (B, 10, 16)

One pass, no iterations: the couplings c_ji (a primary capsule's attention over the class capsules, in the shape
of dynamic routing's) come from the votes' agreement with their class's whole set of votes. Its squash is the
paper's own, (1 - e^-|s|) s / |s|. 161,824 trainable parameters without the decoder (the paper's "161K"); the
decoder, the margin loss and its weight 0.392 on the mean squared reconstruction error (0.0005 on the sum) are the
CapsNet's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capsnet.nn.config import class_index, config_from_fields, preset_of
from capsnet.nn.decoder import Decoder
from capsnet.nn.family import Network, Routing, register
from capsnet.nn.losses import CapsuleLoss, margin_loss, reconstruction_loss


@dataclass(frozen=True)
class EfficientCapsNetConfig:
    """Hyper-parameters of Efficient-CapsNet (the MNIST network of the paper by default)."""

    in_channels: int = 1
    image_size: int = 28
    num_classes: int = 10
    convs: tuple[tuple[int, int, int], ...] = (
        (32, 5, 1),
        (64, 3, 1),
        (64, 3, 1),
        (128, 3, 2),
    )  # (width, kernel, stride)
    primary_dim: int = 8  # a primary capsule's length: the depthwise convolution's 128 outputs are 16 capsules of 8
    digit_dim: int = 16
    decoder_hidden: tuple[int, ...] = (512, 1024)
    m_plus: float = 0.9
    m_minus: float = 0.1
    down_weight: float = 0.5
    reconstruction_weight: float = 0.0005  # on the summed squared error: the paper's 0.392 on the mean over 784 pixels
    routing_iterations: int = field(default=1)  # one pass of attention, whatever is asked: kept for the pages' sake

    def __post_init__(self) -> None:
        for name in ("in_channels", "image_size", "num_classes", "primary_dim", "digit_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not self.convs or any(len(c) != 3 or min(c) < 1 for c in self.convs):
            raise ValueError(f"convs must be (width, kernel, stride) triples of whole numbers >= 1, got {self.convs}")
        if self.feature_side < 1:
            raise ValueError(f"image_size {self.image_size} is too small for the convolutions {self.convs}")
        if self.convs[-1][0] % self.primary_dim:
            raise ValueError(
                f"the last convolution's {self.convs[-1][0]} channels are not capsules of {self.primary_dim}"
            )

    @property
    def feature_side(self) -> int:
        """The last convolution's side, which the depthwise PrimaryCaps kernel covers whole: 9 for 28x28."""
        side = self.image_size
        for _, kernel, stride in self.convs:
            side = (side - kernel) // stride + 1
        return side

    @property
    def num_primary(self) -> int:
        """Primary capsules: 16 for the paper's MNIST network."""
        return self.convs[-1][0] // self.primary_dim

    @property
    def image_pixels(self) -> int:
        return self.in_channels * self.image_size**2

    def check_class(self, index: int) -> int:
        """`index` as an int when it names a class (ValueError otherwise)."""
        return class_index(index, self.num_classes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EfficientCapsNetConfig:
        """Rebuild a config from `to_dict` output; unknown keys are an error."""
        fields = dict(data)
        if "convs" in fields:
            fields["convs"] = tuple(tuple(c) for c in fields["convs"])
        return config_from_fields(cls, fields)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> EfficientCapsNetConfig:
        """The network of a named preset ("paper", "tiny"), with optional field overrides."""
        return preset_of(PRESETS, name, overrides)


PRESETS: dict[str, EfficientCapsNetConfig] = {
    "paper": EfficientCapsNetConfig(),
    # a small network for tests and quick demos: the same structure, narrower layers
    "tiny": EfficientCapsNetConfig(convs=((16, 5, 1), (32, 3, 1), (32, 3, 1), (64, 3, 2)), decoder_hidden=(64, 128)),
}


def squash(s: Tensor, dim: int = -1, eps: float = 1e-20) -> Tensor:
    """Efficient-CapsNet's squash, (1 - e^-|s|) s / |s|: 0 at s = 0 (no NaN), its length below 1."""
    norm = s.norm(dim=dim, keepdim=True)
    return (1.0 - torch.exp(-norm)) * s / (norm + eps)


def self_attention_routing(
    votes: Tensor, bias: Tensor, sharpness: float = 1.0, logits: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """One pass of self-attention routing: votes u_hat (B, K, N, D) and the learned bias b (K, N) -> the class
    capsules v (B, K, D) and the couplings c (B, K, N).

    c_ji = softmax_j(sharpness * u_hat_ji . sum_m u_hat_jm / sqrt(D)) + b_ji, s_j = sum_i c_ji u_hat_ji, v_j = squash(s_j).
    The network reads with `sharpness` 1; 0 makes every child's attention uniform (no routing, the bias kept), and
    `logits` (B, K, N) put other scores in the agreement's place (random couplings), as the Routing page's knobs do.
    """
    if logits is None:
        agreement = torch.einsum("bknd,bkd->bkn", votes, votes.sum(dim=2)) / math.sqrt(votes.shape[-1])  # (B, K, N)
        logits = sharpness * agreement
    coupling = F.softmax(logits, dim=1) + bias  # over the classes, then the learned bias
    return squash((votes * coupling.unsqueeze(-1)).sum(dim=2)), coupling  # (B, K, D), (B, K, N)


@dataclass
class EfficientCapsNetOutput:
    """Everything a forward pass computed."""

    poses: Tensor  # v_j (B, K, D)
    lengths: Tensor  # |v_j| (B, K)
    reconstruction: Tensor | None  # (B, C, H, W) in [0, 1]; None without a decoder
    prediction: Tensor  # (B,)
    coupling: Tensor  # c_ij (B, N, K): each primary capsule's attention over the class capsules, bias included
    primary: Tensor  # u_i (B, N, d) the squashed primary capsules
    features: Tensor | None = None  # (B, C, f, f) the last convolution's maps, where asked (`return_features`)

    @property
    def scores(self) -> Tensor:
        return self.lengths


class _BatchNorm(nn.BatchNorm2d):
    """Batch norm with Keras's defaults (the official code's), without a batch counter: its momentum is fixed, so the
    count is needed by nothing, and a checkpoint holds floating-point weights only."""

    def __init__(self, width: int) -> None:
        super().__init__(width, eps=1e-3, momentum=0.01)
        self.register_buffer("num_batches_tracked", None)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any, *args: Any) -> None:
        # as a state of the current version: an older one's loader would add the counter back
        super()._load_from_state_dict(state_dict, prefix, {**local_metadata, "version": 2}, *args)


class EfficientCapsNet(nn.Module):
    """Convolutions with batch norm, depthwise-separable primary capsules, self-attention routing, the decoder."""

    def __init__(self, config: EfficientCapsNetConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or EfficientCapsNetConfig()
        layers: list[nn.Module] = []
        fan_in = c.in_channels
        for width, kernel, stride in c.convs:
            conv = nn.Conv2d(fan_in, width, kernel, stride)
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")  # the official code's he_normal
            nn.init.zeros_(conv.bias)  # type: ignore[arg-type]
            layers += [conv, nn.ReLU(inplace=True), _BatchNorm(width)]
            fan_in = width
        self.features = nn.Sequential(*layers)
        self.primary = nn.Conv2d(fan_in, fan_in, c.feature_side, groups=fan_in)  # depthwise, over the whole map
        weight = torch.empty(c.num_classes, c.num_primary, c.primary_dim, c.digit_dim)
        self.W = nn.Parameter(nn.init.normal_(weight, std=math.sqrt(2.0 / (c.num_primary * c.primary_dim))))
        self.b = nn.Parameter(torch.zeros(c.num_classes, c.num_primary))
        shape = (c.in_channels, c.image_size, c.image_size)
        self.decoder = Decoder(c.num_classes, c.digit_dim, c.decoder_hidden, shape) if c.decoder_hidden else None

    @property
    def device(self) -> torch.device:
        return self.W.device

    def num_parameters(self, decoder: bool = True) -> int:
        """Trainable parameters: 161,824 for the paper's MNIST network without its decoder."""
        skip = () if decoder or self.decoder is None else tuple(id(p) for p in self.decoder.parameters())
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)

    def votes(self, primary: Tensor) -> Tensor:
        """The primary capsules' votes for the class capsules, u_hat_{j|i} = W_ij u_i: (B, N, d) -> (B, K, N, D)."""
        return torch.einsum("bni,knid->bknd", primary, self.W)

    def decode(self, poses: Tensor, class_index: Tensor | int) -> Tensor:
        """Redraw images from class capsules (B, K, D), keeping only `class_index`'s."""
        if self.decoder is None:
            raise ValueError("this Efficient-CapsNet has no decoder")
        return self.decoder.redraw(poses, class_index)

    def forward(
        self,
        images: Tensor,
        labels: Tensor | None = None,
        routing_iterations: int | None = None,
        return_features: bool = False,
    ) -> EfficientCapsNetOutput:
        """Read a batch (B, C, H, W) in [0, 1]. Training with `labels`, the decoder redraws the true class (never the
        prediction); reading, the prediction. `routing_iterations` is accepted and unused: one pass of attention.
        `return_features` keeps the last convolution's maps in the output (the Architecture page's)."""
        c = self.config
        expected = (c.in_channels, c.image_size, c.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"expected images of shape (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}"
            )
        b = len(images)
        features = self.features(images)  # (B, C, f, f)
        u = squash(self.primary(features).reshape(b, c.num_primary, c.primary_dim))  # (B, N, d)
        votes = self.votes(u)  # (B, K, N, D)
        v, coupling = self_attention_routing(votes, self.b)  # (B, K, D), (B, K, N)
        lengths = v.norm(dim=-1)  # (B, K)
        prediction = lengths.argmax(dim=1)
        reconstruction = None
        if self.decoder is not None:
            shown = labels if (self.training and labels is not None and labels.dim() == 1) else prediction
            reconstruction = self.decoder.redraw(v, shown)
        return EfficientCapsNetOutput(
            v, lengths, reconstruction, prediction, coupling.transpose(1, 2), u, features if return_features else None
        )


def _loss(
    out: EfficientCapsNetOutput, targets: Tensor, labels: Tensor, config: EfficientCapsNetConfig, _: float
) -> CapsuleLoss:
    margin = margin_loss(out.lengths.float(), labels, config.m_plus, config.m_minus, config.down_weight)
    if out.reconstruction is None:
        return CapsuleLoss(total=margin, margin=margin, reconstruction=margin.new_zeros(()))
    recon = reconstruction_loss(out.reconstruction.float(), targets.float(), config.reconstruction_weight)
    return CapsuleLoss(total=margin + recon, margin=margin, reconstruction=recon)


NETWORK = register(
    Network(
        "efficient", "Efficient-CapsNet", "Efficient", "capsule lengths", "|v|", "margin loss",
        "an Efficient-CapsNet (self-attention routing)", EfficientCapsNetConfig, EfficientCapsNet, tuple(PRESETS),
        routing=Routing("attention", "self-attention routing", options=()),
        baseline=False, pairs=False, pairs_field=None, _loss=_loss,
        _redraws=lambda config: bool(config.decoder_hidden),
        _score_margins=lambda config: (config.m_plus, config.m_minus),
    )
)  # fmt: skip
