"""The Capsule Network of Sabour, Frosst & Hinton (2017), with its decoder.

"Dynamic Routing Between Capsules", NeurIPS 2017. https://arxiv.org/abs/1710.09829

    image (B, 1, 28, 28)
      -> Conv1, 256 x 9x9, ReLU              (B, 256, 20, 20)
      -> PrimaryCaps, 32 x 8-D, 9x9 stride 2 (B, 1152, 8)
      -> DigitCaps by dynamic routing        (B, 10, 16)
      -> lengths |v_j|                        (B, 10)      class probabilities
      -> decoder on the masked DigitCaps      (B, 1, 28, 28) reconstruction

The forward pass returns a `CapsNetOutput` that carries, on request, the routing
trace and the primary capsules, so explaining a prediction needs no hooks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capsnet.nn.config import PRESETS, CapsNetConfig
from capsnet.nn.decoder import Decoder
from capsnet.nn.dynamic_routing import RoutingTrace
from capsnet.nn.family import Network, Routing, register
from capsnet.nn.layers import PrimaryCapsules, RoutingCapsules, capsule_lengths
from capsnet.nn.losses import CapsuleLoss, capsule_loss
from capsnet.nn.routing import CouplingScores, RandomCouplings, check_iterations, coupling_entropy


@dataclass
class PrimaryCapsuleOutput:
    """The primary capsules of a forward pass."""

    poses: Tensor  # (B, N, P)
    lengths: Tensor  # (B, N)
    types: int
    grid: int  # capsule i is type i // grid**2 at (y, x) = divmod(i % grid**2, grid): `CapsNetConfig.primary_position`


@dataclass
class CapsNetOutput:
    """Everything a forward pass computed."""

    poses: Tensor  # DigitCaps v_j: (B, K, D)
    lengths: Tensor  # |v_j|: (B, K)
    reconstruction: Tensor  # (B, C, H, W), in [0, 1]
    prediction: Tensor  # argmax_j |v_j|: (B,)
    trace: RoutingTrace | None = None
    primary: PrimaryCapsuleOutput | None = None
    features: Tensor | None = None  # Conv1's ReLU feature maps (B, C1, S, S), on request

    @property
    def scores(self) -> Tensor:
        """The class scores every classifier here gives (the baseline CNN's are probabilities): the lengths."""
        return self.lengths


class CapsNet(nn.Module):
    """Conv1 -> PrimaryCaps -> DigitCaps (dynamic routing) -> decoder."""

    def __init__(self, config: CapsNetConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or CapsNetConfig()
        self.conv1 = nn.Conv2d(config.in_channels, config.conv1_channels, kernel_size=config.conv1_kernel)
        self.primary = PrimaryCapsules(
            config.conv1_channels,
            config.primary_types,
            config.primary_dim,
            config.primary_kernel,
            config.primary_stride,
            config.primary_scale,
        )
        self.digits = RoutingCapsules(
            config.num_primary, config.primary_dim, config.num_classes, config.digit_dim, config.none_of_the_above
        )
        self.decoder = Decoder(
            config.num_classes,
            config.digit_dim,
            config.decoder_hidden,
            (config.in_channels, config.image_size, config.image_size),
        )
        if config.init == "official":
            self._official_init()

    @torch.no_grad()
    def _official_init(self) -> None:
        """The official code's initial weights (Sarasra/models, research/capsules): truncated normals (cut at
        two sigma) with sigma 0.05 for Conv1, 0.1 for the PrimaryCaps kernel and W_ij, every bias 0.1."""
        for weight, sigma in ((self.conv1.weight, 0.05), (self.primary.conv.weight, 0.1), (self.digits.weight, 0.1)):
            nn.init.trunc_normal_(weight, std=sigma, a=-2 * sigma, b=2 * sigma)
        for bias in (self.conv1.bias, self.primary.conv.bias):
            assert bias is not None  # both convolutions are built with their bias
            nn.init.constant_(bias, 0.1)

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return next(self.parameters()).device

    def num_parameters(self, decoder: bool = True) -> int:
        """Parameter count: 8,215,568 for the paper's model, 6,804,224 without the decoder."""
        total = sum(p.numel() for p in self.parameters())
        return total if decoder else total - sum(p.numel() for p in self.decoder.parameters())

    def encode(
        self, images: Tensor, routing_iterations: int | None = None, trace: bool = False
    ) -> tuple[Tensor, Tensor, RoutingTrace | None]:
        """Images to (primary poses (B, N, P), digit poses (B, K, D), routing trace or None)."""
        return self._layers(images, routing_iterations, trace)[1:]

    def scores_by_iterations(self, images: Tensor, iterations: Sequence[int]) -> Tensor:
        """The capsule lengths at each routing count r of `iterations`: (B, R, K) (`scores_by_coupling`)."""
        return self.scores_by_coupling(images, iterations).scores

    def scores_by_coupling(
        self, images: Tensor, iterations: Sequence[int], random: RandomCouplings | None = None
    ) -> CouplingScores:
        """The capsule lengths and coupling entropies routed r times for each r of `iterations`, then (given
        `random`) with these random couplings, not routed (`capsnet.nn.routing.CouplingScores`).

        Conv1, PrimaryCaps and the votes u_hat run once; routing runs once, max(r) times (routing r times is the
        first r iterations of routing more), in float32 as in the forward pass."""
        if len(iterations) == 0:
            raise ValueError("iterations must name at least one routing count")
        picks = [check_iterations(r) - 1 for r in iterations]
        primary, _, _ = self.encode(images, routing_iterations=1)
        votes = self.digits.predictions(primary)  # (B, K, N, D), once
        _, routed = self.digits.route(votes, max(picks) + 1, trace=True)
        assert routed is not None  # traced
        lengths, couplings = routed.lengths[:, picks], routed.coupling[:, picks]  # (B, R, K), (B, R, K, N)
        if random is not None:
            start = random.logits(tuple(votes.shape[:3]), votes.device)  # (B, K, N)
            _, fixed = self.digits.route(votes, 1, trace=True, start=start)
            assert fixed is not None  # traced
            lengths, couplings = torch.cat([lengths, fixed.lengths], 1), torch.cat([couplings, fixed.coupling], 1)
        return CouplingScores(lengths, coupling_entropy(couplings))  # (B, R', K), (B, R')

    def _layers(
        self, images: Tensor, routing_iterations: int | None, trace: bool
    ) -> tuple[Tensor, Tensor, Tensor, RoutingTrace | None]:
        """`encode`, with Conv1's feature maps first: (features, primary poses, digit poses, trace)."""
        c = self.config
        expected = (c.in_channels, c.image_size, c.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"expected images of shape (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}"
            )
        iterations = c.routing_iterations if routing_iterations is None else routing_iterations
        features = F.relu(self.conv1(images))  # (B, 256, 20, 20)
        primary = self.primary(features)  # (B, 1152, 8)
        poses, routing = self.digits(primary, iterations, trace)  # (B, 10, 16)
        return features, primary, poses, routing

    def decode(self, poses: Tensor, class_index: Tensor | int) -> Tensor:
        """Reconstruct images from DigitCaps poses (B, K, D), keeping only `class_index`'s capsule.

        `class_index` is one class for the whole batch or one per example (B,).
        Any 16-D vector can be decoded by placing it in that class's row.
        """
        return self.decoder.redraw(poses, class_index)  # (B, C, H, W)

    def forward(
        self,
        images: Tensor,
        labels: Tensor | None = None,
        *,
        decode_class: Tensor | int | None = None,
        routing_iterations: int | None = None,
        return_trace: bool = False,
        return_primary: bool = False,
        return_features: bool = False,
    ) -> CapsNetOutput:
        """Classify and reconstruct a batch.

        The decoder sees the true label's capsule when `labels` are given (always
        in training), else the class named by `decode_class`, else the longest
        capsule (the prediction). Labels (B, L) (MultiMNIST's two digits) give L
        reconstructions, each from its own capsule: (B, L, C, H, W). `return_trace`, `return_primary` and
        `return_features` keep the routing trace, the primary capsules and Conv1's feature maps of this same pass.
        """
        if self.training and labels is None:
            raise ValueError("training mode needs labels: the decoder is masked by the true class")
        features, primary, poses, trace = self._layers(images, routing_iterations, return_trace)
        lengths = capsule_lengths(poses)  # (B, K)
        prediction = lengths.argmax(dim=1)  # (B,)
        mask_class: Tensor | int
        if labels is not None:
            mask_class = labels
        elif decode_class is not None:
            mask_class = decode_class
        else:
            mask_class = prediction
        primary_out = None
        if return_primary:
            c = self.config
            primary_out = PrimaryCapsuleOutput(primary, capsule_lengths(primary), c.primary_types, c.primary_grid)
        if isinstance(mask_class, Tensor) and mask_class.dim() == 2:  # several classes present: one redrawing each
            reconstruction = torch.stack([self.decode(poses, mask_class[:, k]) for k in range(mask_class.shape[1])], 1)
        else:
            reconstruction = self.decode(poses, mask_class)  # (B, C, H, W)
        return CapsNetOutput(
            poses=poses,
            lengths=lengths,
            reconstruction=reconstruction,
            prediction=prediction,
            trace=trace,
            primary=primary_out,
            features=features if return_features else None,
        )


def _capsnet_loss(out: CapsNetOutput, targets: Tensor, labels: Tensor, config: CapsNetConfig, _: float) -> CapsuleLoss:
    return capsule_loss(out.lengths, out.reconstruction, targets, labels, config)


register(
    Network(
        "capsnet", "CapsNet", "", "capsule lengths", "|v|", "margin loss", "a Capsule Network",
        CapsNetConfig, CapsNet, tuple(PRESETS), routing=Routing("dynamic", "dynamic routing"), baseline=False,
        pairs=True, pairs_field=None, _loss=_capsnet_loss, _redraws=lambda config: True,
        _score_margins=lambda config: (config.m_plus, config.m_minus),
    )
)  # fmt: skip
