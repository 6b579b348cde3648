"""capsnet: Capsule Networks trained, saved and explained: the CapsNet of Sabour, Frosst & Hinton (2017), routed by
agreement, the matrix capsules of Hinton, Sabour & Frosst (2018), routed by EM, and the paper's CNN baseline.

The package is a few wings (see the layout table in docs/layout.md):
- `capsnet.nn`: the networks, their layers, both routing algorithms, configs, losses, and the contract every
  family declares (`capsnet.nn.family`) with its registry;
- `capsnet.data`: datasets, augmentation, MultiMNIST, preprocessing, the task type;
- `capsnet.training`: options, recipes, schedule, the trainer and its run folder;
- `capsnet.readings`: what a trained network does with an input, and measurements of it;
- `capsnet.checkpoints`: self-describing safetensors files, the manifest and the measurements kept beside them;
- `capsnet.runs`: runs as processes, their time estimate, the catalogue of checkpoints, the export that ships one;
- `capsnet.cli`: the command-line tools (`python -m capsnet COMMAND`).

The names below are the public API, imported on first use so that `import capsnet` stays light:

    from capsnet import CapsNet, CapsNetConfig, EMCapsNet, EMCapsNetConfig, load_checkpoint
    model = CapsNet(CapsNetConfig.preset("paper"))
    em = EMCapsNet(EMCapsNetConfig.preset("paper-decoder"))
    shipped = load_checkpoint("checkpoints/mnist-em.safetensors")  # any network family
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

PUBLIC = {
    "CapsNetConfig": "capsnet.nn.config",
    "CapsNet": "capsnet.nn.capsnet",
    "CNNConfig": "capsnet.nn.cnn",
    "BaselineCNN": "capsnet.nn.cnn",
    "EMCapsNetConfig": "capsnet.nn.em_capsnet",
    "EMCapsNet": "capsnet.nn.em_capsnet",
    "squash": "capsnet.nn.squash",
    "dynamic_routing": "capsnet.nn.dynamic_routing",
    "em_routing": "capsnet.nn.em_routing",
    "margin_loss": "capsnet.nn.losses",
    "network": "capsnet.nn.registry",
    "network_of": "capsnet.nn.registry",
    "read_test_set": "capsnet.data.tasks",
    "to_mnist": "capsnet.data.preprocess",
    "TrainOptions": "capsnet.training.options",
    "train": "capsnet.training.trainer",
    "evaluate": "capsnet.evaluation",
    "explain": "capsnet.readings.explain",
    "load_checkpoint": "capsnet.checkpoints.checkpoint",
    "save_checkpoint": "capsnet.checkpoints.checkpoint",
    "CapsNetError": "capsnet.errors",
}
__all__ = ["__version__", *PUBLIC]


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module 'capsnet' has no attribute {name!r}")
    return getattr(importlib.import_module(PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)
