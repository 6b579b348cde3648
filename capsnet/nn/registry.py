"""The networks a checkpoint can hold, as a registry: one `Network` contract per network.

In the spirit of timm's `create_model`: each network declares its name, its config type and
presets, its module, what it offers (capsules: poses, routing and reconstructions) and its own
loss, and every caller asks the registry (`network("cnn")`, `network_of(model_or_config)`) instead
of testing types. "capsnet" is the paper's Capsule Network (`capsnet.nn.capsnet`), "cnn" its baseline
(`capsnet.nn.cnn`), "em" the matrix capsules of the second paper, routed by EM (`capsnet.nn.em_capsnet`). Both forward passes take (images, labels) and return an output with `scores`
(B, K) and `prediction` (B,), so the trainer and the evaluation treat them alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from capsnet.nn.capsnet import CapsNet, CapsNetOutput
from capsnet.nn.cnn import CNN_PRESETS, BaselineCNN, CNNConfig, CNNOutput, cnn_loss
from capsnet.nn.config import PRESETS, CapsNetConfig
from capsnet.nn.em_capsnet import EM_PRESETS, EMCapsNet, EMCapsNetConfig, EMCapsNetOutput
from capsnet.nn.losses import CapsuleLoss, capsule_loss, reconstruction_loss, spread_loss

AnyConfig = CapsNetConfig | CNNConfig | EMCapsNetConfig
AnyModel = CapsNet | BaselineCNN | EMCapsNet


@dataclass(frozen=True)
class Network:
    """What one network is and offers: "network" is the one name for it, in the CLI (`--network`), the header and the code."""

    name: str  # the registry key, stored in checkpoint headers and run arguments: "capsnet" or "cnn"
    title: str  # for people: "CapsNet", "CNN baseline", "EM CapsNet"
    short: str  # before a preset's name in a table: "" (the CapsNet's presets stand alone), "CNN", "EM"
    scores: str  # what its class scores are, for people: "capsule lengths", "class probabilities", ...
    loss_name: str  # what its loss is, for people: "margin loss", "cross-entropy", "spread loss"
    described: str  # in a sentence: "a Capsule Network", "a CNN baseline"
    config_type: type[AnyConfig]
    module_type: type
    presets: tuple[str, ...]
    capsules: bool  # vector capsules: lengths, dynamic routing's trace, reconstructions (the dashboard's views)
    baseline: bool  # a baseline the capsule networks are compared with (shipped in checkpoints/baselines/)
    # training options (`TrainOptions` fields) that only this network reads; those that are fields of its config
    # (routing_iterations) set the config, the others (the EM network's beta_lr) the training
    run_options: tuple[str, ...]
    pairs: bool  # can read a task with several labels per example (MultiMNIST's pairs)
    pairs_field: str | None  # the config field that a task with several labels per example sets, if any
    _loss: Callable[..., CapsuleLoss]
    # the fewest training images from which `torch.compile` pays for itself on a CPU (its half a minute of compiling
    # won back by faster steps), None where it never does: measured in benchmarks/README.md
    cpu_compile_from: int | None = None

    def preset(self, name: str, **overrides: Any) -> AnyConfig:
        """The named preset, with field overrides (ValueError for an unknown name or field)."""
        return self.config_type.preset(name, **overrides)

    def config_for(self, preset: str, image_size: int, pairs: bool, **overrides: Any) -> AnyConfig:
        """The preset for a task: its input size and, where the network has the field, several labels per example."""
        fields = {"image_size": image_size, **({self.pairs_field: pairs} if self.pairs_field else {}), **overrides}
        return self.preset(preset, **fields)

    def from_dict(self, data: dict[str, Any]) -> AnyConfig:
        """A stored config; unknown keys are a ValueError."""
        return self.config_type.from_dict(data)

    def build(self, config: AnyConfig) -> AnyModel:
        """A freshly initialised network for `config`."""
        if not isinstance(config, self.config_type):
            raise ValueError(f"a {self.title} needs a {self.config_type.__name__}, got {type(config).__name__}")
        return self.module_type(config)

    def loss(self, out: Any, targets: Tensor, labels: Tensor, config: AnyConfig, progress: float = 1.0) -> CapsuleLoss:
        """The training loss: margin + reconstruction for the CapsNet, cross-entropy for the CNN, spread loss (+
        reconstruction, with a decoder) for the EM network.

        `targets` are what reconstructions are compared with (the images, or MultiMNIST's digits alone); `progress`
        (0 to 1) is how far training is, for the EM network's annealed margin (1 when evaluating).
        """
        return self._loss(out, targets, labels, config, progress)


def _capsnet_loss(out: CapsNetOutput, targets: Tensor, labels: Tensor, config: CapsNetConfig, _: float) -> CapsuleLoss:
    return capsule_loss(out.lengths, out.reconstruction, targets, labels, config)


def _cnn_loss(out: CNNOutput, targets: Tensor, labels: Tensor, config: CNNConfig, _: float) -> CapsuleLoss:
    return cnn_loss(out.logits, labels, config)


def _em_loss(
    out: EMCapsNetOutput, targets: Tensor, labels: Tensor, config: EMCapsNetConfig, progress: float
) -> CapsuleLoss:
    spread = spread_loss(out.activations.float(), labels, config.margin(progress))
    if out.reconstruction is None:
        return CapsuleLoss(total=spread, margin=spread, reconstruction=torch.zeros((), device=spread.device))
    recon = reconstruction_loss(out.reconstruction.float(), targets.float(), config.reconstruction_weight)
    return CapsuleLoss(total=spread + recon, margin=spread, reconstruction=recon)


NETWORKS: dict[str, Network] = {
    "capsnet": Network(
        "capsnet", "CapsNet", "", "capsule lengths", "margin loss", "a Capsule Network", CapsNetConfig, CapsNet, tuple(PRESETS), capsules=True,
        baseline=False, run_options=("routing_iterations",), pairs=True, pairs_field=None, _loss=_capsnet_loss,
    ),
    "cnn": Network(
        "cnn", "CNN baseline", "CNN", "class probabilities (a CNN has no capsules to redraw from)", "cross-entropy",
        "a CNN baseline",
        CNNConfig, BaselineCNN, tuple(CNN_PRESETS), capsules=False,
        baseline=True, run_options=(), pairs=True, pairs_field="multi_label", _loss=_cnn_loss,
    ),
    "em": Network(
        "em", "EM CapsNet", "EM", "class capsules' activations a_j (EM routing)", "spread loss",
        "a matrix-capsule network routed by EM",
        EMCapsNetConfig, EMCapsNet, tuple(EM_PRESETS),
        capsules=False, baseline=False, run_options=("routing_iterations", "beta_lr"), pairs=False, pairs_field=None,
        _loss=_em_loss, cpu_compile_from=10_000,  # 1.8-2.6x faster steps after 30-40 s of compiling
    ),
}  # fmt: skip
NETWORK_NAMES = tuple(NETWORKS)


def network(name: str) -> Network:
    """The registered network called `name`; ValueError naming the known ones otherwise."""
    if name not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; this capsnet reads {', '.join(NETWORKS)}")
    return NETWORKS[name]


def network_of(thing: AnyConfig | AnyModel) -> Network:
    """The network a config, or a model built from one, belongs to."""
    config = getattr(thing, "config", thing)
    for candidate in NETWORKS.values():
        if isinstance(config, candidate.config_type):
            return candidate
    raise ValueError(f"not a config of a registered network: {type(config).__name__}")
