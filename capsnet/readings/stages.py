"""The network stage by stage: every tensor's shape and parameter count, and what each stage computes on one input.

Sabour, Frosst & Hinton (2017), figures 1 and 2. The shapes come from a `CapsNetConfig` alone, so a
tiny or a MultiMNIST model is described as it is built:

    input (1, 28, 28) -> Conv1 (256, 20, 20) -> PrimaryCaps 32 x 6 x 6 capsules of 8-D = (1152, 8)
      -> votes u_hat_{j|i} = W_ij u_i, 1152 x 10 matrices 16x8: (10, 1152, 16)
      -> routing by agreement -> DigitCaps (10, 16) -> decoder 160 -> 512 -> 1024 -> 784 = (1, 28, 28)

`stages` lists them with their parameters (they add up to the model's own count). What they compute on
one input is its explanation (`capsnet.readings.explain.explain`: one forward pass that keeps every
intermediate result, the same reading the Routing page draws), and `capsule_view` picks one primary
capsule and one digit capsule out of it: the capsule's pose, length and receptive field, its
matrix W_ij and the vote it casts, and its couplings in each routing iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from capsnet.nn.capsnet import CapsNet
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.efficient_capsnet import EfficientCapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNetConfig
from capsnet.nn.matrix_capsules import POSE_ENTRIES
from capsnet.nn.registry import network_of
from capsnet.readings.agreement import (
    PrimaryReading,
    first_primary,
    primary_reading,
    receptive_fields,
)
from capsnet.readings.explain import Explanation

STAGE_KEYS = ("input", "conv1", "primary", "votes", "routing", "decoder")
# the EM network's (Hinton, Sabour & Frosst 2018, figure 1): three capsule layers, each routed by EM
EM_STAGE_KEYS = ("input", "conv1", "primary", "convcaps1", "convcaps2", "classes", "decoder")
# Efficient-CapsNet's (Mazzia, Salvetti & Chiaberge 2021): convolutions, one depthwise layer of capsules, one pass
EFFICIENT_STAGE_KEYS = ("input", "convs", "primary", "votes", "routing", "decoder")


@dataclass(frozen=True)
class Stage:
    """One stage of the network: what it does, the tensor it outputs (per example) and its parameters."""

    key: str  # one of STAGE_KEYS
    title: str
    operation: str  # what the stage does, in a few words
    shape: tuple[int, ...]  # its output, per example
    parameters: int
    steps: tuple[tuple[str, tuple[int, ...]], ...]  # the tensors on the way, (name, shape), ending with the output


def _conv_parameters(in_channels: int, out_channels: int, kernel: int) -> int:
    return in_channels * out_channels * kernel * kernel + out_channels  # weights + one bias per output channel


def stages(config: CapsNetConfig) -> tuple[Stage, ...]:
    """The six stages of `config`'s network, input first; their `parameters` sum to the model's count."""
    c = config
    side = c.image_size - c.conv1_kernel + 1  # Conv1's output side: 20 for 28x28 inputs
    g, n, k, d, p = c.primary_grid, c.num_primary, c.num_classes, c.digit_dim, c.primary_dim
    widths = (k * d, *c.decoder_hidden, c.image_pixels)  # 160 -> 512 -> 1024 -> 784
    decoder = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))  # fully connected layers, with biases
    image = (c.in_channels, c.image_size, c.image_size)
    return (
        Stage("input", "Input", "the image, pixels in [0, 1]", image, 0, (("x", image),)),
        Stage(
            "conv1",
            "Conv1",
            f"{c.conv1_channels} kernels {c.conv1_kernel}x{c.conv1_kernel}, stride 1, ReLU",
            (c.conv1_channels, side, side),
            _conv_parameters(c.in_channels, c.conv1_channels, c.conv1_kernel),
            (("x", image), ("feature maps a", (c.conv1_channels, side, side))),
        ),
        Stage(
            "primary",
            "PrimaryCaps",
            f"{c.primary_kernel}x{c.primary_kernel} convolution, stride {c.primary_stride}, "
            f"{c.primary_types} types x {g}x{g} positions of {p}-D capsules, squashed",
            (n, p),
            _conv_parameters(c.conv1_channels, c.primary_types * p, c.primary_kernel),
            (
                ("convolution", (c.primary_types * p, g, g)),
                ("grouped in capsules", (c.primary_types, p, g, g)),
                ("capsules u_i", (n, p)),
            ),
        ),
        Stage(
            "votes",
            "Votes",
            f"one {d}x{p} matrix W_ij per pair: {n:,} x {k} matrices",
            (k, n, d),
            n * k * d * p,
            (("u_i", (p,)), ("W_ij", (d, p)), ("votes u_hat_{j|i}", (k, n, d))),
        ),
        Stage(
            "routing",
            "DigitCaps",
            f"routing by agreement, {c.routing_iterations} iterations: no weights of its own",
            (k, d),
            0,
            (("couplings c_ij", (n, k)), ("sums s_j", (k, d)), ("capsules v_j", (k, d)), ("lengths |v_j|", (k,))),
        ),
        Stage(
            "decoder",
            "Decoder",
            "all capsules but one masked, then fully connected " + " -> ".join(f"{w:,}" for w in widths),
            image,
            decoder,
            (
                ("masked capsules", (k, d)),
                *((f"layer {i + 1}", (w,)) for i, w in enumerate(widths[1:])),
                ("x_hat", image),
            ),
        ),
    )


def em_stages(config: EMCapsNetConfig) -> tuple[Stage, ...]:
    """The stages of `config`'s EM network, input first (the decoder only when it has one); their `parameters` sum
    to the model's count. A capsule is a 4x4 pose and an activation: 17 numbers, (capsules, 17) per layer."""
    c = config
    h = POSE_ENTRIES
    image = (c.in_channels, c.image_size, c.image_size)
    g1, g2, g3 = c.conv1_grid, c.convcaps1_grid, c.convcaps2_grid
    b, cc, d, k, kk = c.primary_types, c.convcaps1_types, c.convcaps2_types, c.num_classes, c.convcaps_kernel
    routed = f"EM routing, {c.routing_iterations} iterations"

    def conv_caps(key: str, title: str, types_in: int, types: int, stride: int, grid_in: int, grid: int) -> Stage:
        window = kk * kk * types_in  # children in one window
        return Stage(
            key, title, f"{kk}x{kk} capsule convolution, stride {stride}, {routed}", (types * grid * grid, h + 1),
            window * types * h + 2 * types,  # a 4x4 W per (kernel cell, child type, parent type); beta_u, beta_a
            (
                ("children", (types_in * grid_in * grid_in, h + 1)),
                ("votes V_ij per window", (grid * grid, types, window, h)),
                ("assignments R_ij", (grid * grid, types, window)),
                ("capsules (mu_j, a_j)", (types * grid * grid, h + 1)),
            ),
        )  # fmt: skip

    children = d * g3 * g3
    widths = (k * h, *c.decoder_hidden, c.image_pixels)
    decoder = sum(a * w + w for a, w in zip(widths[:-1], widths[1:]))
    out = (
        Stage("input", "Input", "the image, pixels in [0, 1]", image, 0, (("x", image),)),
        Stage(
            "conv1", "ReLU Conv1",
            f"{c.conv1_channels} kernels {c.conv1_kernel}x{c.conv1_kernel}, stride {c.conv1_stride}, ReLU",
            (c.conv1_channels, g1, g1), _conv_parameters(c.in_channels, c.conv1_channels, c.conv1_kernel),
            (("x", image), ("feature maps", (c.conv1_channels, g1, g1))),
        ),
        Stage(
            "primary", "PrimaryCaps",
            f"1x1 convolution: {b} types x {g1}x{g1} positions of a 4x4 pose and a sigmoid activation",
            (b * g1 * g1, h + 1),
            _conv_parameters(c.conv1_channels, b * h, 1) + _conv_parameters(c.conv1_channels, b, 1),
            (("poses M_i", (b, h, g1, g1)), ("activations a_i", (b, g1, g1)), ("capsules", (b * g1 * g1, h + 1))),
        ),
        conv_caps("convcaps1", "ConvCaps1", b, cc, c.convcaps1_stride, g1, g2),
        conv_caps("convcaps2", "ConvCaps2", cc, d, c.convcaps2_stride, g2, g3),
        Stage(
            "classes", "Class capsules",
            f"one W per (type, class), coordinate addition, {routed}", (k, h + 1), d * k * h + 2 * k,
            (("votes V_ij", (k, children, h)), ("assignments R_ij", (k, children)), ("poses mu_j", (k, h)),
             ("activations a_j", (k,))),
        ),
    )  # fmt: skip
    if not c.decoder:
        return out
    return (
        *out,
        Stage(
            "decoder", "Decoder",
            "all poses but one masked, then fully connected " + " -> ".join(f"{w:,}" for w in widths),
            image, decoder,
            (("masked poses", (k, h)), *((f"layer {i + 1}", (w,)) for i, w in enumerate(widths[1:])), ("x_hat", image)),
        ),
    )  # fmt: skip


def efficient_stages(config: EfficientCapsNetConfig) -> tuple[Stage, ...]:
    """The stages of `config`'s Efficient-CapsNet (Mazzia et al. 2021, figure 1), input first (the decoder only when
    it has one); their `parameters` sum to the model's count (161,824 without the decoder for the paper's)."""
    c = config
    image = (c.in_channels, c.image_size, c.image_size)
    n, k, p, d, f = c.num_primary, c.num_classes, c.primary_dim, c.digit_dim, c.feature_side
    steps: list[tuple[str, tuple[int, ...]]] = [("x", image)]
    convs, fan_in, side = 0, c.in_channels, c.image_size
    for width, kernel, stride in c.convs:
        side = (side - kernel) // stride + 1
        convs += _conv_parameters(fan_in, width, kernel) + 2 * width  # and batch norm's scale and shift
        steps.append((f"conv {kernel}x{kernel}" + (f" stride {stride}" if stride > 1 else ""), (width, side, side)))
        fan_in = width
    widths = (k * d, *c.decoder_hidden, c.image_pixels)
    out = (
        Stage("input", "Input", "the image, pixels in [0, 1]", image, 0, (("x", image),)),
        Stage(
            "convs", "Convolutions", f"{len(c.convs)} convolutions, each with ReLU and batch norm",
            (fan_in, f, f), convs, tuple(steps),
        ),
        Stage(
            "primary", "PrimaryCaps", f"depthwise {f}x{f} convolution over the whole map: {n} capsules of {p}, squashed",
            (n, p), fan_in * f * f + fan_in, (("depthwise convolution", (fan_in, 1, 1)), ("capsules u_i", (n, p))),
        ),
        Stage(
            "votes", "Votes", f"one {d}x{p} matrix W_ij per pair: {n} x {k} matrices", (k, n, d), k * n * p * d,
            (("u_i", (p,)), ("W_ij", (d, p)), ("votes u_hat_{j|i}", (k, n, d))),
        ),
        Stage(
            "routing", "Class capsules", "self-attention routing, one pass, and a learned bias b_ij", (k, d), k * n,
            (("agreement", (k, n)), ("couplings c_ij", (n, k)), ("capsules v_j", (k, d)), ("lengths |v_j|", (k,))),
        ),
    )  # fmt: skip
    if not c.decoder_hidden:
        return out
    decoder = sum(a * w + w for a, w in zip(widths[:-1], widths[1:]))
    return (
        *out,
        Stage(
            "decoder", "Decoder",
            "all capsules but one masked, then fully connected " + " -> ".join(f"{w:,}" for w in widths), image,
            decoder,
            (("masked capsules", (k, d)), *((f"layer {i + 1}", (w,)) for i, w in enumerate(widths[1:])),
             ("x_hat", image)),
        ),
    )  # fmt: skip


# by the network's routing: vector capsules, matrix capsules, vector capsules routed by self-attention
STAGES: dict[str, Callable[[Any], tuple[Stage, ...]]] = {
    "dynamic": stages,
    "em": em_stages,
    "attention": efficient_stages,
}


def stages_of(config: CapsNetConfig | EMCapsNetConfig | EfficientCapsNetConfig) -> tuple[Stage, ...]:
    """The stages of a capsule network's config, by its routing; ValueError for a network that does not route."""
    routing = network_of(config).routing
    if routing is None:
        raise ValueError(f"{network_of(config).described} has no capsule stages to show")
    return STAGES[routing.kind](config)


def parameter_count(config: CapsNetConfig | EMCapsNetConfig | EfficientCapsNetConfig, decoder: bool = True) -> int:
    """The network's parameters, stage by stage: 8,215,568 for the paper's CapsNet (6,804,224 without the decoder),
    318,964 for the EM paper's network."""
    return sum(s.parameters for s in stages_of(config) if decoder or s.key != "decoder")


# ---------------------------------------------------------------- one input, stage by stage
# One input's stages are the explanation's (`capsnet.readings.explain.explain`): the same forward pass, kept whole.


def strongest_maps(features: np.ndarray, count: int) -> np.ndarray:
    """The indices of the `count` feature maps (C, S, S) with the largest mean activation, strongest first."""
    means = np.asarray(features, dtype=np.float32).mean(axis=(1, 2))  # (C,)
    return np.argsort(-means, kind="stable")[: max(0, int(count))]


@dataclass
class CapsuleView:
    """One primary capsule i, one digit capsule j, and what passes between them."""

    primary: PrimaryReading  # i: its position, length, couplings and agreements (as the Routing page reads it)
    pose: np.ndarray  # (P,) u_i
    field: np.ndarray  # (H, W) bool: the input pixels it sees
    window: tuple[int, int]  # the top-left corner (row, column) of the Conv1 window it reads, as wide as its kernel
    digit: int  # j
    weight: np.ndarray  # (D, P) W_ij
    vote: np.ndarray  # (D,) u_hat_{j|i} = W_ij u_i, as the forward pass computed it
    vote_lengths: np.ndarray  # (K,) |u_hat_{j|i}| of its votes for every digit capsule


def capsule_view(model: CapsNet, reading: Explanation, capsule: int | None, digit: int | None) -> CapsuleView:
    """Primary capsule `capsule` (None: `agreement.first_primary`) and digit capsule `digit` (None: the prediction) of a reading.

    W_ij is read from the model; everything else comes from the reading's forward pass.
    """
    c = model.config
    capsule = first_primary(reading.votes, reading.image, c) if capsule is None else int(capsule)
    primary = primary_reading(reading.votes, c, capsule)
    j = reading.prediction if digit is None else c.check_class(digit)
    weight = model.digits.weight[capsule, j].detach().float().cpu().numpy()  # (D, P)
    votes = reading.votes.votes  # (K, N, D)
    return CapsuleView(
        primary=primary,
        pose=reading.primary[capsule],
        field=receptive_fields(c)[primary.y, primary.x],
        window=(primary.y * c.primary_stride, primary.x * c.primary_stride),
        digit=j,
        weight=weight,
        vote=votes[j, capsule],
        vote_lengths=np.linalg.norm(votes[:, capsule], axis=-1),
    )
