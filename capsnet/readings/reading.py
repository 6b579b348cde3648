"""One input read by any network that routes, in one forward pass: the one type every family's explanation returns.

Sabour, Frosst & Hinton (2017), https://arxiv.org/abs/1710.09829 (dynamic routing); Hinton, Sabour & Frosst (2018),
https://openreview.net/forum?id=HJWLfGWRb (EM routing). A `Reading` holds what every page draws of any family (the
class scores, the prediction, the class capsules' poses, the redrawing where the network redraws) and its routing's
own account (`routing`: dynamic routing's votes and couplings, `capsnet.readings.explain`; EM's class layer and
its two convolutional capsule layers, `capsnet.readings.explain_em` and `capsnet.readings.em_layers`), all from the
same forward pass. `read` asks the network how it routes and calls that routing's reader; no caller names a family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from capsnet.nn.registry import network_of
from capsnet.readings.em_layers import ConvLayerRouting
from capsnet.readings.explain import Explanation, explain
from capsnet.readings.explain_attention import AttentionExplanation, explain_attention
from capsnet.readings.explain_em import EMExplanation, explain_em_with_layers


@dataclass
class Reading:
    """One input read by a network that routes: scores, prediction, poses, the redrawing, and its routing's trace."""

    symbol: str  # the scores' symbol (`Network.score_symbol`): "|v|" or "a"
    image: np.ndarray  # (H, W) the input, in [0, 1]
    scores: np.ndarray  # (K,) the class scores: capsule lengths |v_j|, or EM activations a_j
    prediction: int  # the highest score's class
    poses: np.ndarray  # (K, D) the class capsules' poses: v_j (D = 16), or the 16 entries of each 4x4 mu_j
    reconstruction: np.ndarray | None  # (H, W) redrawn from `decode_class`'s pose; None where nothing redraws
    decode_class: int
    iterations: int  # routing iterations r
    routing: Explanation | EMExplanation | AttentionExplanation | Any  # the routing's own account of this pass
    layers: tuple[ConvLayerRouting, ...] = ()  # EM's ConvCaps1 and ConvCaps2 routed in the same pass, where asked

    @property
    def runner_up(self) -> int:
        """The class with the second-highest score: the prediction's closest rival."""
        return int(np.argsort(-self.scores, kind="stable")[1])


def _dynamic(
    model: Any, image: np.ndarray | torch.Tensor, iterations: int | None, decode_class: int | None, layers: bool
) -> Reading:
    result = explain(model, image, iterations, decode_class)
    return Reading(
        network_of(model).score_symbol, result.image, result.lengths, result.prediction, result.poses, result.reconstruction,
        result.decode_class, result.iterations, result,
    )  # fmt: skip


def _em(
    model: Any, image: np.ndarray | torch.Tensor, iterations: int | None, decode_class: int | None, layers: bool
) -> Reading:
    result, conv = explain_em_with_layers(model, image, iterations, decode_class, layers)
    return Reading(
        network_of(model).score_symbol, result.image, result.activations, result.prediction, result.poses, result.reconstruction,
        result.decode_class, result.iterations, result, conv,
    )  # fmt: skip


def _attention(
    model: Any, image: np.ndarray | torch.Tensor, iterations: int | None, decode_class: int | None, layers: bool
) -> Reading:
    result = explain_attention(model, image, decode_class)
    return Reading(
        network_of(model).score_symbol, result.image, result.lengths, result.prediction, result.poses,
        result.reconstruction, result.decode_class, 1, result,
    )  # fmt: skip


READERS: dict[str, Callable[[Any, np.ndarray | torch.Tensor, int | None, int | None, bool], Reading]] = {
    "dynamic": _dynamic,
    "em": _em,
    "attention": _attention,
}  # by the network's routing (`Routing.kind`)


def register_reader(
    kind: str, reader: Callable[[Any, np.ndarray | torch.Tensor, int | None, int | None, bool], Reading]
) -> None:
    """Add the reader of a routing (`Routing.kind`), from its family's own module; ValueError for a kind read
    already."""
    if kind in READERS:
        raise ValueError(f"a reader for {kind!r} routing is registered already")
    READERS[kind] = reader


def read(
    model: Any,
    image: np.ndarray | torch.Tensor,
    iterations: int | None = None,
    decode_class: int | None = None,
    layers: bool = False,
) -> Reading:
    """Read one image (H, W) in [0, 1] with `model` (eval mode) in one forward pass, at its own routing count or
    `iterations`, redrawn from its prediction or `decode_class`; with `layers`, the routing of every capsule layer
    before the class layer too (EM's ConvCaps1 and ConvCaps2). ValueError for a network that does not route."""
    routing = network_of(model).routes()
    if routing.kind not in READERS:
        raise ValueError(f"{network_of(model).described} has no reader for its {routing.title}")
    return READERS[routing.kind](model, image, iterations, decode_class, layers)
