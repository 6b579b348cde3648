"""The one typed configuration of a Capsule Network, with named presets.

Every hyper-parameter of the model and its loss lives here, so that a checkpoint
can describe itself by storing this dataclass as JSON and `load_checkpoint` can
rebuild exactly the network that was trained.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from capsnet.errors import InvalidArgumentError
from capsnet.nn.routing import MAX_ROUTING_ITERATIONS

INITS = ("torch", "official")


@dataclass(frozen=True)
class CapsNetConfig:
    """Hyper-parameters of CapsNet (Sabour, Frosst & Hinton 2017, section 4)."""

    # input
    in_channels: int = 1
    image_size: int = 28
    num_classes: int = 10
    # Conv1: 256 channels, 9x9, stride 1, ReLU
    conv1_channels: int = 256
    conv1_kernel: int = 9
    # PrimaryCaps: 32 types of 8-D capsules, 9x9 convolution, stride 2
    primary_types: int = 32
    primary_dim: int = 8
    primary_kernel: int = 9
    primary_stride: int = 2
    # the official code's PrimaryCaps multiplies its convolution's output by 1/32 before the bias (softmax(0) over
    # its 32 types: a capsule layer with one routing iteration); 1.0 in the shipped 28x28 models
    primary_scale: float = 1.0
    # DigitCaps: one 16-D capsule per class, reached by dynamic routing
    digit_dim: int = 16
    routing_iterations: int = 3
    # the CIFAR-10 network's "none-of-the-above" category for the routing softmaxes (section 7): a child's couplings
    # may go to no class, c_ij = exp b_ij / (1 + sum_k exp b_ik) (the official code's leaky routing); no parameters
    none_of_the_above: bool = False
    # decoder: FC 512 ReLU, FC 1024 ReLU, FC H*W*C sigmoid
    decoder_hidden: tuple[int, ...] = (512, 1024)
    # margin loss (equation 4) and reconstruction weight (section 4.1)
    m_plus: float = 0.9
    m_minus: float = 0.1
    down_weight: float = 0.5
    reconstruction_weight: float = 0.0005
    # how the weights start: "torch" (PyTorch's layer defaults, W_ij ~ N(0, 1/(8*10)): the shipped 28x28 models) or
    # "official" (the official code's: truncated normals, sigma 0.05 for Conv1 and 0.1 for PrimaryCaps and W_ij,
    # every bias 0.1); only a fresh model reads it
    init: str = "torch"

    def __post_init__(self) -> None:
        # types first: a config read from a file's header may hold anything JSON can
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int":
                if not _is_int(value) or value < 1:
                    raise ValueError(f"{f.name} must be a whole number >= 1, got {value!r}")
            elif f.type == "bool":
                if not isinstance(value, bool):
                    raise ValueError(f"{f.name} must be true or false, got {value!r}")
            elif f.type == "float":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"{f.name} must be a finite number, got {value!r}")
        if self.routing_iterations > MAX_ROUTING_ITERATIONS:
            raise ValueError(
                f"routing_iterations must be at most {MAX_ROUTING_ITERATIONS}, got {self.routing_iterations}"
            )
        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        if not self.primary_scale > 0:
            raise ValueError(f"primary_scale must be greater than 0, got {self.primary_scale!r}")
        hidden = self.decoder_hidden
        if not isinstance(hidden, (tuple, list)) or not all(_is_int(n) and n >= 1 for n in hidden):
            raise ValueError(f"decoder_hidden must be a sequence of widths >= 1, got {hidden!r}")
        if self.primary_grid < 1:
            raise ValueError(
                f"image_size {self.image_size} is too small for conv1_kernel {self.conv1_kernel} "
                f"and primary_kernel {self.primary_kernel}"
            )

    @property
    def uniform_coupling(self) -> float:
        """c_ij before routing has measured any agreement (b_ij = 0): 1/K, or 1/(K+1) with "none of the above"."""
        return 1.0 / (self.num_classes + int(self.none_of_the_above))

    @property
    def primary_grid(self) -> int:
        """Side of the PrimaryCaps grid: 6 for 28x28 inputs."""
        conv1_out = self.image_size - self.conv1_kernel + 1
        return (conv1_out - self.primary_kernel) // self.primary_stride + 1

    @property
    def num_primary(self) -> int:
        """Number of primary capsules: 32 * 6 * 6 = 1152 for the paper's model."""
        return self.primary_types * self.primary_grid**2

    def check_class(self, index: int) -> int:
        """`index` as an int when it names a class (ValueError otherwise)."""
        return class_index(index, self.num_classes)

    def primary_position(self, index: int) -> tuple[int, int, int]:
        """(type, y, x) of primary capsule `index`, all from 0: the capsules are laid out type by type, row-major."""
        if not 0 <= index < self.num_primary:
            raise ValueError(f"primary capsule must lie in [0, {self.num_primary}), got {index}")
        kind, cell = divmod(int(index), self.primary_grid**2)
        return (kind, *divmod(cell, self.primary_grid))

    @property
    def image_pixels(self) -> int:
        return self.in_channels * self.image_size**2

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CapsNetConfig:
        """Rebuild a config from `to_dict` output; unknown keys are an error."""
        return config_from_fields(cls, data)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> CapsNetConfig:
        """A named preset (see `PRESETS`), with optional field overrides."""
        return preset_of(PRESETS, name, overrides)


def class_index(index: int, num_classes: int) -> int:
    """`index` as an int when it names one of `num_classes` classes (ValueError otherwise): every config's
    `check_class`."""
    if not 0 <= int(index) < num_classes:
        raise ValueError(f"class index must lie in [0, {num_classes}), got {index}")
    return int(index)


def config_from_fields(cls: Any, data: dict[str, Any]) -> Any:
    """A config dataclass `cls` from its `to_dict` output (JSON lists back to tuples); unknown keys are an error."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown config keys: {', '.join(unknown)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def preset_of(presets: dict[str, Any], name: str, overrides: dict[str, Any]) -> Any:
    """The config named `name` in `presets`, with field overrides; InvalidArgumentError for an unknown name."""
    if name not in presets:
        raise InvalidArgumentError(f"unknown preset {name!r}; choose from {', '.join(presets)}")
    return dataclasses.replace(presets[name], **overrides)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


PRESETS: dict[str, CapsNetConfig] = {
    # the paper's model: 8,215,568 parameters on 28x28 inputs, 6,804,224 without the decoder
    "paper": CapsNetConfig(),
    # the paper's network with the official code's initial scales (the 1/32 on PrimaryCaps, its initial weights): the
    # same parameters, and on 36x36 or 40x40 inputs (3,200 or 4,608 primary capsules) it learns at lr 1e-3, where
    # "paper" saturates every capsule within a few dozen steps (tests/test_initial_scales.py)
    "official": CapsNetConfig(primary_scale=1 / 32, init="official"),
    # the same on MultiMNIST's 36x36 pairs: a 10x10 primary grid, 3,200 primary capsules, 11,361,808 parameters
    # (the shipped multimnist.safetensors predates the official scales: its header says primary_scale 1.0)
    "multimnist": CapsNetConfig(image_size=36, primary_scale=1 / 32, init="official"),
    # the paper's CIFAR-10 network (section 7): colour 32x32 inputs and 64 primary capsule types, an 8x8 grid of 4,096
    # primary capsules; with the official code's initial scales, as for the other inputs larger than 28x28, and the
    # paper's "none-of-the-above" category for the routing softmaxes (`--preset paper` on CIFAR-10 goes without it; the
    # paper's ensemble of seven, trained on 24x24 patches, is not built here)
    "cifar10": CapsNetConfig(
        in_channels=3, image_size=32, primary_types=64, primary_scale=1 / 32, init="official", none_of_the_above=True
    ),
    # no routing at all: the paper's network with its couplings left uniform, each primary capsule's votes averaged
    # into the class capsules (the "r = 0" network of the papers that ask whether routing matters), trained that way
    "no-routing": CapsNetConfig(routing_iterations=1),
    # a small network for tests and quick demos: same structure, narrower layers
    "tiny": CapsNetConfig(conv1_channels=32, primary_types=8, primary_dim=8, digit_dim=16, decoder_hidden=(64, 128)),
}
