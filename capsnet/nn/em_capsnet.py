"""The matrix-capsule network of Hinton, Sabour & Frosst (2018), routed by EM, with an optional decoder.

"Matrix capsules with EM routing", ICLR 2018. https://openreview.net/forum?id=HJWLfGWRb (section 4, figure 1)

    image (B, 1, 28, 28)
      -> ReLU Conv1, A x 5x5, stride 2                 (B, A, 12, 12)
      -> PrimaryCaps, B types, 1x1: 4x4 pose + a        (B, B, 16, 12, 12), (B, B, 12, 12)
      -> ConvCaps1, C types, 3x3, stride 2 (EM)         (B, C, 16, 5, 5),  (B, C, 5, 5)
      -> ConvCaps2, D types, 3x3, stride 1 (EM)         (B, D, 16, 3, 3),  (B, D, 3, 3)
      -> Class capsules, W shared per type, coordinate addition (EM)
                                                        (B, 10, 16) poses, (B, 10) activations a_j
      -> optional decoder on the label's masked pose    (B, 1, 28, 28)

On the paper's smallNORB crops (32x32) the grids are 14, 6 and 4. The class scores are the activations a_j,
trained with the spread loss (`capsnet.nn.losses.spread_loss`), its margin annealed from 0.2 to 0.9.
The forward pass returns an `EMCapsNetOutput` that carries, on request, the class layer's EM trace and the
primary capsules, so explaining a prediction needs no hooks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from capsnet.nn import em_native
from capsnet.nn.config import class_index, config_from_fields, preset_of
from capsnet.nn.decoder import Decoder
from capsnet.nn.em_routing import EMTrace
from capsnet.nn.family import Network, Routing, register
from capsnet.nn.losses import CapsuleLoss, reconstruction_loss, spread_loss
from capsnet.nn.matrix_capsules import BETA_NAMES, POSE_ENTRIES, ClassCapsules, ConvCapsules, PrimaryMatrixCapsules
from capsnet.nn.routing import (
    MAX_ROUTING_ITERATIONS,
    CouplingScores,
    RandomCouplings,
    check_iterations,
    coupling_entropy,
)

MAX_INDEX_BYTES = 256 * 2**20  # the derived routing tables a config may ask for (`EMCapsNetConfig.index_bytes`)


@dataclass(frozen=True)
class EMCapsNetConfig:
    """Hyper-parameters of the matrix-capsule network (EM paper, section 4) and its loss."""

    # input
    in_channels: int = 1
    image_size: int = 28
    num_classes: int = 10
    # ReLU Conv1: A channels, 5x5, stride 2
    conv1_channels: int = 32  # A
    conv1_kernel: int = 5
    conv1_stride: int = 2
    # PrimaryCaps: B types, 1x1
    primary_types: int = 32  # B
    # ConvCaps1 (3x3, stride 2) and ConvCaps2 (3x3, stride 1)
    convcaps1_types: int = 32  # C
    convcaps2_types: int = 32  # D
    convcaps_kernel: int = 3
    convcaps1_stride: int = 2
    convcaps2_stride: int = 1
    routing_iterations: int = 3
    coordinate_addition: bool = True
    # the optional decoder (FC widths, then FC H*W*C sigmoid) that redraws the input from the label's 16 pose
    # entries; () for none, as in the paper
    decoder_hidden: tuple[int, ...] = ()
    reconstruction_weight: float = 0.0005
    # spread loss: the margin grows linearly from margin_start to margin_end over the first margin_anneal of training
    margin_start: float = 0.2
    margin_end: float = 0.9
    margin_anneal: float = 0.5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int":
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"{f.name} must be a whole number >= 1, got {value!r}")
            elif f.type == "float":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"{f.name} must be a finite number, got {value!r}")
        if self.routing_iterations > MAX_ROUTING_ITERATIONS:
            raise ValueError(
                f"routing_iterations must be at most {MAX_ROUTING_ITERATIONS}, got {self.routing_iterations}"
            )
        hidden = self.decoder_hidden
        if not isinstance(hidden, (tuple, list)) or not all(isinstance(n, int) and n >= 1 for n in hidden):
            raise ValueError(f"decoder_hidden must be a sequence of widths >= 1 (or empty), got {hidden!r}")
        if not 0 < self.margin_start <= self.margin_end:
            raise ValueError(f"the margin must grow from above 0: got {self.margin_start} -> {self.margin_end}")
        if not 0 < self.margin_anneal <= 1:
            raise ValueError(f"margin_anneal is a fraction of training in (0, 1], got {self.margin_anneal}")
        if self.convcaps2_grid < 1:
            raise ValueError(f"image_size {self.image_size} is too small for this network's kernels and strides")
        if self.index_bytes > MAX_INDEX_BYTES:  # before anything is built: a header may ask for anything
            raise ValueError(
                f"image_size {self.image_size} with {self.primary_types}, {self.convcaps1_types} and "
                f"{self.convcaps2_types} capsule types needs {self.index_bytes / 2**30:.1f} GiB of routing tables "
                f"(at most {MAX_INDEX_BYTES / 2**20:.0f} MiB): not a network this builds"
            )

    @property
    def index_bytes(self) -> int:
        """Bytes of the tables the capsule layers derive from the config when built (each window's children, the
        class layer's coordinates), before any weight: 82 KB for the paper's network on 28x28 images."""
        k = self.convcaps_kernel
        first = self.convcaps1_grid**2 * self.primary_types * k * k  # ConvCaps1's (L, I) child index
        second = self.convcaps2_grid**2 * self.convcaps1_types * k * k
        cells = self.convcaps2_grid**2
        return 8 * (first + second + self.convcaps2_types * cells + self.conv1_grid**2) + 4 * POSE_ENTRIES * cells

    @property
    def conv1_grid(self) -> int:
        """Side of Conv1's output and of the primary capsule grid: 12 on 28x28, 14 on smallNORB's 32x32."""
        return (self.image_size - self.conv1_kernel) // self.conv1_stride + 1

    @property
    def convcaps1_grid(self) -> int:
        return (self.conv1_grid - self.convcaps_kernel) // self.convcaps1_stride + 1

    @property
    def convcaps2_grid(self) -> int:
        return (self.convcaps1_grid - self.convcaps_kernel) // self.convcaps2_stride + 1

    @property
    def digit_dim(self) -> int:
        """The entries of a class capsule's pose that the decoder reads: 16 (a 4x4 matrix)."""
        return POSE_ENTRIES

    @property
    def decoder(self) -> bool:
        return bool(self.decoder_hidden)

    @property
    def image_pixels(self) -> int:
        return self.in_channels * self.image_size**2

    def margin(self, progress: float) -> float:
        """The spread loss's margin after `progress` (0 to 1) of training: 0.2 growing linearly to 0.9."""
        ramp = min(max(progress, 0.0) / self.margin_anneal, 1.0)
        return self.margin_start + (self.margin_end - self.margin_start) * ramp

    def check_class(self, index: int) -> int:
        """`index` as an int when it names a class (ValueError otherwise)."""
        return class_index(index, self.num_classes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EMCapsNetConfig:
        """Rebuild a config from `to_dict` output; unknown keys are an error."""
        return config_from_fields(cls, data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> EMCapsNetConfig:
        """A named preset (see `EM_PRESETS`), with optional field overrides."""
        return preset_of(EM_PRESETS, name, overrides)


EM_PRESETS: dict[str, EMCapsNetConfig] = {
    # the paper's network (A = B = C = D = 32): 318,964 parameters on 28x28 digits; on smallNORB's 32x32 crops (five
    # classes), the paper's own setting, 316,394: its "310K" (tests/test_smallnorb.py)
    "paper": EMCapsNetConfig(),
    # the paper's network with the decoder that redraws the digit from its class capsule's 16 pose entries
    "paper-decoder": EMCapsNetConfig(decoder_hidden=(512, 1024)),
    # the paper's small network (A = 64, B = 8, C = D = 16): 68,444 parameters (67,154 on smallNORB), the paper's "68K"
    "small": EMCapsNetConfig(conv1_channels=64, primary_types=8, convcaps1_types=16, convcaps2_types=16),
    # the small network with a decoder that redraws the digit from its class capsule's 16 pose entries
    "small-decoder": EMCapsNetConfig(
        conv1_channels=64, primary_types=8, convcaps1_types=16, convcaps2_types=16, decoder_hidden=(512, 1024)
    ),
    # a tiny network for tests
    "tiny": EMCapsNetConfig(conv1_channels=8, primary_types=4, convcaps1_types=4, convcaps2_types=4),
}


@dataclass
class EMCapsNetOutput:
    """Everything a forward pass computed."""

    poses: Tensor  # class capsules' poses mu_j, 16 entries of a 4x4 matrix: (B, K, 16)
    activations: Tensor  # a_j: (B, K)
    reconstruction: Tensor | None  # (B, C, H, W) in [0, 1], or None without a decoder
    prediction: Tensor  # argmax_j a_j: (B,)
    trace: EMTrace | None = None  # the class layer's EM routing
    layer_traces: tuple[EMTrace, EMTrace] | None = None  # ConvCaps1's and ConvCaps2's EM routing, on request
    primary: tuple[Tensor, Tensor] | None = None  # primary poses (B, T, 16, G, G) and activations (B, T, G, G)
    features: Tensor | None = None  # Conv1's ReLU feature maps (B, A, G, G), on request

    @property
    def scores(self) -> Tensor:
        """The class scores every classifier here gives: the activations."""
        return self.activations


class EMCapsNet(nn.Module):
    """ReLU Conv1 -> PrimaryCaps -> ConvCaps1 -> ConvCaps2 -> class capsules (EM routing) -> optional decoder."""

    def __init__(self, config: EMCapsNetConfig | None = None) -> None:
        super().__init__()
        self.config = c = config or EMCapsNetConfig()
        self.conv1 = nn.Conv2d(c.in_channels, c.conv1_channels, kernel_size=c.conv1_kernel, stride=c.conv1_stride)
        self.primary = PrimaryMatrixCapsules(c.conv1_channels, c.primary_types)
        self.convcaps1 = ConvCapsules(
            c.primary_types, c.convcaps1_types, c.convcaps_kernel, c.convcaps1_stride, c.conv1_grid
        )
        self.convcaps2 = ConvCapsules(
            c.convcaps1_types, c.convcaps2_types, c.convcaps_kernel, c.convcaps2_stride, c.convcaps1_grid
        )
        self.classes = ClassCapsules(c.convcaps2_types, c.num_classes, c.convcaps2_grid, c.coordinate_addition)
        image = (c.in_channels, c.image_size, c.image_size)
        self.decoder = Decoder(c.num_classes, POSE_ENTRIES, c.decoder_hidden, image) if c.decoder else None

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def num_parameters(self, decoder: bool = True) -> int:
        """Parameter count: 318,964 for the paper's network, 68,444 for the small one (without a decoder)."""
        total = sum(p.numel() for p in self.parameters())
        if decoder or self.decoder is None:
            return total
        return total - sum(p.numel() for p in self.decoder.parameters())

    def decode(self, poses: Tensor, class_index: Tensor | int) -> Tensor:
        """Redraw images from class poses (B, K, 16), keeping only `class_index`'s capsule (one, or one per example)."""
        if self.decoder is None:
            raise ValueError("this network has no decoder: train a preset with one (small-decoder) to redraw digits")
        return self.decoder.redraw(poses, class_index)  # (B, C, H, W)

    def scores_by_iterations(self, images: Tensor, iterations: Sequence[int]) -> Tensor:
        """The class activations a_j at each routing count r of `iterations`: (B, R, K) (`scores_by_coupling`)."""
        return self.scores_by_coupling(images, iterations).scores

    def scores_by_coupling(
        self, images: Tensor, iterations: Sequence[int], random: RandomCouplings | None = None
    ) -> CouplingScores:
        """The class activations a_j and the class layer's coupling entropies with every capsule layer routed r times
        for each r of `iterations`, each as the forward pass gives them; then (given `random`) with every capsule
        layer's assignments R_ij random, each layer's own draw, and not routed (one M-step each). The decoder is not
        run.

        Conv1 and PrimaryCaps run once. ConvCaps1 routes once, max(r) times, and gives its grid at every r on the
        way (`ConvCapsules.by_iterations`: routing r times is the first r iterations of routing more); ConvCaps2 and
        the class capsules route again for each r, on that r's grid (their votes depend on the layer before)."""
        if len(iterations) == 0:
            raise ValueError("iterations must name at least one routing count")
        iterations = [check_iterations(r) for r in iterations]
        features = F.relu(self.conv1(images))  # (B, A, 12, 12)
        poses, acts = self.primary(features)  # (B, B, 16, 12, 12), (B, B, 12, 12)
        first_poses, first_acts = self.convcaps1.by_iterations(poses, acts, max(iterations))  # (R, B, C, 16, 5, 5), ..
        grids: list[tuple[Tensor, Tensor, int, RandomCouplings | None]]
        grids = [(first_poses[r - 1], first_acts[r - 1], r, None) for r in iterations]
        if random is not None:
            grids.append((*self.convcaps1(poses, acts, 1, random=random.for_layer(1))[:2], 1, random))
        scores, entropy = [], []
        for grid_poses, grid_acts, r, draws in grids:
            second, third = (None, None) if draws is None else (draws.for_layer(2), draws.for_layer(3))
            grid_poses, grid_acts, _ = self.convcaps2(grid_poses, grid_acts, r, random=second)  # (B, D, 16, 3, 3), ..
            _, class_acts, trace = self.classes(grid_poses, grid_acts, r, trace=True, random=third)  # .., (B, K)
            assert trace is not None  # traced
            scores.append(class_acts)
            entropy.append(coupling_entropy(trace.assignments[:, -1, 0]))  # R_ij of the last M-step: (B, K, I) -> (B,)
        return CouplingScores(torch.stack(scores, dim=1), torch.stack(entropy, dim=1))  # (B, R', K), (B, R')

    def forward(
        self,
        images: Tensor,
        labels: Tensor | None = None,
        *,
        decode_class: Tensor | int | None = None,
        routing_iterations: int | None = None,
        return_trace: bool = False,
        return_layer_traces: bool = False,
        return_primary: bool = False,
        return_features: bool = False,
    ) -> EMCapsNetOutput:
        """Classify (and, with a decoder, redraw) a batch.

        The decoder sees the true label's pose when `labels` are given (always in training), else `decode_class`'s,
        else the prediction's. `return_trace` keeps the class layer's EM routing, `return_layer_traces` the two
        convolutional capsule layers', `return_primary` the primary capsules and `return_features` Conv1's maps of
        this same pass.
        """
        c = self.config
        expected = (c.in_channels, c.image_size, c.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"expected images of shape (B, {', '.join(map(str, expected))}), got {tuple(images.shape)}"
            )
        if self.training and labels is None:
            raise ValueError("training mode needs labels: the decoder is masked by the true class")
        iterations = c.routing_iterations if routing_iterations is None else routing_iterations
        features = F.relu(self.conv1(images))  # (B, A, 12, 12)
        poses, acts = self.primary(features)  # (B, B, 16, 12, 12), (B, B, 12, 12)
        primary = (poses, acts) if return_primary else None
        keep = return_layer_traces
        poses, acts, first = self.convcaps1(poses, acts, iterations, keep)  # (B, C, 16, 5, 5), (B, C, 5, 5)
        poses, acts, second = self.convcaps2(poses, acts, iterations, keep)  # (B, D, 16, 3, 3), (B, D, 3, 3)
        class_poses, class_acts, trace = self.classes(poses, acts, iterations, return_trace)  # (B, K, 16), (B, K)
        prediction = class_acts.argmax(dim=1)  # (B,)
        reconstruction = None
        if self.decoder is not None:
            mask = labels if labels is not None else (decode_class if decode_class is not None else prediction)
            reconstruction = self.decode(class_poses, mask)  # (B, C, H, W)
        return EMCapsNetOutput(
            poses=class_poses,
            activations=class_acts,
            reconstruction=reconstruction,
            prediction=prediction,
            trace=trace,
            layer_traces=(first, second) if first is not None and second is not None else None,
            primary=primary,
            features=features if return_features else None,
        )


def _em_loss(
    out: EMCapsNetOutput, targets: Tensor, labels: Tensor, config: EMCapsNetConfig, progress: float
) -> CapsuleLoss:
    spread = spread_loss(out.activations.float(), labels, config.margin(progress))
    if out.reconstruction is None:
        return CapsuleLoss(total=spread, margin=spread, reconstruction=torch.zeros((), device=spread.device))
    recon = reconstruction_loss(out.reconstruction.float(), targets.float(), config.reconstruction_weight)
    return CapsuleLoss(total=spread + recon, margin=spread, reconstruction=recon)


def _parameter_groups(model: nn.Module, lr: float, beta_lr: float) -> list[dict[str, Any]]:
    """All parameters at `lr`, or, with a `beta_lr` multiplier, the EM layers' learned costs (beta_u and beta_a)
    apart at `lr * beta_lr`. One group when `beta_lr` is 1: a run begun before the option existed still resumes."""
    named = list(model.named_parameters())
    if beta_lr == 1.0:
        return [{"params": [p for _, p in named]}]
    betas = [p for name, p in named if name.rsplit(".", 1)[-1] in BETA_NAMES]
    chosen = {id(p) for p in betas}
    return [{"params": [p for _, p in named if id(p) not in chosen]}, {"params": betas, "lr": lr * beta_lr}]


register(
    Network(
        "em", "EM CapsNet", "EM", "class capsules' activations a_j (EM routing)", "a", "spread loss",
        "a matrix-capsule network routed by EM", EMCapsNetConfig, EMCapsNet, tuple(EM_PRESETS),
        routing=Routing("em", "EM routing"), baseline=False, pairs=False, pairs_field=None,
        _loss=_em_loss, _redraws=lambda config: config.decoder, _parameter_groups=_parameter_groups,
        # compiled, the PyTorch path's steps were 1.0-2.6x faster after 30-40 s of compiling; the kernel's passes
        # (`em_native_training`, where a C compiler is found) train 2-3x faster than that, and compiling would trade
        # them for the PyTorch path
        cpu_compile_from=10_000,
        cpu_compile_needed=lambda: em_native.kernel() is None,
        judges_compiled=False,  # compiled, a reading of 500 holds 43 MB an image on an H100 (eager: 2.7), 1.5x faster
        extra_options=("beta_lr",),
    )
)  # fmt: skip
