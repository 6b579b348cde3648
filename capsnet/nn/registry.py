"""The registry of network families: the shipped ones registered, and the lookups every caller uses.

Each family registers its `Network` (`capsnet.nn.family`: what it is and what it can do) from its own module:
"capsnet", the paper's Capsule Network (`capsnet.nn.capsnet`); "cnn", its baseline (`capsnet.nn.cnn`); "em", the
matrix capsules of the second paper, routed by EM (`capsnet.nn.em_capsnet`). Importing this module registers them.
Callers ask `network(name)` or `network_of(model_or_config)` and then the network's capabilities, never its name
or class. Every forward pass takes (images, labels) and returns an output with `scores` (B, K) and `prediction`
(B,), so the trainer and the evaluation treat the families alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capsnet.nn import capsnet, cnn, em_capsnet  # noqa: F401  (each registers its family; Efficient-CapsNet below)
from capsnet.nn.capsnet import CapsNet
from capsnet.nn.cnn import BaselineCNN, CNNConfig
from capsnet.nn.config import CapsNetConfig
from capsnet.nn.efficient_capsnet import EfficientCapsNet, EfficientCapsNetConfig
from capsnet.nn.em_capsnet import EMCapsNet, EMCapsNetConfig
from capsnet.nn.family import NETWORKS, Network, Routing, register

__all__ = [
    "NETWORKS",
    "NETWORK_NAMES",
    "AnyConfig",
    "AnyModel",
    "Network",
    "Routing",
    "named",
    "network",
    "network_of",
    "register",
]

AnyConfig = CapsNetConfig | CNNConfig | EMCapsNetConfig | EfficientCapsNetConfig
AnyModel = CapsNet | BaselineCNN | EMCapsNet | EfficientCapsNet


class _Names(Sequence[str]):
    """The registered networks' names, read from the registry whenever asked: a family registered after this module
    was imported is among them (the CLI's choices, the networks a checkpoint may hold)."""

    def __len__(self) -> int:
        return len(NETWORKS)

    def __getitem__(self, index: Any) -> Any:
        return tuple(NETWORKS)[index]

    def __contains__(self, name: object) -> bool:
        return name in NETWORKS

    def __repr__(self) -> str:
        return repr(tuple(NETWORKS))


NETWORK_NAMES: Sequence[str] = _Names()  # every registered family, the shipped ones first


def network(name: str) -> Network:
    """The registered network called `name`; ValueError naming the known ones otherwise."""
    if name not in NETWORKS:
        raise ValueError(f"unknown network {name!r}; this capsnet reads {', '.join(NETWORKS)}")
    return NETWORKS[name]


def named(name: str | None) -> Network | None:
    """The registered network called `name` where there is one (a file's stored name), else None: a name from
    another version of capsnet, or none at all."""
    return NETWORKS.get(name) if name is not None else None


def network_of(thing: Any) -> Network:
    """The network a config, or a model built from one, belongs to."""
    config = getattr(thing, "config", thing)
    matches = [candidate for candidate in NETWORKS.values() if isinstance(config, candidate.config_type)]
    if not matches:
        raise ValueError(f"not a config of a registered network: {type(config).__name__}")
    # the nearest: a family whose config subclasses another family's is its own, not the other's
    return min(matches, key=lambda candidate: type(config).__mro__.index(candidate.config_type))
